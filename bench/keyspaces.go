package bench

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/meridian-coord/meridian/client"
)

// Regional keyspaces: a client in every region writes and locks in its own
// region's keyspace (homed there, zone survival: three voters in three
// zones of the region), all regions at once, through its region's server,
// and reads every keyspace from every region. The comparison is the same
// load on the same servers with one raft group (no keyspaces, placement:
// auto), the paths and lock names unchanged. The floor of a region's write
// or lock acquire is the client↔server round trip, the intra-region
// quorum's round trip (two zones) and one fsync, all measured in the run.
//
// A last variant homes each region's keyspace there with region survival
// (five voters in three regions, two at home, the leader kept home): a
// write then commits with the home's other voter and the nearest other
// region's, so its floor is the client↔server round trip, the round trip
// to the nearest other region and one fsync.

// KeyspacesParams sizes the workload.
type KeyspacesParams struct {
	Phase  time.Duration // writes and locks, all regions at once; then reads as long
	Warmup time.Duration // writes from every region before measuring (leaders settle)
	Value  int           // bytes per write
	// Regions: the client regions that write, lock and read (nil: every
	// one); a region alone shows its latency without the others' load.
	Regions []string
	// Variants: which of KeyspacesVariants to run (nil: every one).
	Variants []string
	// Keep leaves each run's directory (logs, data).
	Keep bool
	// Pprof serves Go's profiles on Meridian's HTTP ports (printed).
	Pprof bool
}

// KeyspacesVariants are the clusters the workload runs, in report order.
var KeyspacesVariants = []string{"Meridian, keyspaces", "Meridian, one group", "ZooKeeper 3.8, a voter a region", "etcd 3.4, a member a region",
	"Meridian, keyspaces, region survival"}

// firstOfEachRegion is t with only the first server of each region: the
// three-member cluster of a system that runs no non-voting replicas here
// (etcd 3.4 allows one learner).
func firstOfEachRegion(t *Topology) *Topology {
	c := *t
	c.Servers, c.Zones = nil, nil
	for i, r := range t.Servers {
		if !slices.Contains(c.Servers, r) {
			c.Servers = append(c.Servers, r)
			c.Zones = append(c.Zones, t.Zones[i])
		}
	}
	return &c
}

const ksSuperUser, ksSuperPassword = "super", "bench"

// keyspacePrefix is the keyspace a region's clients use: "/ca" for CA.
func keyspacePrefix(region string) string { return "/" + strings.ToLower(region) }

// keyspaceFloor is the floor of a write or lock acquire from a client in
// region r in its region's keyspace: the client↔server round trip (r–r),
// the round trip between two zones of r (a quorum of three voters, one a
// zone, is the leader and its nearest other voter) and one fsync; round
// trips as measured through the emulated links (VerifyLinks).
func keyspaceFloor(links []LinkCheck, r string, fsync time.Duration) (time.Duration, bool) {
	var local, zone time.Duration
	var haveLocal, haveZone bool
	for _, l := range links {
		switch {
		case l.From == r && l.To == r:
			local, haveLocal = l.P50, true
		case strings.HasPrefix(l.From, r+"/") && strings.HasPrefix(l.To, r+"/") && l.From != l.To:
			zone, haveZone = l.P50, true
		}
	}
	if !haveLocal || !haveZone {
		return 0, false
	}
	return local + zone + fsync, true
}

// keyspaceRegionFloor is the floor of a write or lock acquire from a
// client in region r in its region's keyspace with region survival: the
// client↔server round trip, the round trip to the nearest other region
// (named by nearest) and one fsync.
func keyspaceRegionFloor(links []LinkCheck, r string, fsync time.Duration) (floor time.Duration, nearest string, near time.Duration, ok bool) {
	var local time.Duration
	var haveLocal bool
	for _, l := range links {
		if strings.Contains(l.From, "/") || strings.Contains(l.To, "/") {
			continue
		}
		other := ""
		switch {
		case l.From == r && l.To == r:
			local, haveLocal = l.P50, true
		case l.From == r:
			other = l.To
		case l.To == r:
			other = l.From
		}
		if other != "" && (nearest == "" || l.P50 < near) {
			nearest, near = other, l.P50
		}
	}
	if !haveLocal || nearest == "" {
		return 0, "", 0, false
	}
	return local + near + fsync, nearest, near, true
}

