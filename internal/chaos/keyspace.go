package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	gozk "github.com/go-zookeeper/zk"
	"google.golang.org/grpc"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
)

// The keyspace workload: with Options.Keyspace set (or a keyspace fault
// among the kinds), the scenario creates a regional keyspace (its own raft
// group, zone survival over the three members' zones) and runs, besides
// the usual workload with every odd register key and every other lock
// worker's lock in the keyspace:
//
//   - write then flag, in both directions: a writer sets a config node to
//     i and then a flag node to i in the same session, config and flag in
//     different groups; readers on other servers (native sequential reads
//     and the ZooKeeper protocol) that read flag i and then the config
//     must see at least the config version written before flag i;
//   - ephemerals in the root and in the keyspace of sessions that are
//     then closed: each must disappear (the lag after an acknowledged
//     close is measured), and after healing none may be left;
//   - keyspace availability: after each fault a write to the keyspace (any
//     workload's) must be acknowledged within the fault's bound, as for
//     the root.

// Keyspace fault kinds: the leader of the keyspace's group, as the
// members' ListKeyspaces report it.
const (
	KillKeyspaceLeader      = "kill-ks-leader"
	PauseKeyspaceLeader     = "pause-ks-leader"
	PartitionKeyspaceLeader = "partition-ks-leader"
)

// KeyspaceFaults are the keyspace fault kinds (not in AllFaults: they need
// the keyspace workload, which they turn on).
var KeyspaceFaults = []string{KillKeyspaceLeader, PauseKeyspaceLeader, PartitionKeyspaceLeader}

// keyspaceFaultBase maps a keyspace fault to the fault it applies to the
// keyspace group's leader.
var keyspaceFaultBase = map[string]string{
	KillKeyspaceLeader:      KillLeader,
	PauseKeyspaceLeader:     PauseLeader,
	PartitionKeyspaceLeader: PartitionLeader,
}

// DefaultKeyspace is the keyspace a scenario creates when a keyspace fault
// is asked for without Options.Keyspace.
const DefaultKeyspace = "/eu"

func needsKeyspace(kinds []string) bool {
	for _, k := range kinds {
		if _, ok := keyspaceFaultBase[k]; ok {
			return true
		}
	}
	return false
}

func ksLockName(ks string) string { return strings.TrimPrefix(ks, "/") + "/chaos-lock" }

const ephRoot = "/chaos/eph"

// flagPair is one write-then-flag pair: config and flag in different
// groups.
type flagPair struct{ name, config, flag string }

func flagPairs(ks string) []flagPair {
	return []flagPair{
		{"ks→root", ks + "/config", "/flag"},
		{"root→ks", "/chaos/config", ks + "/flag"},
	}
}

// keyspacePaths are the nodes the keyspace workload needs, in creation
// order.
func keyspacePaths(ks string) []string {
	ps := []string{ks + "/kv", ks + "/eph", ephRoot, ks + "/locked"}
	for _, p := range flagPairs(ks) {
		ps = append(ps, p.config, p.flag)
	}
	return ps
}

