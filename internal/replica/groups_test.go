package replica

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/meridian-coord/meridian/internal/errs"
)

// group is one raft group other than the root, on every member of c.
type group struct {
	c    *cluster
	gc   GroupConfig
	reps []*Replica
	sms  []*kv
}

func (c *cluster) newGroup(gc GroupConfig) *group {
	g := &group{c: c, gc: gc, reps: make([]*Replica, len(c.reps)), sms: make([]*kv, len(c.reps))}
	for i := range c.reps {
		g.open(i)
	}
	return g
}

func (g *group) open(i int) {
	g.c.t.Helper()
	g.sms[i] = newKV()
	var sm StateMachine = g.sms[i]
	if g.c.views != nil { // snapshots to files, off the loop, as the root's
		sm = viewKV{g.sms[i], g.c.views}
	}
	r, err := g.c.reps[i].OpenGroup(g.gc, sm)
	if err != nil {
		g.c.t.Fatalf("member %d: open group %d: %v", i+1, g.gc.Group, err)
	}
	g.reps[i] = r
}

// running reports whether member i runs (the group runs wherever its
// member's root does).
func (g *group) running(i int) bool { return g.c.reps[i] != nil && g.reps[i] != nil }

// leader waits until the group's members agree on a leader and returns it.
func (g *group) leader() int {
	g.c.t.Helper()
	return agreedLeader(g.c.t, g.reps, g.running)
}

// put proposes through member via until accepted and waits until every
// running member of the group applied it.
func (g *group) put(via int, k, v string) {
	g.c.t.Helper()
	proposeKV(g.c.t, g.reps[via], k, v)
	g.waitAll(func(s *kv) bool { got, ok := s.get(k); return ok && got == v })
}

func (g *group) waitAll(cond func(*kv) bool) {
	g.c.t.Helper()
	converge(g.c.t, g.sms, g.running, cond)
}

// prefixed reports whether every key in s starts with p.
func prefixed(s *kv, p string) bool {
	for k := range s.state() {
		if !strings.HasPrefix(k, p) {
			return false
		}
	}
	return true
}

// Two groups with different voters run on the three members of a root
// group, over the root's store and connections: each commits and applies
// only its own entries, learners do not vote, a whole-cluster restart
// brings every group back from the one store, and a learner that was down
// catches up from a group snapshot sent over the shared connections.
func TestGroupsShareStoreAndConnections(t *testing.T) {
	c := startCluster(t, 3, &cluster{t: t, views: newViewGate(), tweak: func(cfg *Config) {
		cfg.SnapshotEntries, cfg.CatchUpEntries = 30, 5
		cfg.SnapshotStreams = func() bool { return true }
	}})
	close(c.views.open)
	root := c.leader()
	c.put(root, "root", "r0")
	conns := func(i int) int {
		tr := c.reps[i].tr
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(tr.conns)
	}
	before := []int{conns(0), conns(1), conns(2)}

	a := c.newGroup(GroupConfig{Group: 10, Voters: []uint64{1, 2}, Learners: []uint64{3}})
	b := c.newGroup(GroupConfig{Group: 20, Voters: []uint64{2, 3}, Learners: []uint64{1}})
	la, lb := a.leader(), b.leader()
	if la == 2 {
		t.Fatalf("group 10's learner (member 3) leads it")
	}
	if lb == 0 {
		t.Fatalf("group 20's learner (member 1) leads it")
	}
	if role := a.reps[2].Status().Role; role != "learner" {
		t.Fatalf("member 3 in group 10: role %q, want learner", role)
	}
	for i := 0; i < 10; i++ {
		a.put(i%3, fmt.Sprintf("a%d", i), fmt.Sprint(i)) // through every member, learners too
		b.put(i%3, fmt.Sprintf("b%d", i), fmt.Sprint(i))
	}
	for i := range c.reps {
		if !prefixed(a.sms[i], "a") || !prefixed(b.sms[i], "b") || !prefixed(c.sms[i], "root") {
			t.Fatalf("member %d: a group applied another group's entries: %v %v %v", i+1, a.sms[i].state(), b.sms[i].state(), c.sms[i].state())
		}
	}
	for i, n := range before {
		if got := conns(i); got > n {
			t.Fatalf("member %d: %d peer connections with two more groups, %d without", i+1, got, n)
		}
	}

	// Every member down, then up again from its one store.
	want := a.sms[la].state()
	for i := range c.reps {
		c.stop(i)
	}
	for i := range c.reps {
		c.start(i)
		a.open(i)
		b.open(i)
	}
	a.waitAll(func(s *kv) bool { return maps.Equal(s.state(), want) })
	b.waitAll(func(s *kv) bool { return s.len() == 10 })
	c.waitAll(func(s *kv) bool { v, _ := s.get("root"); return v == "r0" })
	a.put(a.leader(), "a-after", "restart")
	b.put(b.leader(), "b-after", "restart")

	// Member 3 (group 10's learner, group 20's voter) is down while group
	// 10 moves on past a snapshot and a compaction; group 20 cannot commit
	// meanwhile (one of its two voters is down).
	c.stop(2)
	la = a.leader()
	for i := 0; i < 80; i++ {
		a.put(la, fmt.Sprintf("a-late%02d", i), fmt.Sprint(i))
	}
	if st := a.reps[la].Status(); st.SnapshotIndex < 60 || st.FirstIndex < 50 {
		t.Fatalf("group 10's leader did not snapshot and compact: %+v", st)
	}
	c.start(2)
	a.open(2)
	b.open(2)
	a.waitAll(func(s *kv) bool { return maps.Equal(s.state(), a.sms[la].state()) })
	if r := a.sms[2].restored(); len(r) == 0 || r[len(r)-1] < 60 {
		t.Fatalf("member 3 did not catch up from a group snapshot: restores at %v", r)
	}
	if got, _ := filepath.Glob(filepath.Join(c.dirs[2], "snap", "snap-a-*-from-*")); len(got) != 1 {
		all, _ := filepath.Glob(filepath.Join(c.dirs[2], "snap", "*"))
		t.Fatalf("member 3's files of group 10 (0xa): %v, want one streamed from the leader (all: %v)", got, all)
	}
	b.put(b.leader(), "b-after", "member 3 back")
}

