package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
)

// Options describe one scenario.
type Options struct {
	Seed     uint64
	Duration time.Duration // of the workload under faults (default 8s)
	Faults   []string      // kinds to draw from (default AllFaults)
	Binary   string        // meridian server binary
	OutDir   string        // scenario directories go here; kept on failure
	Nodes    int           // default 3
	// Keyspace, when set (e.g. "/eu"), creates that regional keyspace and
	// runs the keyspace workload (keyspace.go) besides the usual one; a
	// keyspace fault kind sets it to DefaultKeyspace.
	Keyspace string
	// Workload size.
	KVWorkers, LockWorkers, Keys int // defaults 4, 3, 4
	// CheckTimeout bounds porcupine (default 60s); past it the verdict is
	// Unknown (inconclusive), never a pass.
	CheckTimeout time.Duration
	Logf         func(format string, args ...any)
}

// Result is one scenario's outcome.
type Result struct {
	Seed       uint64
	Dir        string
	Faults     []FaultRecord
	Lin        LinResult
	SeqReads   int
	LockGrants int
	Fenced     int
	Durable    int // acknowledged durable creates checked
	// WatchEvents counts watch events checked; WatchLost watches ended by
	// a session's end (the watcher was told).
	WatchEvents, WatchLost int
	ZKOps                  int // register operations made through the ZooKeeper protocol
	// The keyspace workload: flag-then-config reads checked, acknowledged
	// keyspace writes, ephemerals of closed sessions and how long they
	// stayed visible after the close was acknowledged.
	FlagReads, KeyspaceWrites, Ephemerals int
	// EphLag*: the keyspace's ephemerals (median, max) and the root's
	// (max).
	EphLagMedian, EphLagMax, EphLagRootMax time.Duration
	// ElectionTimeout is the servers' configured election timeout (tick ×
	// election ticks), the unit of the availability bound; LongestGap the
	// longest window with no acknowledged write during the workload.
	ElectionTimeout time.Duration
	LongestGap      Gap
	// TickMoves are the servers' log lines announcing a raft tick moved
	// from its floor by the failure detector. On loopback none should:
	// faults are stalls, not distance.
	TickMoves  []string
	Violations []string
	Notes      []string
	Elapsed    time.Duration
}

// Failed reports a violation or a porcupine verdict other than Ok.
func (r *Result) Failed() bool {
	return len(r.Violations) > 0 || r.Lin.Result != porcupine.Ok
}

// Summary is one line for logs.
func (r *Result) Summary() string {
	var kinds, nexts []string
	for _, f := range r.Faults {
		kinds = append(kinds, f.Kind)
		nexts = append(nexts, nextText(f))
	}
	ks := ""
	if r.KeyspaceWrites > 0 || r.FlagReads > 0 {
		ks = fmt.Sprintf(" ks-writes=%d flag-reads=%d ephemerals=%d (gone after an acknowledged close: root max %v, keyspace median %v max %v)",
			r.KeyspaceWrites, r.FlagReads, r.Ephemerals, r.EphLagRootMax.Round(time.Millisecond), r.EphLagMedian.Round(time.Millisecond), r.EphLagMax.Round(time.Millisecond))
	}
	return fmt.Sprintf("seed=%d faults=[%s] kv-ops=%d (zk %d, unknown %d) linearizable=%s seq-reads=%d grants=%d fenced=%d durable=%d watch-events=%d (ended %d) to-next-write=[%s] longest-gap=%s tick-moves=%d violations=%d elapsed=%v",
		r.Seed, strings.Join(kinds, ","), r.Lin.Ops, r.ZKOps, r.Lin.Unknown, r.Lin.Result, r.SeqReads, r.LockGrants, r.Fenced, r.Durable,
		r.WatchEvents, r.WatchLost, strings.Join(nexts, ","), r.LongestGap, len(r.TickMoves), len(r.Violations), r.Elapsed.Round(100*time.Millisecond)) + ks
}

