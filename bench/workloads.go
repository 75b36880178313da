package bench

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Result is one measured series.
type Result struct {
	Workload string // "locks", "seed004-read", "seed004-write", "seed004-mixed-op", "seed004-mixed-pair"
	Topology string
	Flavor   string
	Clients  int
	Same     bool   // locks: all clients on one lock
	Leader   string // region of the leading server when the run started
	Errors   int
	// FirstError is the first error counted in Errors (so a report's
	// error column can be explained).
	FirstError string `json:",omitempty"`
	// OpsPerSec: throughput workloads, completed operations per second;
	// locks, acquires per second (on one lock: hand-offs per second).
	OpsPerSec float64                 `json:",omitempty"`
	Hist      *hdrhistogram.Histogram `json:"-"`
	Summary   Summary
	// Raw is the full histogram: [value µs, count] for every non-empty
	// bucket (HdrHistogram, 3 significant digits).
	Raw [][2]int64 `json:",omitempty"`
	// Followsun: the loaded region, which series this is (writes-before,
	// writes-after, lock-before, lock-after, balanced, fixed-writes,
	// fixed-lock) and how long the leader took to reach the region.
	Region       string  `json:",omitempty"`
	Series       string  `json:",omitempty"`
	ConvergedSec float64 `json:",omitempty"`
	// Throughput: CPU time per completed operation, in µs, of the
	// system's server processes and of the benchmark process (the
	// clients and every emulated link), over the point's run (0: not
	// measured). On a machine the two share, they show where its cores went.
	ServerCPUUs  float64 `json:",omitempty"`
	HarnessCPUUs float64 `json:",omitempty"`
	// RunOps: a point merged from several runs (MergeRuns), each run's
	// OpsPerSec in the order they ran; with --alternations the k-th run of
	// a system's two flavors ran next to each other (flavorRatios).
	RunOps []float64 `json:",omitempty"`
	// FloorMs: keyspaces, the region's floor (client↔server and
	// intra-region quorum round trips as measured, plus one fsync).
	FloorMs float64 `json:",omitempty"`
	// FsyncMs: keyspaces, the p50 of the region's servers' fsyncs during
	// the writes and locks (Meridian's own histogram); RunFloorMs the floor
	// with it in place of the fdatasync measured before the run.
	FsyncMs    float64 `json:",omitempty"`
	RunFloorMs float64 `json:",omitempty"`
	// TotalSec: DIDA-GSTORE, the time from the common start to the last write.
	TotalSec float64 `json:",omitempty"`
	// Cost of Consensus: the mean critical-section time and the mean time between
	// lock requests (the contention); Series is the lock strategy.
	ServiceMs      float64 `json:",omitempty"`
	InterarrivalMs float64 `json:",omitempty"`
	// Cost of Consensus: every request's wait in µs, in the schedule's order (-1:
	// not granted), so that two strategies run on the same requests can be
	// compared request by request.
	Waits []int64 `json:",omitempty"`
	// Cost of Consensus (s0Handoffs): grants to a request already waiting when the
	// holder began to release, their mean time from that release, the
	// share of grants to sessions on the leader's server, and grants seen
	// before the previous holder released (a correct lock has none).
	Handoffs     int     `json:",omitempty"`
	HandoffMs    float64 `json:",omitempty"`
	LeaderGrants float64 `json:",omitempty"`
	Overlaps     int     `json:",omitempty"`
}

// Summary is a histogram's figures in milliseconds.
type Summary struct {
	Count                         int64
	Avg, P50, P90, P99, P999, Max float64
}

func rawHist(h *hdrhistogram.Histogram) [][2]int64 {
	var out [][2]int64
	for _, b := range h.Distribution() {
		if b.Count > 0 {
			out = append(out, [2]int64{b.To, b.Count})
		}
	}
	return out
}

