package bench

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Seed002Params sets the experiments of DIDA-GSTORE, a geo-replicated store
// (Lucas Lobo, João Freitas and Bruno Freitas, Instituto Superior Técnico),
// for the seed002 workload: Same clients each write one
// shared object Writes times (completion time against the round trip), and,
// on the topology whose round trip is RandomAtRTT, closed-loop clients
// writing random objects (latency and throughput against the number of
// clients; Total writes per point, spread evenly over the clients).
type Seed002Params struct {
	Same, Writes int
	Clients      []int
	Total        int
	RandomAtRTT  time.Duration
}

// seed002Keys is the number of objects of the random-object experiment:
// enough that two clients rarely write the same one (the seed's point is
// that random objects have next to no blocking).
const seed002Keys = 100

const seed002Size = 100

// UniformRTT returns the round trip every pair of hosts has, and false when
// the topology is not uniform (DIDA-GSTORE's experiments assume it is).
func (t *Topology) UniformRTT() (time.Duration, bool) {
	regions := append(append([]string(nil), t.Servers...), t.Clients...)
	var d time.Duration = -1
	for i, a := range regions {
		for _, b := range regions[i+1:] {
			if r := t.RTT(a, b); d < 0 { // hosts of one region: the same-region round trip
				d = r
			} else if r != d {
				return 0, false
			}
		}
	}
	return d, d >= 0
}

// RunSeed002 runs the experiments of DIDA-GSTORE on one system flavor.
func RunSeed002(c *Cluster, t *Topology, f Flavor, p Seed002Params, progress func(string)) []Result {
	rtt, uniform := t.UniformRTT()
	if !uniform {
		progress(fmt.Sprintf("seed002 %s: topology is not uniform; skipped", t.Name))
		return nil
	}
	prefix := fmt.Sprintf("/s2-%d", mrand.Int64())
	val := make([]byte, seed002Size)
	r0, s0 := serverFor(t, 0)
	setup, err := f.kv(c, r0, s0)
	if err != nil {
		progress(fmt.Sprintf("seed002 %s %s: %v", t.Name, f.Name, err))
		return []Result{{Workload: "seed002-same", Topology: t.Name, Flavor: f.Name, Errors: 1, Hist: newHist()}}
	}
	same := prefix + "-same"
	var setupErrs atomic.Int64
	var firstSetupErr atomic.Value
	create := func(key string) {
		if err := setup.Create(context.Background(), key, val); err != nil {
			setupErrs.Add(1)
			firstSetupErr.CompareAndSwap(nil, err.Error())
		}
	}
	create(same)
	var out []Result
	out = append(out, seed002Run(c, t, f, "seed002-same", p.Same, p.Same*p.Writes, func(int) string { return same }, val, progress))
	defer func() {
		if n := setupErrs.Load(); n > 0 {
			progress(fmt.Sprintf("seed002 %s %s: %d objects not created (writes to them fail): %v", t.Name, f.Name, n, firstSetupErr.Load()))
		}
	}()
	if rtt == p.RandomAtRTT {
		key := func(k int) string { return fmt.Sprintf("%s-k%d", prefix, k) }
		// Create the objects concurrently: one after another costs a
		// wide-area commit each.
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for k := 0; k < seed002Keys; k++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() { defer wg.Done(); create(key(k)); <-sem }()
		}
		wg.Wait()
		for _, n := range p.Clients {
			out = append(out, seed002Run(c, t, f, "seed002-random", n, p.Total, func(int) string { return key(mrand.IntN(seed002Keys)) }, val, progress))
		}
	}
	setup.Close()
	return out
}

// seed002Run has n clients, each with its own session on its nearest
// server, make total writes between them (as evenly as it divides) and
// reports the write latencies, the completion time of the whole batch
// (from the common start to the last write) and writes per second.
func seed002Run(c *Cluster, t *Topology, f Flavor, workload string, n, total int, key func(i int) string, val []byte, progress func(string)) Result {
	res := Result{Workload: workload, Topology: t.Name, Flavor: f.Name, Clients: n, Hist: newHist(), Leader: leaderRegion(c, t)}
	kvs := make([]KV, 0, n)
	for i := 0; i < n; i++ {
		r, s := serverFor(t, i)
		kv, err := f.kv(c, r, s)
		if err != nil {
			res.fail(err)
			continue
		}
		kvs = append(kvs, kv)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i, kv := range kvs {
		share := total / len(kvs)
		if i < total%len(kvs) {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < share; j++ {
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := kv.Put(ctx, key(i), val)
				cancel()
				el := time.Since(t0)
				mu.Lock()
				if err != nil {
					res.fail(err)
				} else {
					res.Hist.RecordValue(el.Microseconds())
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.TotalSec = elapsed.Seconds()
	res.OpsPerSec = float64(res.Hist.TotalCount()) / elapsed.Seconds()
	for _, kv := range kvs {
		kv.Close()
	}
	res.Summary = summarize(res.Hist)
	msg := fmt.Sprintf("%s %s %s: %d clients, %d writes in %.2f s (%.0f/s), avg %.2f ms p99 %.2f ms (%d errors)", workload, t.Name, f.Name,
		n, res.Hist.TotalCount(), res.TotalSec, res.OpsPerSec, res.Summary.Avg, res.Summary.P99, res.Errors)
	if res.FirstError != "" {
		msg += "; first error: " + res.FirstError
	}
	progress(msg)
	return res
}