// Run runs one scenario: cluster up, workload, faults, heal, final reads,
// checks. An error means the harness could not run it (not a violation).
func Run(ctx context.Context, o Options) (*Result, error) {
	begin := time.Now()
	if o.Duration <= 0 {
		o.Duration = 8 * time.Second
	}
	if len(o.Faults) == 0 {
		o.Faults = AllFaults
	}
	if o.KVWorkers <= 0 {
		o.KVWorkers = 4
	}
	if o.LockWorkers <= 0 {
		o.LockWorkers = 3
	}
	if o.Keys <= 0 {
		o.Keys = 4
	}
	if o.CheckTimeout <= 0 {
		o.CheckTimeout = 60 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Keyspace == "" && needsKeyspace(o.Faults) {
		o.Keyspace = DefaultKeyspace
	}
	res := &Result{Seed: o.Seed, Dir: filepath.Join(o.OutDir, fmt.Sprintf("seed-%d", o.Seed))}
	os.RemoveAll(res.Dir)
	if err := os.MkdirAll(res.Dir, 0o755); err != nil {
		return nil, err
	}
	logf := func(f string, a ...any) {
		o.Logf("[seed %d %6.2fs] "+f, append([]any{o.Seed, time.Since(begin).Seconds()}, a...)...)
	}
	cl, err := NewCluster(ClusterConfig{Binary: o.Binary, Dir: res.Dir, Nodes: o.Nodes, Proxied: needsProxies(o.Faults), DiskMB: diskFor(o.Faults), Logf: logf})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := setup(ctx, cl, o.Keyspace); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	rec := NewRecorder()
	wt := newWatchTracker(o.Keyspace)
	watchers, stopWatchers := runWatchers(ctx, cl, o.Keys, o.KVWorkers+o.LockWorkers+1, wt)
	defer stopWatchers()
	stopWorkers := runWorkers(ctx, cl, rec, o.Seed, o.KVWorkers, o.LockWorkers, o.Keys, o.Keyspace)
	holderLog, err := os.Create(filepath.Join(res.Dir, "holder.log"))
	if err != nil {
		stopWorkers()
		return nil, err
	}
	defer holderLog.Close()
	env := &faultEnv{cl: cl, rec: rec, rng: rand.New(rand.NewPCG(o.Seed, 0xfa175)), logf: logf, holderLog: holderLog, violations: &res.Violations, ks: o.Keyspace}
	var harnessErr error
	sleepCtx(ctx, 700*time.Millisecond) // warm up before the first fault
	for time.Since(begin) < o.Duration && ctx.Err() == nil {
		kind := o.Faults[env.rng.IntN(len(o.Faults))]
		env.at, env.undone, env.down = time.Duration(rec.Now()), -1, 0
		env.note = ""
		desc, err := runFault(ctx, env, kind)
		desc += env.note
		end := time.Duration(rec.Now())
		if err != nil {
			// No leader before a fault is itself an availability failure.
			harnessErr = fmt.Errorf("fault %s: %w", kind, err)
			res.Violations = append(res.Violations, "availability: "+harnessErr.Error())
			break
		}
		if env.undone < 0 {
			env.undone = env.at
		}
		rec.fault(FaultRecord{Kind: kind, Desc: desc, Start: env.at, Undone: env.undone, End: end, Down: env.down})
		logf("fault %s: %s", kind, desc)
		// Let the cluster recover under load before the next fault.
		sleepCtx(ctx, env.between(500*time.Millisecond, 1500*time.Millisecond))
	}
	// The last fault's next write may still be to come: keep the workload
	// up until it is acknowledged or the fault's bound has passed.
	res.ElectionTimeout = cl.ElectionTimeout()
	rec.mu.Lock()
	faults := append([]FaultRecord(nil), rec.faults...)
	rec.mu.Unlock()
	if n := len(faults); n > 0 {
		awaitWrite(ctx, rec, faults[n-1].Start, faultBound(faults[n-1], res.ElectionTimeout))
	}
	workEnd := time.Duration(rec.Now())
	stopWorkers()
	rec.mu.Lock()
	ws := ackedWrites(rec.kv, rec.locks, rec.durab)
	rec.mu.Unlock()
	gap, av := measureAvailability(ws, faults, workEnd, res.ElectionTimeout)
	res.LongestGap = gap
	res.Violations = append(res.Violations, av...)
	// Crashes: a process that exited without being killed by us.
	for _, id := range cl.Exited() {
		tail := logTail(cl.Nodes[id-1].logPath, 40)
		if needsDisk(o.Faults) && strings.Contains(tail, "no space left on device") && strings.Contains(tail, "replica failed; exiting") {
			// A disk-full fault's write error that surfaced later: the exit
			// it calls for, not a crash (restarted below).
			rec.Note(fmt.Sprintf("node %d exited after its disk had been full", id))
			continue
		}
		res.Violations = append(res.Violations, fmt.Sprintf("node %d exited on its own; log %s ends:\n%s", id, cl.Nodes[id-1].logPath, tail))
	}
	// Heal everything and bring every node back.
	cl.Heal()
	for _, n := range cl.Nodes {
		cl.Resume(n.ID)
		if !cl.Running(n.ID) {
			cl.Kill(n.ID) // reap a crashed process
			if err := cl.Start(n.ID); err != nil {
				return nil, err
			}
		}
	}
	final, err := finalChecks(ctx, cl, rec, o, res, faults, workEnd)
	if err != nil {
		res.Violations = append(res.Violations, "final: "+err.Error())
	}
	if final != nil {
		// Every watch must catch up with the final state: one that does
		// not missed a change.
		wt.awaitFinal(watchers, o.Keys, final, 20*time.Second)
	}
	stopWatchers()
	wt.mu.Lock()
	res.WatchEvents, res.WatchLost = wt.events, wt.lost
	res.Violations = append(res.Violations, wt.violations...)
	wt.mu.Unlock()
	rec.mu.Lock()
	res.Faults = faults
	res.Notes = rec.notes
	rec.mu.Unlock()
	moves, err := tickMoves(cl)
	if err != nil {
		rec.Note(fmt.Sprintf("tick moves not read: %v", err))
	}
	res.TickMoves = moves
	res.Elapsed = time.Since(begin)
	if ctx.Err() != nil {
		// Stopped from outside (a signal, the test's deadline): what it
		// found about a cluster cut short is not a verdict.
		return nil, fmt.Errorf("interrupted: %w", ctx.Err())
	}
	writeReport(res)
	if !res.Failed() {
		cl.Close()
		os.RemoveAll(res.Dir)
	}
	return res, nil
}

func diskFor(kinds []string) int {
	if needsDisk(kinds) {
		return diskMB
	}
	return 0
}

// retry runs fn until it succeeds or the bound passes.
func retry(ctx context.Context, d time.Duration, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(d)
	for {
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		err := fn(octx)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func setup(ctx context.Context, cl *Cluster, ks string) error {
	if _, err := cl.Leader(ctx, 30*time.Second); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.New(cctx, client.Config{Endpoints: cl.Endpoints(0), RequestTimeout: opTimeout, KeepEndpointOrder: true, TLS: cl.ClientTLS()})
	if err != nil {
		return err
	}
	defer c.Close()
	for _, p := range []string{"/chaos", kvRoot, durRoot, lockedPath} {
		err := retry(ctx, 20*time.Second, func(ctx context.Context) error {
			_, _, err := c.Create(ctx, p, nil, client.CreateOptions{})
			if errors.Is(err, errs.ErrNodeExists) {
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	if ks != "" {
		return setupKeyspace(ctx, c, ks)
	}
	return nil
}

// finalChecks reads the final state through a fresh session after healing
// and runs every checker.
// It returns the final state of every register key (nil when it could
// not read them).
func finalChecks(ctx context.Context, cl *Cluster, rec *Recorder, o Options, res *Result, faults []FaultRecord, workEnd time.Duration) (map[string]nodeState, error) {
	if _, err := cl.Leader(ctx, 30*time.Second); err != nil {
		return nil, fmt.Errorf("no leader after healing: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := client.New(cctx, client.Config{Endpoints: cl.Endpoints(0), RequestTimeout: opTimeout, KeepEndpointOrder: true, TLS: cl.ClientTLS()})
	cancel()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	final := map[string]nodeState{}
	// Final linearizable reads join the history: they must see the
	// outcome of everything acknowledged (durability of the register).
	for k := 0; k < o.Keys; k++ {
		key := keyPath(o.Keyspace, k)
		err := retry(ctx, 20*time.Second, func(ctx context.Context) error {
			call := rec.Now()
			data, st, err := c.Get(ctx, key, client.WithConsistency(client.Linearizable))
			ret := rec.Now()
			if err != nil && !errors.Is(err, errs.ErrNoNode) {
				return err
			}
			out := kvOutput{Code: codeOf(err)}
			if err == nil {
				out.Value, out.Version = string(data), st.GetVersion()
				final[key] = nodeState{Exists: true, Mzxid: st.GetMzxid()}
			} else {
				final[key] = nodeState{}
			}
			rec.kvOp(999, kvInput{Op: opGet, Key: key}, call, out, ret, Known)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("final read of %s: %w", key, err)
		}
	}
	var kids []string
	err = retry(ctx, 20*time.Second, func(ctx context.Context) error {
		var err error
		kids, _, err = c.Children(ctx, durRoot, client.WithConsistency(client.Linearizable))
		return err
	})
	if err != nil {
		return final, fmt.Errorf("final list of %s: %w", durRoot, err)
	}
	present := map[string]bool{}
	for _, k := range kids {
		present[durRoot+"/"+k] = true
	}
	rec.mu.Lock()
	kv := append([]porcupine.Operation(nil), rec.kv...)
	seq, acked, locks, durab := rec.seq, rec.acked, rec.locks, rec.durab
	rec.mu.Unlock()
	var n int
	n, v := checkDurable(durab, present)
	res.Durable = n
	res.Violations = append(res.Violations, v...)
	res.Violations = append(res.Violations, checkSequential(seq, acked)...)
	res.Violations = append(res.Violations, checkLocksEach(locks)...)
	if o.Keyspace != "" {
		finalKeyspaceChecks(ctx, c, o.Keyspace, rec, faults, workEnd, res.ElectionTimeout, res)
	}
	res.SeqReads = len(seq)
	for _, e := range locks {
		switch e.Kind {
		case evGrant:
			res.LockGrants++
		case evFenced:
			res.Fenced++
		}
	}
	for _, op := range kv {
		if op.ClientId == o.KVWorkers+o.LockWorkers+1 {
			res.ZKOps++
		}
	}
	lin, err := checkLinearizable(kv, res.Dir, o.CheckTimeout)
	res.Lin = lin
	return final, err
}

// nextText is a fault's time to the next acknowledged write ("none").
func nextText(f FaultRecord) string {
	if f.ToNextWrite < 0 {
		return "none"
	}
	return f.ToNextWrite.Round(time.Millisecond).String()
}

// awaitWrite waits until a write invoked at or after since has been
// acknowledged, or the history clock passes since+bound.
func awaitWrite(ctx context.Context, rec *Recorder, since, bound time.Duration) {
	for ctx.Err() == nil && time.Duration(rec.Now()) < since+bound {
		rec.mu.Lock()
		ws := ackedWrites(rec.kv, rec.locks, rec.durab)
		rec.mu.Unlock()
		if firstWriteAfter(ws, int64(since)) >= 0 {
			return
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// writeReport writes the scenario's result and fault list next to the logs.
func writeReport(r *Result) {
	var b strings.Builder
	fmt.Fprintln(&b, r.Summary())
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "fault %-18s %8v–%-8v undone %-8v next write %-8s (bound %v) %s\n", f.Kind, f.Start.Round(time.Millisecond),
			f.End.Round(time.Millisecond), f.Undone.Round(time.Millisecond), nextText(f), f.Bound, f.Desc)
	}
	fmt.Fprintf(&b, "longest window with no acknowledged write: %s (bound %v; election timeout %v)\n", r.LongestGap, r.LongestGap.Bound, r.ElectionTimeout)
	for _, m := range r.TickMoves {
		fmt.Fprintln(&b, "tick moved:", m)
	}
	for _, v := range r.Violations {
		fmt.Fprintln(&b, "VIOLATION:", v)
	}
	if r.Lin.Viz != "" {
		fmt.Fprintln(&b, "porcupine visualization:", r.Lin.Viz)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(&b, "note:", n)
	}
	os.WriteFile(filepath.Join(r.Dir, "report.txt"), []byte(b.String()), 0o644)
}

// tickMoves returns every server log line that announces a change of the
// raft tick (replica.adaptTick logs each one).
func tickMoves(cl *Cluster) ([]string, error) {
	var out []string
	for _, n := range cl.Nodes {
		b, err := os.ReadFile(n.logPath)
		if err != nil {
			return out, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "raft tick from measured") {
				out = append(out, fmt.Sprintf("node %d: %s", n.ID, line))
			}
		}
	}
	return out, nil
}

// logTail returns the last n lines of a log (a crashed server's panic).
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
