package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/testutil"
)

// kv is a small deterministic state machine: entries are "key=value".
type kv struct {
	mu       sync.Mutex
	m        map[string]string
	at       map[string]uint64 // key -> index of the entry that last set it
	order    []uint64
	restores []uint64
	dups     int    // entries that set a key already set
	refuse   string // a key this machine cannot apply (an older binary's)
}

func newKV() *kv { return &kv{m: map[string]string{}, at: map[string]uint64{}} }

func (s *kv) Apply(index, term uint64, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, v, _ := strings.Cut(string(data), "=")
	if s.refuse != "" && k == s.refuse {
		return fmt.Errorf("cannot apply %q", k)
	}
	if _, ok := s.m[k]; ok {
		s.dups++
	}
	s.m[k] = v
	s.at[k] = index
	s.order = append(s.order, index)
	return nil
}

func (s *kv) Snapshot() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := slices.Sorted(maps.Keys(s.m))
	var b []byte
	for _, k := range keys {
		b = append(b, k+"="+s.m[k]+"\n"...)
	}
	return b, nil
}

func (s *kv) Restore(index uint64, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			s.m[k] = v
		}
	}
	s.restores = append(s.restores, index)
	return nil
}

func (s *kv) get(k string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[k]
	return v, ok
}

func (s *kv) index(k string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at[k]
}

func (s *kv) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *kv) state() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.m)
}

// stateThrough is the state made by the entries up to index end (keys
// are written once in the tests that use it).
func (s *kv) stateThrough(end uint64) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]string{}
	for k, v := range s.m {
		if s.at[k] <= end {
			m[k] = v
		}
	}
	return m
}

// appliedThrough is the order of applied indexes up to end.
func (s *kv) appliedThrough(end uint64) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var o []uint64
	for _, i := range s.order {
		if i <= end {
			o = append(o, i)
		}
	}
	return o
}

func (s *kv) applied() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

func (s *kv) restored() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.restores)
}

type cluster struct {
	t     testing.TB
	peers []Peer
	dirs  []string
	reps  []*Replica
	sms   []*kv
	tweak func(*Config)
	// views, if set, gives each replica its kv as a SnapshotViewer
	// (snapshots_test.go).
	views *viewGate
}

func newCluster(t testing.TB, n int, tweak func(*Config)) *cluster {
	t.Helper()
	return startCluster(t, n, &cluster{t: t, tweak: tweak})
}

// startCluster starts n replicas as c says.
func startCluster(t testing.TB, n int, c *cluster) *cluster {
	t.Helper()
	for i, port := range testutil.FreePorts(t, n) {
		c.peers = append(c.peers, Peer{ID: uint64(i + 1), Addr: fmt.Sprintf("127.0.0.1:%d", port)})
		c.dirs = append(c.dirs, filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i+1)))
	}
	c.reps = make([]*Replica, n)
	c.sms = make([]*kv, n)
	for i := range c.reps {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.reps {
			c.stop(i)
		}
	})
	return c
}

