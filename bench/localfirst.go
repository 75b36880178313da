package bench

import (
	"fmt"
	"time"
)

// Local-first lock hand-off against FIFO: clients in every
// client region contend for one Meridian lock; FIFO hands it to the oldest
// waiter wherever it is, local-first (K) prefers a waiter in the previous
// holder's region at most K times in a row.

// LocalFirstParams sizes the workload.
type LocalFirstParams struct {
	PerRegion int           // clients per client region
	Iters     int           // acquires per client
	Hold      time.Duration // critical section
	K         []int         // 0 is FIFO
}

// RunLocalFirst runs on a Meridian cluster: one series per K, all clients on
// one lock; OpsPerSec is acquires per second (hand-offs), Max the worst wait.
func RunLocalFirst(c *Cluster, t *Topology, p LocalFirstParams, progress func(string)) []Result {
	var out []Result
	regions := clientRegions(t)
	for _, k := range p.K {
		name := "FIFO"
		if k > 0 {
			name = fmt.Sprintf("local-first K=%d", k)
		}
		n := p.PerRegion * len(regions)
		res := Result{Workload: "localfirst", Topology: t.Name, Flavor: name, Clients: n, Same: true, Hist: newHist(), Leader: leaderRegion(c, t)}
		var lockers []Locker
		for i := 0; i < n; i++ {
			r := regions[i%len(regions)]
			cl, err := newNative(c, r, t.NearestServer(r))
			if err != nil {
				res.Errors++
				continue
			}
			nl := nativeLocker{c: cl}
			nl.opts.LocalFirst = k
			lockers = append(lockers, nl)
		}
		start := time.Now()
		runLockClients(lockers, LockParams{Iters: p.Iters, Hold: p.Hold}, true, &res)
		el := time.Since(start)
		for _, l := range lockers {
			l.Close()
		}
		res.Summary = summarize(res.Hist)
		res.OpsPerSec = float64(res.Hist.TotalCount()) / el.Seconds()
		progress(fmt.Sprintf("localfirst %s %s: %d clients, %.1f hand-offs/s, wait avg %.0f ms p99 %.0f ms max %.0f ms (%d errors)",
			t.Name, name, n, res.OpsPerSec, res.Summary.Avg, res.Summary.P99, res.Summary.Max, res.Errors))
		out = append(out, res)
	}
	return out
}