// MergeRuns combines runs of the same points by one flavor (the same
// workloads, client counts and order, as one call of a Run function
// returns them): latency histograms merged, rates and CPU per operation
// averaged over the runs, errors added. Runs that do not pair up with the
// first are kept side by side.
func MergeRuns(runs ...[]Result) []Result {
	if len(runs) == 0 {
		return nil
	}
	a := runs[0]
	var same [][]Result
	var apart []Result
	for _, b := range runs[1:] {
		ok := len(a) == len(b)
		for i := 0; ok && i < len(a); i++ {
			ok = a[i].Workload == b[i].Workload && a[i].Flavor == b[i].Flavor && a[i].Clients == b[i].Clients && a[i].Same == b[i].Same
		}
		if ok {
			same = append(same, b)
		} else {
			apart = append(apart, b...)
		}
	}
	n := float64(len(same) + 1)
	out := make([]Result, len(a))
	for i := range a {
		r := a[i]
		var h *hdrhistogram.Histogram
		if r.Hist != nil && len(same) > 0 {
			h = newHist()
			h.Merge(r.Hist)
		}
		if len(same) > 0 {
			r.RunOps = append(r.RunOps[:0:0], a[i].OpsPerSec)
		}
		for _, b := range same {
			o := b[i]
			r.RunOps = append(r.RunOps, o.OpsPerSec)
			if h != nil && o.Hist != nil {
				h.Merge(o.Hist)
			}
			r.OpsPerSec += o.OpsPerSec
			r.ServerCPUUs += o.ServerCPUUs
			r.HarnessCPUUs += o.HarnessCPUUs
			r.Errors += o.Errors
			if r.FirstError == "" {
				r.FirstError = o.FirstError
			}
		}
		if h != nil {
			r.Hist, r.Summary = h, summarize(h)
		}
		r.OpsPerSec /= n
		r.ServerCPUUs /= n
		r.HarnessCPUUs /= n
		out[i] = r
	}
	return append(out, apart...)
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 600_000_000, 3) } // µs, up to 10 min

func summarize(h *hdrhistogram.Histogram) Summary {
	ms := func(v int64) float64 { return float64(v) / 1000 }
	return Summary{Count: h.TotalCount(), Avg: h.Mean() / 1000, P50: ms(h.ValueAtQuantile(50)),
		P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)), P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max())}
}

// serverFor picks client i's server: the nearest to its region; clients
// spread round-robin over servers that are equally near.
// fail counts an error, keeping the first one's text.
func (r *Result) fail(err error) {
	r.Errors++
	if r.FirstError == "" && err != nil {
		r.FirstError = err.Error()
	}
}

func serverFor(t *Topology, i int) (string, int) {
	r := t.ClientRegion(i)
	best := t.RTT(r, t.Servers[t.NearestServer(r)])
	var ties []int
	for s := range t.Servers {
		if t.RTT(r, t.Servers[s]) == best {
			ties = append(ties, s)
		}
	}
	return r, ties[(i/len(t.Clients))%len(ties)]
}

// LockParams sets the locks workload, after "Evaluation of Key-Value Stores
// for Distributed Locking Purposes" (Piotr Grzesik and Dariusz Mrozek;
// Key-value stores for locking below).
type LockParams struct {
	Clients []int         // e.g. 1, 3, 5
	Iters   int           // acquires per client
	Hold    time.Duration // the "short computation" while holding
}