func logger() *slog.Logger {
	if os.Getenv("MERIDIAN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func (c *cluster) config(i int) Config {
	cfg := Config{ID: uint64(i + 1), Peers: c.peers, DataDir: c.dirs[i], TickInterval: 20 * time.Millisecond,
		ElectionTicks: 10, Logger: logger()}
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	return cfg
}

func (c *cluster) start(i int) {
	c.t.Helper()
	c.sms[i] = newKV()
	var sm StateMachine = c.sms[i]
	if c.views != nil {
		sm = viewKV{c.sms[i], c.views}
	}
	r, err := Open(c.config(i), sm)
	if err != nil {
		c.t.Fatalf("open %d: %v", i+1, err)
	}
	c.reps[i] = r
}

func (c *cluster) stop(i int) {
	if c.reps[i] != nil {
		c.reps[i].Close()
		c.reps[i] = nil
	}
}

// leader waits until every running replica agrees on a running leader.
func (c *cluster) leader() int {
	c.t.Helper()
	return agreedLeader(c.t, c.reps, func(i int) bool { return c.reps[i] != nil })
}

// put proposes until accepted and waits until every running replica applied it.
func (c *cluster) put(via int, k, v string) {
	c.t.Helper()
	proposeKV(c.t, c.reps[via], k, v)
	c.waitAll(func(s *kv) bool { got, ok := s.get(k); return ok && got == v })
}

func (c *cluster) waitAll(cond func(*kv) bool) {
	c.t.Helper()
	converge(c.t, c.sms, func(i int) bool { return c.reps[i] != nil }, cond)
}

// agreedLeader waits until the running replicas of one group (running(i))
// agree on a running leader and returns its index in reps.
func agreedLeader(t testing.TB, reps []*Replica, running func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		var lead uint64
		ok := true
		for i, r := range reps {
			if !running(i) {
				continue
			}
			l := r.Leader()
			if l == 0 || (lead != 0 && l != lead) {
				ok = false
				break
			}
			lead = l
		}
		if ok && lead != 0 && running(int(lead-1)) && reps[lead-1].IsLeader() {
			return int(lead - 1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no leader")
	return -1
}

// proposeKV proposes k=v through r until raft accepts it.
func proposeKV(t testing.TB, r *Replica, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		err := r.Propose(ctx, []byte(k+"="+v))
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("propose: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// converge waits until cond holds for the state machine of every running
// member.
func converge(t testing.TB, sms []*kv, running func(int) bool, cond func(*kv) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := range sms {
		for running(i) && !cond(sms[i]) {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d did not converge", i+1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestReadIndexBatching(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	c.put(lead, "x", "1")
	for _, i := range []int{lead, (lead + 1) % 3} {
		before := c.reps[i].readRounds.Load()
		var wg sync.WaitGroup
		const n = 200
		errc := make(chan error, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				idx, err := c.reps[i].ReadIndex(ctx)
				if err == nil && idx < c.sms[lead].index("x") {
					err = fmt.Errorf("read index %d below the write at %d", idx, c.sms[lead].index("x"))
				}
				errc <- err
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			if err != nil {
				t.Fatal(err)
			}
		}
		rounds := c.reps[i].readRounds.Load() - before
		t.Logf("replica %d: %d reads in %d rounds", i+1, n, rounds)
		if rounds >= n/4 {
			t.Fatalf("%d reads took %d ReadIndex rounds; want them batched", n, rounds)
		}
	}
}

// TestProposalBatching: concurrent proposals through the leader are
// stepped into raft a batch at a time while its loop is busy with the
// previous batch's fsync; through the leader and through a follower every
// one is applied and no batch of several exceeds MaxSizePerMsg. (A
// follower's loop has no fsync to wait for: whether proposals that arrive
// together are drained together there is up to the scheduler, which can
// hand each proposal to the waiting loop as it is sent.)
func TestProposalBatching(t *testing.T) {
	const maxMsg = 8 << 10
	c := newCluster(t, 3, func(cfg *Config) { cfg.MaxSizePerMsg = maxMsg })
	lead := c.leader()
	val := strings.Repeat("v", 1000)
	for _, i := range []int{lead, (lead + 1) % 3} {
		before := c.reps[i].propBatches.Load()
		const n = 200
		var wg sync.WaitGroup
		errc := make(chan error, n)
		// The proposers start together: started one by one, each can
		// reach a raft loop that has nothing else to do (a follower's
		// proposal costs it no fsync) and be stepped alone.
		start := make(chan struct{})
		for j := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				errc <- c.reps[i].Propose(ctx, []byte(fmt.Sprintf("b%d-%d=%s", i, j, val)))
			}()
		}
		close(start)
		wg.Wait()
		close(errc)
		for err := range errc {
			if err != nil {
				t.Fatal(err)
			}
		}
		c.waitAll(func(s *kv) bool {
			for j := range n {
				if _, ok := s.get(fmt.Sprintf("b%d-%d", i, j)); !ok {
					return false
				}
			}
			return true
		})
		batches := c.reps[i].propBatches.Load() - before
		t.Logf("replica %d: %d proposals in %d batches, largest %d bytes", i+1, n, batches, c.reps[i].propMaxBytes.Load())
		if i == lead && batches >= n {
			t.Fatalf("%d proposals through the leader took %d batches; want them batched", n, batches)
		}
		if got := c.reps[i].propMaxBytes.Load(); got > maxMsg {
			t.Fatalf("a batch of %d bytes exceeds MaxSizePerMsg %d", got, maxMsg)
		}
	}
}

// TestLeaderCrashDuringWrites kills the leader under a stream of writes: a new
// leader takes over, writes continue, nothing applied anywhere is lost, and
// the old leader catches up when it comes back.
func TestLeaderCrashDuringWrites(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	reps := slices.Clone(c.reps) // writers use these; Propose on a closed one fails
	stop := make(chan struct{})
	var accepted atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := g
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := reps[target%3].Propose(ctx, fmt.Appendf(nil, "w%d-%05d=%d", g, n, n))
				cancel()
				if err != nil {
					target++ // try another replica
					time.Sleep(5 * time.Millisecond)
					continue
				}
				accepted.Add(1)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	waitFor(t, func() bool { return c.sms[lead].len() >= 100 })
	c.stop(lead)
	dead := c.sms[lead].state()
	nl := c.leader()
	if nl == lead {
		t.Fatal("stopped replica still leads")
	}
	n := c.sms[nl].len()
	waitFor(t, func() bool { return c.sms[nl].len() >= n+100 }) // writes continue
	close(stop)
	wg.Wait()
	c.put(nl, "final", "x") // survivors have applied everything before it
	// A proposal whose Propose gave up (or that a member held while there
	// was no leader) may still commit after "final", on each replica at its
	// own moment, so the replicas are compared through final's index.
	end := c.sms[nl].index("final")

	a, b := c.sms[(lead+1)%3], c.sms[(lead+2)%3]
	if d := kvDiff(a, b, end); d != "" || !slices.Equal(a.appliedThrough(end), b.appliedThrough(end)) {
		t.Fatalf("survivors diverged: %s", d)
	}
	for k, v := range dead {
		if got, ok := a.get(k); !ok || got != v {
			t.Fatalf("%s=%s applied on the old leader is missing on the survivors (%q)", k, v, got)
		}
	}
	t.Logf("%d writes accepted, %d applied before the crash, %d after", accepted.Load(), len(dead), a.len()-len(dead))

	c.start(lead)
	c.waitAll(func(s *kv) bool { _, ok := s.get("final"); return ok })
	if d := kvDiff(c.sms[lead], a, end); d != "" {
		t.Fatalf("restarted leader diverged from a survivor: %s", d)
	}
	// Each write is proposed once, so none may be applied twice.
	if a.dups != 0 {
		t.Fatalf("%d writes applied twice", a.dups)
	}
	// Proposals forwarded to the old leader while it was down wait in the
	// survivors' send queues and are delivered when it is back; it forwards
	// them to the new leader (typically 30-180 writes commit after final).
	if late := a.len() - len(a.stateThrough(end)); late > 0 {
		t.Logf("%d writes committed after final", late)
	}
}

// kvDiff describes how two state machines differ through log index end
// ("" if they do not): each key on only one side or with different values,
// with the log index that set it, so a divergence says which entries.
func kvDiff(x, y *kv, end uint64) string {
	xs, ys := x.stateThrough(end), y.stateThrough(end)
	var d []string
	for k, v := range xs {
		if w, ok := ys[k]; !ok || w != v {
			d = append(d, fmt.Sprintf("%s=%s@%d vs %q@%d", k, v, x.index(k), w, y.index(k)))
		}
	}
	for k, w := range ys {
		if _, ok := xs[k]; !ok {
			d = append(d, fmt.Sprintf("%s missing vs %s@%d", k, w, y.index(k)))
		}
	}
	if len(d) == 0 {
		return ""
	}
	slices.Sort(d)
	return fmt.Sprintf("%d vs %d keys through index %d: %s", len(xs), len(ys), end, strings.Join(d, "; "))
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFollowerCatchesUpFromSnapshot(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 50; cfg.CatchUpEntries = 10 })
	lead := c.leader()
	f := (lead + 1) % 3
	c.stop(f)
	for i := 0; i < 300; i++ {
		c.put(lead, fmt.Sprintf("k%03d", i), fmt.Sprint(i))
	}
	if st := c.reps[lead].Status(); st.SnapshotIndex < 250 || st.FirstIndex < 200 {
		t.Fatalf("leader did not snapshot and compact: %+v", st)
	}
	c.start(f)
	c.waitAll(func(s *kv) bool { return s.len() == 300 })
	if r := c.sms[f].restored(); len(r) == 0 || r[len(r)-1] == 0 {
		t.Fatalf("follower did not restore from a snapshot: %v", r)
	}
	if !maps.Equal(c.sms[f].state(), c.sms[lead].state()) {
		t.Fatal("follower diverged")
	}
	c.put(lead, "after", "snapshot")
}

func TestWholeClusterRestart(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 25; cfg.CatchUpEntries = 5 })
	lead := c.leader()
	for i := 0; i < 60; i++ {
		c.put(lead, fmt.Sprintf("k%d", i), fmt.Sprint(i))
	}
	want := c.sms[lead].state()
	for i := range c.reps {
		c.stop(i)
	}
	for i := range c.reps {
		c.start(i)
	}
	for i, s := range c.sms {
		if r := s.restored(); len(r) != 1 || r[0] == 0 {
			t.Fatalf("replica %d: not rebuilt from its snapshot: %v", i+1, r)
		}
	}
	c.waitAll(func(s *kv) bool { return s.len() == 60 })
	for i, s := range c.sms {
		if !maps.Equal(s.state(), want) {
			t.Fatalf("replica %d: state differs after restart", i+1)
		}
	}
	lead = c.leader()
	c.put(lead, "after", "restart")
}

// A member stopped on purpose comes back with everything it knew to be
// committed applied, even alone (no leader to tell it the commit index
// again): stopping stores the commit index its writes did not.
func TestStoppedMemberRestartsWithItsCommits(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	for i := 0; i < 30; i++ {
		c.put(lead, fmt.Sprintf("k%d", i), fmt.Sprint(i))
	}
	want := c.sms[lead].state()
	for i := range c.reps {
		c.stop(i)
	}
	c.start(lead) // alone: it cannot commit anything, nor learn a commit index
	c.waitAll(func(s *kv) bool { return s.len() == len(want) })
	if got := c.sms[lead].state(); !maps.Equal(got, want) {
		t.Fatalf("restarted alone: %v, want %v", got, want)
	}
}

func TestTransferLeadership(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	target := uint64((lead+1)%3 + 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Ask a follower: it forwards the request to the leader.
	if err := c.reps[(lead+2)%3].TransferLeadership(ctx, target); err != nil {
		t.Fatal(err)
	}
	if got := c.leader(); uint64(got+1) != target {
		t.Fatalf("leader %d, want %d", got+1, target)
	}
	if err := c.reps[0].TransferLeadership(ctx, 42); !errors.Is(err, errs.ErrBadArguments) {
		t.Fatalf("transfer to a non-member: %v", err)
	}
	c.put(int(target-1), "after", "transfer")
}

func TestSingleNodeCampaign(t *testing.T) {
	c := newCluster(t, 1, nil)
	if err := c.reps[0].Campaign(); err != nil {
		t.Fatal(err)
	}
	c.leader()
	c.put(0, "a", "1")
	r := c.reps[0]
	c.stop(0)
	if err := r.Campaign(); !errors.Is(err, errs.ErrStopped) {
		t.Fatalf("campaign after close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestCorruptStorageFailsOpen(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  []byte
		bad  func(v []byte) []byte
	}{
		{"hard state bit flip", keyHardState, func(v []byte) []byte { v[len(v)-1] ^= 0xff; return v }},
		{"hard state garbage", keyHardState, func([]byte) []byte { return []byte("garbage") }},
		{"entry garbage", entryKey(2), func([]byte) []byte { return []byte("garbage!") }},
		{"entry bit flip", entryKey(4), func(v []byte) []byte { v[5] ^= 0x10; return v }},
		{"entry deleted (gap)", entryKey(3), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1, nil)
			c.leader()
			for i := 0; i < 5; i++ {
				c.put(0, fmt.Sprint(i), "v")
			}
			c.stop(0)
			db, err := pebble.Open(c.dirs[0], &pebble.Options{Logger: pebbleLogger{logger()}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.bad == nil {
				err = db.Delete(tc.key, pebble.Sync)
			} else {
				v, closer, gerr := db.Get(tc.key)
				if gerr != nil {
					t.Fatal(gerr)
				}
				bad := tc.bad(slices.Clone(v))
				closer.Close()
				err = db.Set(tc.key, bad, pebble.Sync)
			}
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			sm := newKV()
			if r, err := Open(c.config(0), sm); err == nil {
				r.Close()
				t.Fatal("Open accepted corrupt storage")
			} else {
				t.Log(err)
			}
			if len(sm.applied()) != 0 {
				t.Fatal("applied entries from corrupt storage")
			}
		})
	}
}

func frameBytes(kind byte, from uint64, body []byte) []byte {
	b := make([]byte, 4+frameHeader, 4+frameHeader+len(body))
	binary.BigEndian.PutUint32(b, uint32(frameHeader+len(body)))
	b[4] = kind
	binary.BigEndian.PutUint64(b[5:], from)
	return append(b, body...)
}

func withLen(frame []byte, n uint32) []byte {
	binary.BigEndian.PutUint32(frame, n)
	return frame
}

func marshal(t *testing.T, m *pb.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGarbageFramesCloseOnlyThatConnection(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	me, other := uint64(lead+1), uint64((lead+1)%3+1)
	typ := func(mt pb.MessageType) *pb.MessageType { return &mt }
	normal := pb.EntryNormal
	cases := map[string][]byte{
		"absurd length":   withLen(frameBytes(kindRaft, other, nil), 0xffffffff),
		"oversized raft":  withLen(frameBytes(kindRaft, other, nil), 64<<20),
		"oversized side":  withLen(frameBytes(kindSide, other, nil), maxSidePayload+frameHeader+1),
		"short length":    withLen(frameBytes(kindRaft, other, nil), 3),
		"unknown kind":    frameBytes(99, other, nil),
		"unknown sender":  frameBytes(kindRaft, 99, marshal(t, &pb.Message{Type: typ(pb.MsgHeartbeat), To: new(me), From: new(uint64(99))})),
		"self as sender":  frameBytes(kindRaft, me, nil),
		"undecodable":     frameBytes(kindRaft, other, []byte{0xde, 0xad, 0xbe, 0xef}),
		"truncated frame": frameBytes(kindRaft, other, []byte{1, 2, 3})[:4+frameHeader+2],
		"misaddressed":    frameBytes(kindRaft, other, marshal(t, &pb.Message{Type: typ(pb.MsgHeartbeat), To: new(uint64(77)), From: new(other)})),
		"local type":      frameBytes(kindRaft, other, marshal(t, &pb.Message{Type: typ(pb.MsgHup), To: new(me), From: new(other)})),
		"empty proposal":  frameBytes(kindRaft, other, marshal(t, &pb.Message{Type: typ(pb.MsgProp), To: new(me), From: new(other)})),
		"gappy append": frameBytes(kindRaft, other, marshal(t, &pb.Message{Type: typ(pb.MsgApp), To: new(me), From: new(other),
			Term: new(uint64(1 << 40)), Index: new(uint64(1)), LogTerm: new(uint64(1)),
			Entries: []*pb.Entry{{Index: new(uint64(2)), Term: new(uint64(1)), Type: &normal}, {Index: new(uint64(9)), Term: new(uint64(1)), Type: &normal}}})),
		"snapshot in a raft frame": frameBytes(kindRaft, other, marshal(t, &pb.Message{Type: typ(pb.MsgSnap), To: new(me), From: new(other)})),
		"empty snapshot":           frameBytes(kindSnap, other, marshal(t, &pb.Message{Type: typ(pb.MsgSnap), To: new(me), From: new(other)})),
		// raft panics on these (found by FuzzPeerFrames).
		"append response from self": frameBytes(kindRaft, other, marshal(t, &pb.Message{Type: typ(pb.MsgAppResp), To: new(me), From: new(me), Term: new(uint64(1 << 40)), Index: new(uint64(1))})),
		"pre-vote without a term":   frameBytes(kindRaft, other, marshal(t, &pb.Message{Type: typ(pb.MsgPreVote), To: new(me), From: new(other), Index: new(uint64(1 << 40)), LogTerm: new(uint64(1 << 40))})),
		"snapshot voter also learner": frameBytes(kindSnap, other, marshal(t, &pb.Message{Type: typ(pb.MsgSnap), To: new(me), From: new(other), Term: new(uint64(1 << 40)),
			Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1 << 40)), Term: new(uint64(1 << 40)),
				ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{me}}}}})),
		"snapshot joint without outgoing": frameBytes(kindSnap, other, marshal(t, &pb.Message{Type: typ(pb.MsgSnap), To: new(me), From: new(other), Term: new(uint64(1 << 40)),
			Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1 << 40)), Term: new(uint64(1 << 40)),
				ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}, LearnersNext: []uint64{me}}}}})),
	}
	for name, payload := range cases {
		// Authenticated as member other (plaintext cluster: the hello
		// only), so each case reaches the frame decoder.
		expectClosed(t, c.peers[lead].Addr, other, name, payload, name == "truncated frame")
	}
	if l := c.reps[lead].Leader(); l != me {
		t.Fatalf("leadership moved to %d", l)
	}
	c.put(lead, "still", "works")
}