func TestOpenGroupRefusals(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.leader()
	cases := []struct {
		name string
		gc   GroupConfig
	}{
		{"root group id", GroupConfig{Voters: []uint64{1}}},
		{"no voter", GroupConfig{Group: 5, Learners: []uint64{1}}},
		{"voter and learner", GroupConfig{Group: 5, Voters: []uint64{1}, Learners: []uint64{1}}},
	}
	for _, tc := range cases {
		if _, err := c.reps[0].OpenGroup(tc.gc, newKV()); err == nil {
			t.Errorf("%s: opened", tc.name)
		}
	}
	// A first configuration naming a member the cluster no longer has
	// (removed since the group was created) opens: the id stays in the
	// configuration, without an address, until the group's leader removes
	// it from the group.
	g7, err := c.reps[0].OpenGroup(GroupConfig{Group: 7, Voters: []uint64{1, 9}}, newKV())
	if err != nil {
		t.Fatalf("a first configuration naming a removed member: %v", err)
	}
	for _, p := range g7.Members() {
		if p.ID == 9 {
			t.Fatalf("the removed member has an address: %+v", p)
		}
	}
	g7.Close()
	g, err := c.reps[0].OpenGroup(GroupConfig{Group: 5, Voters: []uint64{1}}, newKV())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.reps[0].OpenGroup(GroupConfig{Group: 5, Voters: []uint64{1}}, newKV()); err == nil {
		t.Fatal("the same group opened twice")
	}
	if _, err := g.OpenGroup(GroupConfig{Group: 6, Voters: []uint64{1}}, newKV()); err == nil {
		t.Fatal("a group opened on a group")
	}
	if err := c.reps[0].DropGroup(5); err == nil {
		t.Fatal("a running group dropped")
	}
	if err := g.SendToLeader([]byte("x")); !errors.Is(err, errs.ErrUnimplemented) {
		t.Fatalf("side channel of a group: %v", err)
	}
}