// RunLocks runs the lock workload of Key-value stores for locking: n clients acquire, hold, release Iters times, on
// one lock each or all on one lock; it records every acquire's latency.
func RunLocks(c *Cluster, t *Topology, f Flavor, p LockParams, progress func(string)) []Result {
	var out []Result
	for _, n := range p.Clients {
		for _, same := range []bool{false, true} {
			if n == 1 && same {
				continue // one client: same as different
			}
			res := Result{Workload: "locks", Topology: t.Name, Flavor: f.Name, Clients: n, Same: same, Hist: newHist(), Leader: leaderRegion(c, t)}
			lockers := make([]Locker, n)
			var err error
			for i := range lockers {
				r, s := serverFor(t, i)
				if lockers[i], err = f.lock(c, r, s); err != nil {
					res.Errors++
					break
				}
			}
			if err == nil {
				start := time.Now()
				runLockClients(lockers, p, same, &res)
				// On one lock every acquire after the first is a hand-off:
				// this is the hand-off rate (hold time included).
				res.OpsPerSec = float64(res.Hist.TotalCount()) / time.Since(start).Seconds()
			}
			for _, l := range lockers {
				if l != nil {
					l.Close()
				}
			}
			res.Summary = summarize(res.Hist)
			progress(fmt.Sprintf("locks %s %s: %d clients, %s: avg %.1f ms p99 %.1f ms (%d errors)",
				t.Name, f.Name, n, map[bool]string{false: "different locks", true: "same lock"}[same], res.Summary.Avg, res.Summary.P99, res.Errors))
			out = append(out, res)
		}
	}
	return out
}

func runLockClients(lockers []Locker, p LockParams, same bool, res *Result) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	run := mrand.Int64()
	for i, lk := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("r%d-c%d", run, i)
			if same {
				name = fmt.Sprintf("r%d-shared", run)
			}
			for k := 0; k < p.Iters; k++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				start := time.Now()
				release, err := lk.Lock(ctx, name)
				el := time.Since(start)
				cancel()
				mu.Lock()
				if err != nil {
					res.Errors++
					mu.Unlock()
					continue
				}
				res.Hist.RecordValue(el.Microseconds())
				mu.Unlock()
				time.Sleep(p.Hold)
				if err := release(); err != nil {
					mu.Lock()
					res.Errors++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
}

// selfCPU is the CPU time (user and system) this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func leaderRegion(c *Cluster, t *Topology) string {
	if c.Leader == nil {
		return "?"
	}
	if l := c.Leader(); l >= 0 {
		return fmt.Sprintf("%s (server %d)", t.Servers[l], l+1)
	}
	return "?"
}

// Seed004Params sets the seed004 workload's tasks, after "Tail Latency in
// ZooKeeper and a Simple Reimplementation" (Michael Graczyk).
type Seed004Params struct {
	Ops          int // task 1 reads, task 2 writes, task 3 client 0's loops
	MixedClients int // task 3's clients (6)
}

const seed004Keys, seed004Size = 5, 1000