// expectClosed sends payload on a connection authenticated as member from
// (closing its write side after, when halfClose) and fails unless the
// receiver closes the connection.
func expectClosed(t *testing.T, addr string, from uint64, name string, payload []byte, halfClose bool) {
	t.Helper()
	conn := peerConnect(t, addr, from, ClusterID(""), nil)
	defer conn.Close()
	conn.Write(payload)
	if halfClose {
		conn.(*net.TCPConn).CloseWrite()
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := conn.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("%s: connection not closed (%v)", name, err)
	}
}

func TestSendToLeader(t *testing.T) {
	type side struct {
		to, from uint64
		payload  string
	}
	got := make(chan side, 10)
	c := newCluster(t, 3, func(cfg *Config) {
		id := cfg.ID
		cfg.OnSideMessage = func(from uint64, payload []byte) { got <- side{id, from, string(payload)} }
	})
	lead := c.leader()
	c.put(lead, "a", "1") // every member knows the leader
	f := (lead + 1) % 3
	for _, via := range []int{f, lead} {
		if err := c.reps[via].SendToLeader([]byte(fmt.Sprint("hello from ", via+1))); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			if want := (side{uint64(lead + 1), uint64(via + 1), fmt.Sprint("hello from ", via+1)}); s != want {
				t.Fatalf("got %+v, want %+v", s, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("side message not delivered")
		}
	}
	if err := c.reps[f].SendToLeader(make([]byte, maxSidePayload+1)); !errors.Is(err, errs.ErrRequestTooLarge) {
		t.Fatalf("oversized side payload: %v", err)
	}
}

func TestLimitsAndClose(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.MaxProposalBytes = 100; cfg.MaxPendingReads = 1 })
	c.leader()
	r := c.reps[0]
	if err := r.Propose(context.Background(), make([]byte, 101)); !errors.Is(err, errs.ErrRequestTooLarge) {
		t.Fatalf("oversized proposal: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.ReadIndex(ctx); err != nil {
		t.Fatal(err)
	}
	var throttled atomic.Bool
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.ReadIndex(ctx); errors.Is(err, errs.ErrThrottled) {
				throttled.Store(true)
			}
		}()
	}
	wg.Wait()
	if !throttled.Load() {
		t.Log("no read was throttled (all finished before the next started)")
	}
	c.stop(0)
	if err := r.Propose(context.Background(), []byte("a=b")); !errors.Is(err, errs.ErrStopped) {
		t.Fatalf("propose after close: %v", err)
	}
	if _, err := r.ReadIndex(context.Background()); !errors.Is(err, errs.ErrStopped) {
		t.Fatalf("read after close: %v", err)
	}
	if err := r.WaitApplied(context.Background(), 1<<40); !errors.Is(err, errs.ErrStopped) {
		t.Fatalf("wait after close: %v", err)
	}
	if err := r.SendToLeader([]byte("x")); !errors.Is(err, errs.ErrStopped) {
		t.Fatalf("side message after close: %v", err)
	}
	if st := r.Status(); st.Role != "stopped" {
		t.Fatalf("status after close: %+v", st)
	}
}