// setupKeyspace creates the keyspace (home "local", zone survival: the
// chaos members are one region, one zone each) and its nodes.
func setupKeyspace(ctx context.Context, c *client.Client, ks string) error {
	err := retry(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := c.CreateKeyspace(ctx, ks, "local", "zone")
		if err != nil && strings.Contains(strings.ToLower(err.Error()), "exist") {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create keyspace %s: %w", ks, err)
	}
	for _, p := range keyspacePaths(ks) {
		err := retry(ctx, 20*time.Second, func(ctx context.Context) error {
			_, _, err := c.Create(ctx, p, []byte("0"), client.CreateOptions{})
			if errors.Is(err, errs.ErrNodeExists) {
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	return nil
}

// KeyspaceLeader returns the member that says it leads the keyspace's
// group (ListKeyspaces' leader as the member itself sees it), waiting up
// to timeout; only running, unpaused members are asked.
func (c *Cluster) KeyspaceLeader(ctx context.Context, ks string, timeout time.Duration) (uint64, error) {
	deadline := time.Now().Add(timeout)
	for {
		for _, nd := range c.Nodes {
			if !nd.up() {
				continue
			}
			if l, err := c.keyspaceLeaderSeenBy(ctx, nd.ID, ks); err == nil && l == nd.ID {
				return l, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("no leader of keyspace %s", ks)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) keyspaceLeaderSeenBy(ctx context.Context, id uint64, ks string) (uint64, error) {
	conn, err := grpc.NewClient(c.node(id).GRPC, client.DialOptions(client.Config{TLS: c.ClientTLS()})...)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r, err := pb.NewMeridianClient(conn).ListKeyspaces(ctx, &pb.ListKeyspacesRequest{})
	if err != nil {
		return 0, err
	}
	for _, k := range r.GetKeyspaces() {
		if k.GetPrefix() == ks {
			return k.GetLeaderId(), nil
		}
	}
	return 0, fmt.Errorf("keyspace %s not listed", ks)
}

// flagWrite: config version cfgVersion was acknowledged before flag i was
// sent.
type flagWrite struct {
	Pair       string
	I          int
	CfgVersion int32
}

// flagRead: a reader read flag I and then config version CfgVersion
// (the flag read sent at Call, the config read answered at Return).
type flagRead struct {
	Pair, Reader string
	I            int
	CfgVersion   int32
	Call, Return int64
}

// ephRecord is an ephemeral created (or maybe created) by a session that
// was then ended.
type ephRecord struct {
	Path    string
	Session int64
	// Lag is the time from the acknowledged close to the first
	// linearizable read that no longer found the node (-1: not measured).
	Lag time.Duration
}

// ksRecorder holds the keyspace workload's history.
type ksRecorder struct {
	mu         sync.Mutex
	flagWrites []flagWrite
	flagReads  []flagRead
	ephs       []ephRecord
	ksWrites   []writeTimes // acknowledged writes to the keyspace
}

func (r *ksRecorder) add(f func()) { r.mu.Lock(); f(); r.mu.Unlock() }

// startKeyspaceWorkers starts the write-then-flag writers and readers and
// the ephemeral worker; they stop with stop.
func startKeyspaceWorkers(ctx context.Context, cl *Cluster, firstID int, ks string, stop <-chan struct{}, wg *sync.WaitGroup, mk func(int, string) *worker) {
	n := len(cl.Nodes)
	id := firstID
	for pi, p := range flagPairs(ks) {
		// The pairs' writers start on different servers, each pair's
		// readers on the two servers after its writer's.
		wr := mk(id, fmt.Sprintf("fw%d", pi))
		wr.eps = cl.Endpoints(pi % n)
		id++
		wg.Add(1)
		go func() { defer wg.Done(); wr.flagWriter(ctx, stop, p) }()
		nr := mk(id, fmt.Sprintf("fr%d", pi))
		nr.eps = cl.Endpoints((pi + 1) % n)
		id++
		wg.Add(1)
		go func() { defer wg.Done(); nr.flagReader(ctx, stop, p) }()
		zr := mk(id, fmt.Sprintf("fz%d", pi))
		servers := cl.ZKServers((pi + 2) % n)
		id++
		wg.Add(1)
		go func() { defer wg.Done(); zr.zkFlagReader(ctx, stop, servers, p) }()
	}
	ew := mk(id, "eph")
	obs := mk(id+1, "ephobs")
	obs.eps = cl.Endpoints((id + 1) % n)
	wg.Add(1)
	go func() { defer wg.Done(); ew.ephLoop(ctx, stop, obs) }()
}

func (w *worker) ensure(ctx context.Context, stop <-chan struct{}) bool {
	if w.c != nil {
		return true
	}
	if err := w.connect(ctx); err != nil {
		w.rec.Note(fmt.Sprintf("%s: connect: %v", w.name, err))
		w.pause(stop, 500*time.Millisecond)
		return false
	}
	return true
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

func (w *worker) inKeyspace(path string) bool {
	return path == w.ks || strings.HasPrefix(path, w.ks+"/")
}

// flagWriter sets p.config to i and then p.flag to i, in one session.
func (w *worker) flagWriter(ctx context.Context, stop <-chan struct{}, p flagPair) {
	kr := w.rec.ks
	set := func(path, val string) (*client.Stat, error) {
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		call := w.rec.Now()
		st, err := w.c.Set(octx, path, []byte(val), client.AnyVersion)
		if err == nil && w.inKeyspace(path) {
			ret := w.rec.Now()
			kr.add(func() { kr.ksWrites = append(kr.ksWrites, writeTimes{call, ret}) })
		}
		if needsNewSession(err) {
			w.c.Close()
			w.c = nil
		}
		return st, err
	}
	for i := 1; !stopped(stop); i++ {
		if !w.ensure(ctx, stop) {
			continue
		}
		val := strconv.Itoa(i)
		st, err := set(p.config, val)
		if err != nil {
			w.pause(stop, 50*time.Millisecond)
			continue
		}
		kr.add(func() {
			kr.flagWrites = append(kr.flagWrites, flagWrite{Pair: p.name, I: i, CfgVersion: st.GetVersion()})
		})
		if w.c == nil {
			continue
		}
		set(p.flag, val)
		w.pause(stop, 20*time.Millisecond)
	}
}

// flagReader reads p.flag and then p.config with sequential reads.
func (w *worker) flagReader(ctx context.Context, stop <-chan struct{}, p flagPair) {
	kr := w.rec.ks
	for !stopped(stop) {
		if !w.ensure(ctx, stop) {
			continue
		}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		call := w.rec.Now()
		data, _, err := w.c.Get(octx, p.flag, client.WithConsistency(client.Sequential))
		var st *client.Stat
		if err == nil {
			_, st, err = w.c.Get(octx, p.config, client.WithConsistency(client.Sequential))
		}
		cancel()
		ret := w.rec.Now()
		if err == nil {
			if i, perr := strconv.Atoi(string(data)); perr == nil && i > 0 {
				kr.add(func() {
					kr.flagReads = append(kr.flagReads, flagRead{Pair: p.name, Reader: w.name, I: i, CfgVersion: st.GetVersion(), Call: call, Return: ret})
				})
			}
		} else if needsNewSession(err) {
			w.c.Close()
			w.c = nil
		}
		w.pause(stop, 10*time.Millisecond)
	}
}

// zkFlagReader is flagReader through the ZooKeeper protocol.
func (w *worker) zkFlagReader(ctx context.Context, stop <-chan struct{}, servers []string, p flagPair) {
	kr := w.rec.ks
	conn, _, err := zkConnect(servers)
	if err != nil {
		w.rec.Note(fmt.Sprintf("%s: connect: %v", w.name, err))
		return
	}
	defer conn.Close()
	for !stopped(stop) && ctx.Err() == nil {
		call := w.rec.Now()
		data, _, err := conn.Get(p.flag)
		if err == nil {
			var st *gozk.Stat
			_, st, err = conn.Get(p.config)
			ret := w.rec.Now()
			if i, perr := strconv.Atoi(string(data)); err == nil && perr == nil && i > 0 {
				kr.add(func() {
					kr.flagReads = append(kr.flagReads, flagRead{Pair: p.name, Reader: w.name, I: i, CfgVersion: st.Version, Call: call, Return: ret})
				})
			}
		}
		if err != nil {
			w.pause(stop, 100*time.Millisecond)
			continue
		}
		w.pause(stop, 10*time.Millisecond)
	}
}

// ephLoop: a fresh session creates an ephemeral in the keyspace and one
// in the root, then closes; obs (another session, another server) measures
// how long each stays visible after the close was acknowledged.
func (w *worker) ephLoop(ctx context.Context, stop <-chan struct{}, obs *worker) {
	kr := w.rec.ks
	defer func() {
		if obs.c != nil {
			obs.c.Close()
			obs.c = nil
		}
	}()
	for n := 0; !stopped(stop); n++ {
		if !w.ensure(ctx, stop) {
			continue
		}
		sess := w.c.SessionID()
		var made []string
		// The root's first: the observer measures them in this order.
		for _, dir := range []string{ephRoot, w.ks + "/eph"} {
			p := fmt.Sprintf("%s/%s-%d-%d", dir, w.name, sess, n)
			octx, cancel := context.WithTimeout(ctx, opTimeout)
			_, _, err := w.c.Create(octx, p, nil, client.CreateOptions{Mode: client.Ephemeral})
			cancel()
			if classify(err) != NotApplied && !errors.Is(err, errs.ErrNodeExists) {
				made = append(made, p)
			}
		}
		err := w.c.Close()
		w.c = nil
		closed := time.Now()
		for _, p := range made {
			r := ephRecord{Path: p, Session: sess, Lag: -1}
			if err == nil && obs.ensure(ctx, stop) {
				for time.Since(closed) < 15*time.Second && !stopped(stop) {
					octx, cancel := context.WithTimeout(ctx, opTimeout)
					ok, _, eerr := obs.c.Exists(octx, p, client.WithConsistency(client.Linearizable))
					cancel()
					if eerr == nil && !ok {
						r.Lag = time.Since(closed)
						break
					}
					if needsNewSession(eerr) {
						obs.c.Close()
						obs.c = nil
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			kr.add(func() { kr.ephs = append(kr.ephs, r) })
		}
		w.pause(stop, 50*time.Millisecond)
	}
}

// checkFlags: a reader that read flag i and then the config must see at
// least the config version acknowledged before flag i was written.
func checkFlags(writes []flagWrite, reads []flagRead) []string {
	type key struct {
		pair string
		i    int
	}
	ver := map[key]int32{}
	for _, w := range writes {
		ver[key{w.Pair, w.I}] = w.CfgVersion
	}
	var out []string
	for _, r := range reads {
		v, ok := ver[key{r.Pair, r.I}]
		if !ok {
			out = append(out, fmt.Sprintf("write then flag (%s): %s read flag %d, which was never written after an acknowledged config", r.Pair, r.Reader, r.I))
		} else if r.CfgVersion < v {
			out = append(out, fmt.Sprintf("write then flag (%s): %s read flag %d and then config version %d (%v–%v), older than version %d acknowledged before the flag was written",
				r.Pair, r.Reader, r.I, r.CfgVersion, dur(r.Call), dur(r.Return), v))
		}
		if len(out) >= 20 {
			break
		}
	}
	return out
}

// checkKeyspaceAvailability: after each fault whose bound ended before
// the workload did, a write to the keyspace invoked after the fault took
// hold must have been acknowledged within the bound.
func checkKeyspaceAvailability(ws []writeTimes, faults []FaultRecord, end, electionTimeout time.Duration) []string {
	slices.SortFunc(ws, func(a, b writeTimes) int { return cmp.Compare(a.Return, b.Return) })
	var out []string
	for _, f := range faults {
		b := faultBound(f, electionTimeout)
		if f.Start+b > end {
			continue
		}
		next := firstWriteAfter(ws, int64(f.Start))
		if next < 0 || time.Duration(next)-f.Start > b {
			got := "none"
			if next >= 0 {
				got = (time.Duration(next) - f.Start).Round(time.Millisecond).String()
			}
			out = append(out, fmt.Sprintf("keyspace availability: after %s (%s) the next keyspace write was acknowledged after %s, bound %v", f.Kind, f.Desc, got, b))
		}
	}
	return out
}

// finalKeyspaceChecks runs the keyspace checkers after healing: no
// ephemeral of an ended session may be left (every session of the
// ephemeral worker has ended by now).
func finalKeyspaceChecks(ctx context.Context, c *client.Client, ks string, rec *Recorder, faults []FaultRecord, end, et time.Duration, res *Result) {
	kr := rec.ks
	kr.mu.Lock()
	fw, fr, ephs := kr.flagWrites, kr.flagReads, kr.ephs
	ksw := append([]writeTimes(nil), kr.ksWrites...)
	kr.mu.Unlock()
	// Every acknowledged write to the keyspace counts: the flag writers',
	// the register workers' on its keys, the lock workers' on its lock.
	rec.mu.Lock()
	var kv []porcupine.Operation
	for _, op := range rec.kv {
		if in, _ := op.Input.(kvInput); strings.HasPrefix(in.Key, ks+"/") {
			kv = append(kv, op)
		}
	}
	var locks []lockEvent
	for _, e := range rec.locks {
		if e.Lock == ksLockName(ks) {
			locks = append(locks, e)
		}
	}
	rec.mu.Unlock()
	ksw = append(ksw, ackedWrites(kv, locks, nil)...)
	res.Violations = append(res.Violations, checkFlags(fw, fr)...)
	res.Violations = append(res.Violations, checkKeyspaceAvailability(ksw, faults, end, et)...)
	res.FlagReads, res.KeyspaceWrites = len(fr), len(ksw)
	var lags []time.Duration
	for _, e := range ephs {
		switch {
		case e.Lag < 0:
		case strings.HasPrefix(e.Path, ks+"/"):
			lags = append(lags, e.Lag)
		default:
			res.EphLagRootMax = max(res.EphLagRootMax, e.Lag)
		}
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	res.Ephemerals = len(ephs)
	if len(lags) > 0 {
		res.EphLagMedian, res.EphLagMax = lags[len(lags)/2], lags[len(lags)-1]
	}
	// Sessions ended more than a session timeout ago (or closed) must have
	// lost their ephemerals in both groups.
	deadline := time.Now().Add(20 * time.Second)
	var left []string
	for {
		left = left[:0]
		for _, dir := range []string{ks + "/eph", ephRoot} {
			var kids []string
			err := retry(ctx, 10*time.Second, func(ctx context.Context) error {
				var err error
				kids, _, err = c.Children(ctx, dir, client.WithConsistency(client.Linearizable))
				return err
			})
			if err != nil {
				res.Violations = append(res.Violations, fmt.Sprintf("final: list %s: %v", dir, err))
				return
			}
			for _, k := range kids {
				left = append(left, dir+"/"+k)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i, p := range left {
		if i == 20 {
			break
		}
		res.Violations = append(res.Violations, fmt.Sprintf("ephemeral %s of an ended session still present 20s after healing", p))
	}
}