// A group's storage lives under its prefix: dropping it leaves the root
// and other groups intact, and reopening it starts it afresh.
func TestDropGroup(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.put(c.leader(), "root", "kept")
	g1 := c.newGroup(GroupConfig{Group: 1, Voters: []uint64{1}})
	g2 := c.newGroup(GroupConfig{Group: 2, Voters: []uint64{1}})
	g1.leader()
	g2.leader()
	g1.put(0, "one", "1")
	g2.put(0, "two", "2")
	if err := g1.reps[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.reps[0].DropGroup(1); err != nil {
		t.Fatal(err)
	}
	c.stop(0)
	c.start(0)
	g1.open(0)
	g2.open(0)
	g2.waitAll(func(s *kv) bool { v, _ := s.get("two"); return v == "2" })
	c.waitAll(func(s *kv) bool { v, _ := s.get("root"); return v == "kept" })
	g1.leader()
	if n := g1.sms[0].len(); n != 0 {
		t.Fatalf("dropped group came back with %d keys", n)
	}
	if r := g1.sms[0].restored(); !slices.Equal(r, []uint64{groupStart}) {
		t.Fatalf("dropped group restored from %v, want only its first snapshot", r)
	}
}

// Group frames are checked like the root's: a frame for the root group
// under a group kind, or one too short to name a group, closes the
// connection; a well-formed message for a group this member does not run
// is dropped and the connection stays.
func TestGroupFrames(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	me, other := uint64(lead+1), uint64((lead+1)%3+1)
	typ := func(mt pb.MessageType) *pb.MessageType { return &mt }
	groupBody := func(group uint64, m *pb.Message) []byte {
		b := make([]byte, 8, 64)
		for i := 0; i < 8; i++ {
			b[i] = byte(group >> (56 - 8*i))
		}
		return append(b, marshal(t, m)...)
	}
	hb := &pb.Message{Type: typ(pb.MsgHeartbeat), To: new(me), From: new(other), Term: new(uint64(1))}
	closing := map[string][]byte{
		"group 0":                 frameBytes(kindGroupRaft, other, groupBody(0, hb)),
		"no group id":             frameBytes(kindGroupRaft, other, []byte{1, 2, 3}),
		"step-down of wrong size": frameBytes(kindGroupStepDown, other, make([]byte, 16)),
		"quiesce of wrong size":   frameBytes(kindGroupQuiesce, other, make([]byte, 16)),
		"quiesce for group 0":     frameBytes(kindGroupQuiesce, other, make([]byte, 24)),
		"wake of wrong size":      frameBytes(kindGroupWake, other, make([]byte, 16)),
		"undecodable":             frameBytes(kindGroupRaft, other, append(make([]byte, 7), 9, 0xde, 0xad)),
		"snapshot in a raft frame": frameBytes(kindGroupRaft, other, groupBody(9, &pb.Message{Type: typ(pb.MsgSnap), To: new(me), From: new(other),
			Term: new(uint64(1))})),
	}
	for name, payload := range closing {
		expectClosed(t, c.peers[lead].Addr, other, name, payload, false)
	}
	conn := peerConnect(t, c.peers[lead].Addr, other, ClusterID(""), nil)
	defer conn.Close()
	conn.Write(frameBytes(kindGroupRaft, other, groupBody(77, hb)))
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("unexpected reply")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("a frame for a group not run here closed the connection: %v", err)
	}
	c.put(lead, "still", "works")
}

// memStorage is a Storage in memory, for a Node's bootstrap.
type memStorage struct {
	hs   *pb.HardState
	snap *pb.Snapshot
	ents []*pb.Entry
}

func (m *memStorage) Load() (*pb.HardState, *pb.Snapshot, []*pb.Entry, error) {
	hs, snap := m.hs, m.snap
	if hs == nil {
		hs = &pb.HardState{}
	}
	if snap == nil {
		snap = &pb.Snapshot{}
	}
	return hs, snap, m.ents, nil
}

func (m *memStorage) Save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot, sync bool) error {
	if snap != nil {
		m.snap, m.ents = snap, nil
	}
	m.ents = append(m.ents, ents...)
	if hs != nil {
		m.hs = hs
	}
	return nil
}

func (m *memStorage) SaveSnapshot(snap *pb.Snapshot, compactTo uint64) error {
	m.snap = snap
	return nil
}

func (m *memStorage) Sync() error { return nil }

type nowhere struct{}

func (nowhere) Send(*pb.Message)                    {}
func (nowhere) SendStepDown(uint64, uint64, uint64) {}

// NewGroupNode writes a new group's first snapshot as OpenGroup does (its
// voters and learners, at index 1), restores from it when the store has
// it, and refuses the root group's id.
func TestNewGroupNode(t *testing.T) {
	peers := []Peer{{ID: 1, Addr: "a"}, {ID: 2, Addr: "b"}, {ID: 3, Addr: "c"}}
	cfg := Config{ID: 3, Peers: peers}
	gc := GroupConfig{Group: 7, Voters: []uint64{2, 1}, Learners: []uint64{3}}
	store := &memStorage{}
	n, err := NewGroupNode(cfg, gc, newKV(), store, nowhere{}, NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	meta := store.snap.GetMetadata()
	if meta.GetIndex() != groupStart || !slices.Equal(meta.GetConfState().GetVoters(), []uint64{1, 2}) ||
		!slices.Equal(meta.GetConfState().GetLearners(), []uint64{3}) {
		t.Fatalf("first snapshot %v", meta)
	}
	if st := n.Status(); st.Applied != groupStart || len(st.Members) != 3 || !st.Members[2].Learner {
		t.Fatalf("status %+v", st)
	}
	again, err := NewGroupNode(cfg, GroupConfig{Group: 7, Voters: []uint64{3}}, newKV(), store, nowhere{}, NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := again.Status(); !st.Members[2].Learner { // the stored configuration, not gc's
		t.Fatalf("restarted status %+v", st)
	}
	if _, err := NewGroupNode(cfg, GroupConfig{Voters: []uint64{1}}, newKV(), &memStorage{}, nowhere{}, NodeOptions{}); err == nil {
		t.Fatal("group 0 accepted")
	}
}