// TestCloseWakesWaiters checks that callers blocked on the replica get
// errs.ErrStopped when it closes.
func TestCloseWakesWaiters(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.leader()
	// Stop two members: the third loses quorum and reads cannot complete.
	c.stop(0)
	c.stop(1)
	r := c.reps[2]
	errc := make(chan error, 2)
	go func() { _, err := r.ReadIndex(context.Background()); errc <- err }()
	go func() { errc <- r.WaitApplied(context.Background(), 1<<40) }()
	time.Sleep(100 * time.Millisecond)
	c.stop(2)
	for range 2 {
		select {
		case err := <-errc:
			if !errors.Is(err, errs.ErrStopped) {
				t.Fatalf("got %v, want ErrStopped", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("waiter not woken by Close")
		}
	}
}

// Every replica probes every peer over the raft connections: round trips
// and quorum latency accumulate, and a stopped peer's probes count as lost
// while the remaining majority still gives a quorum latency.
func TestLatencyProbes(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.ProbeInterval = 10 * time.Millisecond })
	c.leader()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, c.reps[0].Latency())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("probe replies", func() bool {
		s := c.reps[0].Latency()
		return len(s.Peers) == 2 && s.Peers[0].Total.Count >= 20 && s.Peers[1].Total.Count >= 20 && s.All.Total.Count >= 20
	})
	s := c.reps[0].Latency()
	if s.Self != 1 || s.Peers[0].Peer != 2 || s.Peers[1].Peer != 3 {
		t.Fatalf("snapshot %+v", s)
	}
	for _, p := range s.Peers {
		if p.Total.Max <= 0 || p.Total.Max > time.Second || p.Window.Count == 0 {
			t.Fatalf("peer %d: %+v", p.Peer, p.Total)
		}
	}
	if s.Quorum.Total.P50 > s.All.Total.P50 {
		t.Fatalf("a majority cannot take longer than everyone: quorum %v all %v", s.Quorum.Total.P50, s.All.Total.P50)
	}

	// Rounds sent before every peer was listening expire (lost) after an
	// election timeout (1s here); only losses after that count below.
	time.Sleep(1200 * time.Millisecond)
	s = c.reps[0].Latency()
	c.stop(2)
	quorumBefore, quorumLost := s.Quorum.Total.Count, s.Quorum.Lost
	waitFor("lost probes to the stopped peer", func() bool {
		s := c.reps[0].Latency()
		return s.Peers[1].Lost >= 5 && s.All.Lost >= 5 && s.Quorum.Total.Count >= quorumBefore+20
	})
	if s := c.reps[0].Latency(); s.Quorum.Lost != quorumLost {
		t.Fatalf("quorum rounds lost with a majority up: %+v", s.Quorum)
	}
}