// RunKeyspaces starts each variant's cluster in turn (newEnv gives each
// its own), runs the workload on it and returns its rows: per variant and
// region the writes, the lock acquires and the reads of each keyspace.
// note receives each variant's cluster notes (durability, emulation).
func RunKeyspaces(newEnv func() (*Env, error), bin string, p KeyspacesParams, links []LinkCheck, fsync time.Duration,
	progress func(string), note func(variant, notes string)) ([]Result, []string) {
	var out []Result
	var failures []string
	for _, variant := range KeyspacesVariants {
		if p.Variants != nil && !slices.Contains(p.Variants, variant) {
			continue
		}
		e, err := newEnv()
		if err != nil {
			failures = append(failures, fmt.Sprintf("keyspaces %s: %v", variant, err))
			continue
		}
		res, err := runKeyspacesVariant(e, bin, variant, p, links, fsync, progress, note)
		out = append(out, res...)
		if err != nil {
			failures = append(failures, fmt.Sprintf("keyspaces %s on %s: %v", variant, e.Topo.Name, err))
			progress(fmt.Sprintf("keyspaces %s: %v", variant, err))
		}
		if f := e.Finish(p.Keep, fmt.Sprintf("keyspaces %s on %s", variant, e.Topo.Name)); f != "" {
			failures = append(failures, f)
		}
	}
	return out, failures
}

