package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Follow the sun (the placement proof): the write load moves from one
// region with a voter to another and back; the leader should follow it
// (placement: auto), and under a balanced load it should stay put. The
// same load against ZooKeeper, whose leader stays where it was put (the
// region farthest from the load: FollowSunZKLeader), is the comparison.

// FollowSunParams sizes the workload.
type FollowSunParams struct {
	Phase   time.Duration // length of each phase
	Writers int           // clients writing in a loop, in the phase's region
}

// followRegions returns the client regions that have a voter, in the
// topology's client order: the regions the load moves between.
func followRegions(t *Topology) []string {
	var regions []string
	for _, r := range clientRegions(t) {
		if slices.Contains(t.Servers, r) {
			regions = append(regions, r)
		}
	}
	return regions
}

// FollowSunZKLeader returns the server region farthest from the first
// loaded region, where the ZooKeeper comparison puts its leader ("" when
// the topology has no two client regions with a voter).
func FollowSunZKLeader(t *Topology) string {
	regions := followRegions(t)
	if len(regions) < 2 {
		return ""
	}
	far := ""
	for _, s := range t.Servers {
		if far == "" || t.RTT(regions[0], s) > t.RTT(regions[0], far) {
			far = s
		}
	}
	return far
}

// RunFollowSun runs the phases on a cluster. On Meridian (placement on)
// each shifted phase yields writes and one client's lock acquires before
// and after the leader reached the loaded region, and the balanced phase
// its leader changes. On a system without placement (ZooKeeper) the leader
// does not move: each of the first two loaded regions gets one phase,
// measured as a whole.
func RunFollowSun(c *Cluster, t *Topology, f Flavor, p FollowSunParams, progress func(string)) []Result {
	regions := followRegions(t)
	if len(regions) < 2 || c.Leader == nil {
		return nil // nowhere to move to
	}
	moves := c.System == "meridian"
	phases := [][]string{{regions[0]}, {regions[1]}, {regions[0]}, regions}
	if !moves {
		phases = phases[:2]
	}
	var out []Result
	for i, loaded := range phases {
		balanced := len(loaded) > 1
		before, after := newHist(), newHist()
		lockBefore, lockAfter := newHist(), newHist()
		var mu sync.Mutex
		var converged time.Duration = -1
		changes, last := 0, c.Leader()
		start := time.Now()
		done := make(chan struct{})
		var wg sync.WaitGroup
		errors := 0
		fail := func() {
			mu.Lock()
			errors++
			mu.Unlock()
		}
		// loop repeats op until the phase ends, timing each call into early
		// (before the leader reached the loaded region) or late; then, if
		// op returns one, runs an untimed follow-up (a hold and release).
		loop := func(early, late *hdrhistogram.Histogram, op func(context.Context) (func(), error)) {
			for {
				select {
				case <-done:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				s := time.Now()
				then, err := op(ctx)
				el := time.Since(s)
				cancel()
				mu.Lock()
				switch {
				case err != nil:
					errors++
				case converged < 0:
					early.RecordValue(el.Microseconds())
				default:
					late.RecordValue(el.Microseconds())
				}
				mu.Unlock()
				if err == nil && then != nil {
					then()
				}
			}
		}
		for w := 0; w < p.Writers*len(loaded); w++ {
			r := loaded[w%len(loaded)]
			kv, err := f.kv(c, r, t.NearestServer(r))
			if err != nil {
				fail()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer kv.Close()
				key := fmt.Sprintf("/sun-%d-%d-%d", i, w, time.Now().UnixNano())
				if kv.Create(context.Background(), key, nil) != nil {
					fail()
					return
				}
				loop(before, after, func(ctx context.Context) (func(), error) {
					return nil, kv.Put(ctx, key, make([]byte, 100))
				})
			}()
		}
		// One client in the loaded region takes and releases a lock in a
		// loop: acquire latency before and after the leader arrives.
		if !balanced && f.lock != nil {
			if lk, err := f.lock(c, loaded[0], t.NearestServer(loaded[0])); err == nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer lk.Close()
					name := fmt.Sprintf("sun-lock-%d-%d", i, time.Now().UnixNano())
					loop(lockBefore, lockAfter, func(ctx context.Context) (func(), error) {
						release, err := lk.Lock(ctx, name)
						return func() {
							time.Sleep(2 * time.Millisecond)
							if release() != nil {
								fail()
							}
						}, err
					})
				}()
			} else {
				fail()
			}
		}
		for time.Since(start) < p.Phase {
			time.Sleep(200 * time.Millisecond)
			l := c.Leader()
			mu.Lock()
			if l >= 0 && l != last {
				changes++
				last = l
			}
			if moves && converged < 0 && l >= 0 && !balanced && t.Servers[l] == loaded[0] {
				converged = time.Since(start)
			}
			mu.Unlock()
		}
		close(done)
		wg.Wait()
		where := fmt.Sprintf("phase %d, load in %s", i+1, loaded[0])
		if balanced {
			where = fmt.Sprintf("phase %d, balanced load in %v", i+1, loaded)
		}
		add := func(h *hdrhistogram.Histogram, series, what string) {
			res := Result{Workload: "followsun", Topology: t.Name, Flavor: f.Name + ", " + where + what, Clients: p.Writers * len(loaded),
				Hist: h, Leader: leaderRegion(c, t), Errors: errors, Region: loaded[0], Series: series}
			if converged >= 0 {
				res.ConvergedSec = converged.Seconds()
			}
			res.Summary = summarize(h)
			out = append(out, res)
			progress(fmt.Sprintf("followsun %s %s: avg %.1f ms p99 %.1f ms (%d)", t.Name, res.Flavor, res.Summary.Avg, res.Summary.P99, res.Summary.Count))
		}
		switch {
		case !moves:
			add(before, "fixed-writes", fmt.Sprintf(": leader stays in %s", leaderRegion(c, t)))
			add(lockBefore, "fixed-lock", ": lock acquire")
		case balanced:
			add(before, "balanced", fmt.Sprintf(": %d leader changes in %v", changes, p.Phase))
		case converged < 0:
			add(before, "writes-before", fmt.Sprintf(": leader did not reach %s within %v", loaded[0], p.Phase))
			add(lockBefore, "lock-before", ": lock acquire, leader did not arrive")
		default:
			add(before, "writes-before", fmt.Sprintf(": before the leader arrived (%.1f s)", converged.Seconds()))
			add(after, "writes-after", ": after")
			add(lockBefore, "lock-before", ": lock acquire, before the leader arrived")
			add(lockAfter, "lock-after", ": lock acquire, after")
		}
	}
	return out
}

// followSunFloor is the physical floor of a write or lock acquire from a
// client next to the leader in region r: the client↔server round trip,
// the round trip to the nearest other voter (the fastest quorum of 3), and
// one fsync; the round trips as measured through the emulated links.
func followSunFloor(t *Topology, links []LinkCheck, r string, fsync time.Duration) (time.Duration, bool) {
	if t == nil {
		return 0, false
	}
	rtt := func(a, b string) (time.Duration, bool) {
		for _, l := range links {
			if (l.From == a && l.To == b) || (l.From == b && l.To == a) {
				return l.P50, true
			}
		}
		return 0, false
	}
	local, ok := rtt(r, r)
	if !ok {
		return 0, false
	}
	var quorum time.Duration = -1
	seen := false
	for _, s := range t.Servers {
		if s == r && !seen {
			seen = true // the leader itself
			continue
		}
		if d, ok := rtt(r, s); ok && (quorum < 0 || d < quorum) {
			quorum = d
		}
	}
	if quorum < 0 {
		return 0, false
	}
	return local + quorum + fsync, true
}