func TestAdaptiveTickRule(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct{ floor, ceil, cur, p50, want time.Duration }{
		{100 * ms, time.Second, 100 * ms, 300 * time.Microsecond, 100 * ms}, // LAN: the configured tick
		{100 * ms, time.Second, 100 * ms, 150 * ms, 200 * ms},               // 150 ms WAN: 2× is 300, but at most double per step
		{100 * ms, time.Second, 200 * ms, 150 * ms, 300 * ms},               // the next step gets there
		{100 * ms, time.Second, 800 * ms, 2 * time.Second, time.Second},     // capped
		{100 * ms, time.Second, time.Second, 10 * ms, 100 * ms},             // shrinks at once when the network is fast again
	} {
		if got := AdaptiveTick(c.floor, c.ceil, c.cur, c.p50); got != c.want {
			t.Errorf("AdaptiveTick(%v, %v, %v, %v) = %v, want %v", c.floor, c.ceil, c.cur, c.p50, got, c.want)
		}
	}
}

// TestHeartbeatBeyondLogRefused: a heartbeat whose commit index lies beyond
// the receiver's log (a confused peer, or a member that lost its disk) made
// raft panic and took the server down (found by FuzzPeerFrames). The
// message is refused and the member keeps serving.
func TestHeartbeatBeyondLogRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	c.put(lead, "a", "1")
	f := (lead + 1) % 3
	term := c.reps[f].Status().Term
	typ := pb.MsgHeartbeat
	frame := frameBytes(kindRaft, uint64(lead+1), marshal(t, &pb.Message{Type: &typ, To: new(uint64(f + 1)),
		From: new(uint64(lead + 1)), Term: new(term), Commit: new(uint64(1 << 40))}))
	conn := peerConnect(t, c.peers[f].Addr, uint64(lead+1), ClusterID(""), nil)
	defer conn.Close()
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	c.put(f, "b", "2")
	if got, _ := c.sms[f].get("b"); got != "2" {
		t.Fatalf("follower did not apply after the bad heartbeat: %q", got)
	}
}

// Held proposals are bounded by count and by bytes; one that does not fit
// is left to raft (which drops it, as before holding existed).
func TestHeldProposalsBounded(t *testing.T) {
	var h heldProposals
	now := time.Now()
	prop := func(n int) *pb.Message {
		return &pb.Message{Type: pb.MsgProp.Enum(), Entries: []*pb.Entry{{Data: make([]byte, n)}}}
	}
	for i := 0; i < heldMax; i++ {
		if !h.add(prop(1), now.Add(time.Duration(i))) {
			t.Fatalf("proposal %d of %d refused", i+1, heldMax)
		}
	}
	if h.add(prop(1), now) {
		t.Fatalf("proposal %d held; the bound is %d", heldMax+1, heldMax)
	}
	if !h.since.Equal(now) {
		t.Errorf("held since %v, want the first one's arrival %v", h.since, now)
	}
	h = heldProposals{}
	if !h.add(prop(heldMaxBytes), now) || h.add(prop(1), now) {
		t.Errorf("bytes bound: %d held bytes, then one more byte was held too", heldMaxBytes)
	}
}