func runKeyspacesVariant(e *Env, bin, variant string, p KeyspacesParams, links []LinkCheck, fsync time.Duration,
	progress func(string), note func(variant, notes string)) ([]Result, error) {
	t := e.Topo
	if !t.HasZones() {
		return nil, fmt.Errorf("topology %s names no zones (servers as region/zone)", t.Name)
	}
	keyspaces := variant == KeyspacesVariants[0] || variant == KeyspacesVariants[4]
	survive := "zone"
	if variant == KeyspacesVariants[4] {
		survive = "region"
	}
	leadersOf := func() map[string]string { return map[string]string{} }
	var c *Cluster
	var err error
	f := Flavors[0] // Meridian (native)
	switch variant {
	case KeyspacesVariants[2]:
		f = Flavors[2] // ZooKeeper 3.8
		c, err = StartZooKeeperWith(e, ZKOptions{Observers: true})
	case KeyspacesVariants[3]:
		f = Flavors[3] // etcd 3.4
		e.Topo = firstOfEachRegion(t)
		t = e.Topo
		c, err = StartEtcd(e)
	default:
		sum := sha1.Sum([]byte(ksSuperUser + ":" + ksSuperPassword))
		c, err = StartMeridianWith(e, bin, MeridianOptions{Metrics: true, Pprof: p.Pprof, SuperDigest: ksSuperUser + ":" + base64.StdEncoding.EncodeToString(sum[:])})
	}
	if err != nil {
		return nil, err
	}
	if p.Pprof && c.System == "meridian" {
		progress(fmt.Sprintf("keyspaces %s: profiles at http://%s/debug/pprof/", variant, strings.Join(c.HTTP, "/debug/pprof/, http://")))
	}
	note(variant, c.Notes)
	regions := clientRegions(t)
	ctx := context.Background()
	if keyspaces {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		adm, err := client.New(cctx, client.Config{Endpoints: []string{c.Native[regions[0]][t.NearestServer(regions[0])]}, KeepEndpointOrder: true,
			SessionTimeout: 10 * time.Second, Digest: []string{ksSuperUser + ":" + ksSuperPassword}})
		cancel()
		if err != nil {
			return nil, err
		}
		for _, r := range regions {
			if _, err := adm.CreateKeyspace(ctx, keyspacePrefix(r), r, survive); err != nil {
				adm.Close()
				return nil, fmt.Errorf("creating keyspace %s: %w", keyspacePrefix(r), err)
			}
		}
		leadersOf = func() map[string]string { return keyspaceLeaders(adm, t) }
		defer adm.Close()
	}
	val := make([]byte, p.Value)
	key := func(r string) string { return keyspacePrefix(r) + "/w-" + r }
	// One writer, one locker and one reader per region, each its own
	// session on the region's server.
	writers := map[string]KV{}
	lockers := map[string]Locker{}
	readers := map[string]KV{}
	defer func() {
		for _, m := range []map[string]KV{writers, readers} {
			for _, kv := range m {
				kv.Close()
			}
		}
		for _, l := range lockers {
			l.Close()
		}
	}()
	for _, r := range regions {
		s := t.NearestServer(r)
		if writers[r], err = f.kv(c, r, s); err != nil {
			return nil, err
		}
		if lockers[r], err = f.lock(c, r, s); err != nil {
			return nil, err
		}
		if readers[r], err = f.kv(c, r, s); err != nil {
			return nil, err
		}
		// The first write in a new group waits for its election: retry.
		deadline := time.Now().Add(30 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err = writers[r].Create(cctx, keyspacePrefix(r), nil); err == nil || keyspaces {
				err = writers[r].Create(cctx, key(r), val)
			}
			cancel()
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			return nil, fmt.Errorf("creating %s: %w", key(r), err)
		}
	}
	which := "leader"
	if c.System == "meridian" {
		which = "root group's leader"
	}
	progress(fmt.Sprintf("keyspaces %s on %s: started, %s %s", variant, t.Name, which, leaderRegion(c, t)))
	if p.Regions != nil {
		regions = slices.DeleteFunc(regions, func(r string) bool { return !slices.Contains(p.Regions, r) })
	}

	type hists struct {
		write, lock *hdrhistogram.Histogram
		read        map[string]*hdrhistogram.Histogram
		errs        int
		firstErr    string
	}
	h := map[string]*hists{}
	for _, r := range regions {
		h[r] = &hists{write: newHist(), lock: newHist(), read: map[string]*hdrhistogram.Histogram{}}
		for _, k := range regions {
			h[r].read[k] = newHist()
		}
	}
	var mu sync.Mutex
	record := func(r string, hist *hdrhistogram.Histogram, el time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			h[r].errs++
			if h[r].firstErr == "" {
				h[r].firstErr = err.Error()
			}
			return
		}
		hist.RecordValue(el.Microseconds())
	}
	// phase runs one loop per region for d; measure gates recording.
	phase := func(d time.Duration, measure bool, write, lock, read bool) {
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for _, r := range regions {
			if write {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(end) {
						cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						s := time.Now()
						err := writers[r].Put(cctx, key(r), val)
						el := time.Since(s)
						cancel()
						if measure {
							record(r, h[r].write, el, err)
						}
					}
				}()
			}
			if lock {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; time.Now().Before(end); n++ {
						name := fmt.Sprintf("%s/job-%d", strings.ToLower(r), n%16)
						cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						s := time.Now()
						release, err := lockers[r].Lock(cctx, name)
						el := time.Since(s)
						if err == nil {
							err = release()
						}
						cancel()
						if measure {
							record(r, h[r].lock, el, err)
						}
					}
				}()
			}
			if read {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; time.Now().Before(end); n++ {
						k := regions[n%len(regions)]
						cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						s := time.Now()
						_, err := readers[r].Get(cctx, key(k))
						el := time.Since(s)
						cancel()
						if measure {
							record(r, h[r].read[k], el, err)
						}
					}
				}()
			}
		}
		wg.Wait()
	}
	phase(p.Warmup, false, true, true, false)
	leaders := leadersOf()
	rootLeader := leaderRegion(c, t)
	// The fsyncs each region's servers made during the writes and locks.
	regionHTTP := func(r string) []string {
		var out []string
		for _, i := range t.RegionServers(r) {
			if i < len(c.HTTP) { // Meridian only
				out = append(out, c.HTTP[i])
			}
		}
		return out
	}
	fsyncBefore := map[string]fsyncBuckets{}
	for _, r := range regions {
		if fsyncBefore[r], err = scrapeFsync(regionHTTP(r)); err != nil {
			progress(fmt.Sprintf("keyspaces %s: reading fsync metrics: %v", variant, err))
		}
	}
	phase(p.Phase, true, true, true, false)
	fsyncRun := map[string]time.Duration{}
	for _, r := range regions {
		after, err := scrapeFsync(regionHTTP(r))
		if err != nil || fsyncBefore[r] == nil {
			continue
		}
		if d, ok := after.minus(fsyncBefore[r]).quantile(0.5); ok {
			fsyncRun[r] = d
		}
	}
	phase(p.Phase, true, false, false, true)

	var out []Result
	for _, r := range regions {
		floor, ok := keyspaceFloor(links, r, fsync)
		target := 1.3
		if survive == "region" {
			floor, _, _, ok = keyspaceRegionFloor(links, r, fsync)
			target = 1.1
		}
		leader := rootLeader
		if keyspaces {
			leader = leaders[keyspacePrefix(r)]
		}
		add := func(series string, hist *hdrhistogram.Histogram) {
			res := Result{Workload: "keyspaces", Topology: t.Name, Flavor: fmt.Sprintf("%s, client in %s, %s", variant, r, series),
				Clients: 1, Hist: hist, Leader: leader, Errors: h[r].errs, FirstError: h[r].firstErr, Region: r, Series: series}
			if ok {
				res.FloorMs = ms(floor)
				if d, ok := fsyncRun[r]; ok {
					res.FsyncMs = ms(d)
					res.RunFloorMs = ms(floor - fsync + d)
				}
			}
			res.Summary = summarize(hist)
			out = append(out, res)
			ratio := ""
			if ok && res.Summary.P50 > 0 && (series == "write" || series == "lock acquire") {
				ratio = fmt.Sprintf(", floor %.2f ms (p50 %.2f×, target %.1f×)", res.FloorMs, res.Summary.P50/res.FloorMs, target)
				if res.RunFloorMs > 0 {
					ratio += fmt.Sprintf(", with the servers' fsync in the run (%.2f ms) %.2f ms (p50 %.2f×)", res.FsyncMs, res.RunFloorMs, res.Summary.P50/res.RunFloorMs)
				}
			}
			progress(fmt.Sprintf("keyspaces %s: p50 %.2f ms p99 %.2f ms (%d)%s", res.Flavor, res.Summary.P50, res.Summary.P99, res.Summary.Count, ratio))
		}
		add("write", h[r].write)
		add("lock acquire", h[r].lock)
		for _, k := range regions {
			add("read "+key(k), h[r].read[k])
		}
	}
	return out, nil
}

// keyspaceLeaders names each keyspace's leader as the admin's server sees
// it ("region/zone (server N)"); with one group, nothing.
func keyspaceLeaders(adm *client.Client, t *Topology) map[string]string {
	out := map[string]string{}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kss, err := adm.Keyspaces(cctx)
	if err != nil {
		return out
	}
	for _, ks := range kss {
		id := int(ks.GetLeaderId())
		if id < 1 || id > len(t.Servers) {
			out[ks.GetPrefix()] = "?"
			continue
		}
		out[ks.GetPrefix()] = fmt.Sprintf("%s/%s (server %d)", t.Servers[id-1], t.Zones[id-1], id)
	}
	return out
}
