package replica

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// kv is a small deterministic state machine: entries are "key=value".
type kv struct {
	mu       sync.Mutex
	m        map[string]string
	order    []uint64
	restores []uint64
}

func newKV() *kv { return &kv{m: map[string]string{}} }

func (s *kv) Apply(index, term uint64, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, v, _ := strings.Cut(string(data), "=")
	s.m[k] = v
	s.order = append(s.order, index)
}

func (s *kv) Snapshot() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
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

func (s *kv) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

type cluster struct {
	t     *testing.T
	peers []Peer
	dirs  []string
	reps  []*Replica
	sms   []*kv
	tweak func(*Config)
}

func newCluster(t *testing.T, n int, tweak func(*Config)) *cluster {
	t.Helper()
	var ls []net.Listener
	c := &cluster{t: t, tweak: tweak}
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		c.peers = append(c.peers, Peer{ID: uint64(i + 1), Addr: l.Addr().String()})
		c.dirs = append(c.dirs, filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i+1)))
	}
	for _, l := range ls {
		l.Close()
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
	r, err := Open(c.config(i), c.sms[i])
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

func (c *cluster) leader() int {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var lead uint64
		ok := true
		for _, r := range c.reps {
			if r == nil {
				continue
			}
			l := r.Leader()
			if l == 0 || (lead != 0 && l != lead) {
				ok = false
				break
			}
			lead = l
		}
		if ok && lead != 0 && c.reps[lead-1] != nil {
			return int(lead - 1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatal("no leader")
	return -1
}

// put proposes until accepted and waits until every running replica applied it.
func (c *cluster) put(via int, k, v string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		err := c.reps[via].Propose(ctx, []byte(k+"="+v))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			c.t.Fatalf("propose: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.waitAll(func(s *kv) bool { got, ok := s.get(k); return ok && got == v })
}

func (c *cluster) waitAll(cond func(*kv) bool) {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for i := range c.reps {
		for c.reps[i] != nil && !cond(c.sms[i]) {
			if time.Now().After(deadline) {
				c.t.Fatalf("replica %d did not converge", i+1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestReplicateFromLeaderAndFollower(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	c.put(lead, "a", "1")
	c.put((lead+1)%3, "b", "2") // followers forward proposals
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	follower := (lead + 2) % 3
	idx, err := c.reps[follower].ReadIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if idx < c.reps[lead].AppliedIndex() || c.reps[follower].AppliedIndex() < idx {
		t.Fatalf("read index %d, leader applied %d, follower applied %d", idx, c.reps[lead].AppliedIndex(), c.reps[follower].AppliedIndex())
	}
	for i, s := range c.sms {
		if !slices.Equal(s.order, c.sms[0].order) {
			t.Fatalf("replica %d applied %v, replica 1 %v", i+1, s.order, c.sms[0].order)
		}
	}
}

func TestReadIndexBatching(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	c.put(lead, "x", "1")
	before := c.reps[lead].readRounds.Load()
	var wg sync.WaitGroup
	const n = 200
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := c.reps[lead].ReadIndex(ctx)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if rounds := c.reps[lead].readRounds.Load() - before; rounds >= n/2 {
		t.Fatalf("%d reads took %d ReadIndex rounds; want them batched", n, rounds)
	}
}

func TestLeaderCrashAndRejoin(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	for i := 0; i < 20; i++ {
		c.put(lead, fmt.Sprintf("k%d", i), "v")
	}
	c.stop(lead)
	nl := c.leader()
	if nl == lead {
		t.Fatal("stopped replica still leads")
	}
	for i := 20; i < 40; i++ {
		c.put(nl, fmt.Sprintf("k%d", i), "v")
	}
	c.start(lead)
	c.waitAll(func(s *kv) bool { return s.len() == 40 })
}

func TestFollowerCatchesUpFromSnapshot(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 50; cfg.CatchUpEntries = 10 })
	lead := c.leader()
	f := (lead + 1) % 3
	c.stop(f)
	for i := 0; i < 300; i++ {
		c.put(lead, fmt.Sprintf("k%03d", i), fmt.Sprint(i))
	}
	c.start(f)
	c.waitAll(func(s *kv) bool { return s.len() == 300 })
	if len(c.sms[f].restores) == 0 || c.sms[f].restores[len(c.sms[f].restores)-1] == 0 {
		t.Fatalf("follower did not restore from a snapshot: %v", c.sms[f].restores)
	}
	if v, _ := c.sms[f].get("k299"); v != "299" {
		t.Fatalf("k299 = %q", v)
	}
}

func TestWholeClusterRestart(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 25 })
	lead := c.leader()
	for i := 0; i < 60; i++ {
		c.put(lead, fmt.Sprintf("k%d", i), fmt.Sprint(i))
	}
	for i := range c.reps {
		c.stop(i)
	}
	for i := range c.reps {
		c.start(i)
	}
	c.waitAll(func(s *kv) bool { return s.len() == 60 })
	lead = c.leader()
	c.put(lead, "after", "restart")
}

func TestTransferLeadership(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	target := uint64((lead+1)%3 + 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Ask a follower: it forwards the request to the leader.
	if err := c.reps[(lead+2)%3].TransferLeadership(ctx, target); err != nil {
		t.Fatal(err)
	}
	if got := c.leader(); uint64(got+1) != target {
		t.Fatalf("leader %d, want %d", got+1, target)
	}
}

func TestCorruptStorageFailsOpen(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.leader()
	c.put(0, "a", "1")
	c.stop(0)
	db, err := pebble.Open(c.dirs[0], &pebble.Options{Logger: pebbleLogger{logger()}})
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte of the hard state.
	v, closer, err := db.Get(keyHardState)
	if err != nil {
		t.Fatal(err)
	}
	bad := slices.Clone(v)
	closer.Close()
	bad[len(bad)-1] ^= 0xff
	if err := db.Set(keyHardState, bad, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(c.config(0), newKV()); err == nil {
		t.Fatal("Open accepted a corrupt hard state")
	}
}

func TestLogGapFailsOpen(t *testing.T) {
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
	if err := db.Delete(entryKey(3), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(c.config(0), newKV()); err == nil {
		t.Fatal("Open accepted a log with a hole")
	}
}

func TestGarbageFramesCloseOnlyThatConnection(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	for _, payload := range [][]byte{
		{0xff, 0xff, 0xff, 0xff, 1},                                      // absurd length
		{0, 0, 0, 20, 1, 0, 0, 0, 0, 0, 0, 0, 2, 1, 2, 3},                // truncated body
		{0, 0, 0, 13, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0xde, 0xad, 0xbe, 0xef}, // undecodable message
		{0, 0, 0, 9, 7, 0, 0, 0, 0, 0, 0, 0, 2},                          // unknown kind
	} {
		conn, err := net.Dial("tcp", c.peers[lead].Addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(payload)
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 1)
		if _, err := conn.Read(buf); err == nil {
			t.Fatalf("payload %x: connection not closed", payload)
		}
		conn.Close()
	}
	c.put(lead, "still", "works")
}

func TestProposalLimits(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.MaxProposalBytes = 100 })
	c.leader()
	err := c.reps[0].Propose(context.Background(), make([]byte, 101))
	if err == nil {
		t.Fatal("oversized proposal accepted")
	}
	c.stop(0)
	if err := func() error {
		r, err := Open(c.config(0), newKV())
		if err != nil {
			return err
		}
		r.Close()
		return r.Propose(context.Background(), []byte("a=b"))
	}(); err == nil {
		t.Fatal("propose after close succeeded")
	}
}

var _ = binary.BigEndian