// RunSeed004 runs the three tasks of Tail Latency in ZooKeeper: (1) one client reads a random key
// of 5 Ops times, (2) writes a random key Ops times with 1000 B, (3) the
// mixed conflicting task: MixedClients clients each loop reading a random
// key and writing a random key with the read value minus its last byte
// (read key even) or plus one byte (odd); client 0 runs Ops loops and the
// others run until it finishes. Task 3 records client 0's operations and
// its read+write pairs.
func RunSeed004(c *Cluster, t *Topology, f Flavor, p Seed004Params, progress func(string)) []Result {
	base := Result{Topology: t.Name, Flavor: f.Name, Leader: leaderRegion(c, t)}
	mk := func(w string, n int) Result {
		r := base
		r.Workload, r.Clients, r.Hist = w, n, newHist()
		return r
	}
	read, write, op, pair := mk("seed004-read", 1), mk("seed004-write", 1), mk("seed004-mixed-op", p.MixedClients), mk("seed004-mixed-pair", p.MixedClients)
	prefix := fmt.Sprintf("/s4-%d", mrand.Int64())
	key := func(k int) string { return fmt.Sprintf("%s-k%d", prefix, k) }
	r0, s0 := serverFor(t, 0)
	kv, err := f.kv(c, r0, s0)
	if err != nil {
		read.Errors++
		progress(fmt.Sprintf("seed004 %s %s: %v", t.Name, f.Name, err))
		return []Result{read}
	}
	defer kv.Close()
	ctx := context.Background()
	val := make([]byte, seed004Size)
	for k := 0; k < seed004Keys; k++ {
		if err := kv.Create(ctx, key(k), val); err != nil {
			read.Errors++
		}
	}
	timed := func(h *Result, f func() error) {
		start := time.Now()
		if err := f(); err != nil {
			h.Errors++
			return
		}
		h.Hist.RecordValue(time.Since(start).Microseconds())
	}
	for i := 0; i < p.Ops; i++ {
		timed(&read, func() error { _, err := kv.Get(ctx, key(mrand.IntN(seed004Keys))); return err })
	}
	for i := 0; i < p.Ops; i++ {
		timed(&write, func() error { return kv.Put(ctx, key(mrand.IntN(seed004Keys)), val) })
	}

	// Task 3.
	var done sync.WaitGroup
	stop := make(chan struct{})
	loop := func(kv KV, measured bool) {
		rk := mrand.IntN(seed004Keys)
		start := time.Now()
		var v []byte
		var err error
		if measured {
			timed(&op, func() error { v, err = kv.Get(ctx, key(rk)); return err })
		} else {
			v, err = kv.Get(ctx, key(rk))
		}
		if err != nil {
			return
		}
		nv := append([]byte{}, v...)
		if rk%2 == 0 && len(nv) > 0 {
			nv = nv[:len(nv)-1]
		} else {
			nv = append(nv, 'x')
		}
		wk := key(mrand.IntN(seed004Keys))
		if measured {
			before := op.Errors
			timed(&op, func() error { return kv.Put(ctx, wk, nv) })
			if op.Errors == before {
				pair.Hist.RecordValue(time.Since(start).Microseconds())
			}
		} else {
			kv.Put(ctx, wk, nv)
		}
	}
	for i := 1; i < p.MixedClients; i++ {
		r, s := serverFor(t, i)
		other, err := f.kv(c, r, s)
		if err != nil {
			op.Errors++
			continue
		}
		done.Add(1)
		go func() {
			defer done.Done()
			defer other.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				loop(other, false)
			}
		}()
	}
	for i := 0; i < p.Ops; i++ {
		loop(kv, true)
	}
	close(stop)
	done.Wait()
	pair.Errors = op.Errors
	var out []Result
	for _, r := range []*Result{&read, &write, &op, &pair} {
		r.Summary = summarize(r.Hist)
		out = append(out, *r)
		progress(fmt.Sprintf("%s %s %s: avg %.2f ms p99 %.2f ms p99.9 %.2f ms (%d errors)", r.Workload, t.Name, f.Name,
			r.Summary.Avg, r.Summary.P99, r.Summary.P999, r.Errors))
	}
	return out
}

