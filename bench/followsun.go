package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Follow the sun (issue 7's placement proof): the write load moves from one
// region with a voter to another and back; the leader should follow it
// (placement: auto), and under a balanced load it should stay put.

// FollowSunParams sizes the workload.
type FollowSunParams struct {
	Phase   time.Duration // length of each phase
	Writers int           // clients writing in a loop, in the phase's region
}

// RunFollowSun runs on a Meridian cluster (native API). Each shifted phase
// yields two series: writes before the leader reached the loaded region and
// writes after (and the same for one client's lock acquires); the balanced
// phase one series with its leader changes.
func RunFollowSun(c *Cluster, t *Topology, f Flavor, p FollowSunParams, progress func(string)) []Result {
	var regions []string // client regions that have a voter
	for _, r := range clientRegions(t) {
		if slices.Contains(t.Servers, r) {
			regions = append(regions, r)
		}
	}
	if len(regions) < 2 || c.Leader == nil {
		return nil // nowhere to move to
	}
	var out []Result
	phases := [][]string{{regions[0]}, {regions[1]}, {regions[0]}, regions}
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
			if converged < 0 && l >= 0 && !balanced && t.Servers[l] == loaded[0] {
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
		add := func(h *hdrhistogram.Histogram, what string) {
			res := Result{Workload: "followsun", Topology: t.Name, Flavor: where + what, Clients: p.Writers * len(loaded),
				Hist: h, Leader: leaderRegion(c, t), Errors: errors}
			res.Summary = summarize(h)
			out = append(out, res)
			progress(fmt.Sprintf("followsun %s %s: avg %.1f ms p99 %.1f ms (%d)", t.Name, res.Flavor, res.Summary.Avg, res.Summary.P99, res.Summary.Count))
		}
		switch {
		case balanced:
			add(before, fmt.Sprintf(": %d leader changes in %v", changes, p.Phase))
		case converged < 0:
			add(before, fmt.Sprintf(": leader did not reach %s within %v", loaded[0], p.Phase))
		default:
			add(before, fmt.Sprintf(": before the leader arrived (%.1f s)", converged.Seconds()))
			add(after, ": after")
			add(lockBefore, ": lock acquire, before the leader arrived")
			add(lockAfter, ": lock acquire, after")
		}
	}
	return out
}