// Warmup has one client per client region write for d, as a deployment's
// steady traffic would before anyone measures it. Every system gets the
// same warm-up; for Meridian it is also what leader placement decides on.
func Warmup(c *Cluster, t *Topology, f Flavor, d time.Duration) error {
	var wg sync.WaitGroup
	errc := make(chan error, len(t.Clients))
	for i, r := range clientRegions(t) {
		_, s := serverFor(t, i)
		kv, err := f.kv(c, r, s)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer kv.Close()
			ctx := context.Background()
			key := fmt.Sprintf("/warmup-%d-%d", i, mrand.Int64())
			if err := kv.Create(ctx, key, nil); err != nil {
				errc <- err
				return
			}
			// Errors do not stop the warm-up: a leader moving (placement)
			// can leave a write's outcome unknown, as in production.
			failed := 0
			for end := time.Now().Add(d); time.Now().Before(end); {
				if err := kv.Put(ctx, key, []byte("w")); err != nil {
					if failed++; failed > 100 {
						errc <- err
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// firstCalls has every client make one call of the point's kind, then
// waits firstCallsSettle, before a throughput window: each client has made
// its session before the window, and what a client sets up on its first
// calls is setup too, not the steady state the window measures (the
// native Go client decides its route to the leader in the background
// after its first write: a Status call and a connection, which 256 fresh
// clients made inside every window before). Errors are the window's to
// count, not these calls'.
func firstCalls(kvs []KV, kind string, key func(int) string, val []byte) {
	var wg sync.WaitGroup
	for i, kv := range kvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if kind == "write" {
				_ = kv.Put(ctx, key(i%throughputKeys), val)
			} else {
				_, _ = kv.Get(ctx, key(i%throughputKeys))
			}
		}()
	}
	wg.Wait()
	time.Sleep(firstCallsSettle)
}

// firstCallsSettle is how long firstCalls leaves what the first calls set
// off in the background (a route decided in the client's own region: a
// few round trips there) to finish.
const firstCallsSettle = 300 * time.Millisecond

// ThroughputParams sets the throughput sweep.
type ThroughputParams struct {
	Clients  []int         // closed-loop clients at each point
	Duration time.Duration // measured time per point
}

const throughputKeys = 100

// RunThroughput measures writes/s and reads/s with n closed-loop clients
// (each its own session, on its nearest server) doing 1000 B writes or
// reads of random keys among 100, with latency percentiles at each point.
// Reads are each flavor's KV reads (see Flavors).
func RunThroughput(c *Cluster, t *Topology, f Flavor, p ThroughputParams, progress func(string)) []Result {
	var out []Result
	prefix := fmt.Sprintf("/tp-%d", mrand.Int64())
	key := func(k int) string { return fmt.Sprintf("%s-k%d", prefix, k) }
	val := make([]byte, seed004Size)
	r0, s0 := serverFor(t, 0)
	setup, err := f.kv(c, r0, s0)
	if err != nil {
		progress(fmt.Sprintf("throughput %s %s: %v", t.Name, f.Name, err))
		return []Result{{Workload: "throughput-write", Topology: t.Name, Flavor: f.Name, Errors: 1, Hist: newHist()}}
	}
	for k := 0; k < throughputKeys; k++ {
		setup.Create(context.Background(), key(k), val)
	}
	setup.Close()
	for _, kind := range []string{"write", "read"} {
		for _, n := range p.Clients {
			res := Result{Workload: "throughput-" + kind, Topology: t.Name, Flavor: f.Name, Clients: n, Hist: newHist(), Leader: leaderRegion(c, t)}
			kvs := make([]KV, 0, n)
			for i := 0; i < n; i++ {
				r, s := serverFor(t, i)
				kv, err := f.kv(c, r, s)
				if err != nil {
					res.Errors++
					continue
				}
				kvs = append(kvs, kv)
			}
			firstCalls(kvs, kind, key, val)
			var mu sync.Mutex
			var wg sync.WaitGroup
			var cpu0 time.Duration
			if c.CPU != nil {
				cpu0 = c.CPU()
			}
			self0 := selfCPU()
			start := time.Now()
			end := start.Add(p.Duration)
			for _, kv := range kvs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := context.Background()
					for time.Now().Before(end) {
						k := key(mrand.IntN(throughputKeys))
						t0 := time.Now()
						var err error
						if kind == "write" {
							err = kv.Put(ctx, k, val)
						} else {
							_, err = kv.Get(ctx, k)
						}
						el := time.Since(t0)
						mu.Lock()
						if err != nil {
							res.Errors++
						} else {
							res.Hist.RecordValue(el.Microseconds())
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			res.OpsPerSec = float64(res.Hist.TotalCount()) / time.Since(start).Seconds()
			if n := res.Hist.TotalCount(); n > 0 {
				if c.CPU != nil {
					res.ServerCPUUs = max(0, float64((c.CPU()-cpu0).Microseconds())/float64(n))
				}
				res.HarnessCPUUs = max(0, float64((selfCPU()-self0).Microseconds())/float64(n))
			}
			for _, kv := range kvs {
				kv.Close()
			}
			res.Summary = summarize(res.Hist)
			progress(fmt.Sprintf("throughput-%s %s %s: %d clients: %.0f ops/s, p50 %.2f ms p99 %.2f ms (%d errors)", kind, t.Name, f.Name,
				n, res.OpsPerSec, res.Summary.P50, res.Summary.P99, res.Errors))
			out = append(out, res)
		}
	}
	return out
}
