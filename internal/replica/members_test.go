package replica

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/testutil"
)

// addNode starts a new member that joins (no bootstrap) and returns its index.
func (c *cluster) addNode() int {
	c.t.Helper()
	port := testutil.FreePorts(c.t, 1)[0]
	id := uint64(len(c.peers) + 1)
	c.peers = append(c.peers, Peer{ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", port), Meta: []byte(fmt.Sprintf("meta-%d", id))})
	c.dirs = append(c.dirs, filepath.Join(c.t.TempDir(), fmt.Sprintf("n%d", id)))
	c.reps = append(c.reps, nil)
	c.sms = append(c.sms, nil)
	i := len(c.reps) - 1
	c.sms[i] = newKV()
	cfg := c.config(i)
	cfg.Join = true
	var sm StateMachine = c.sms[i]
	if c.views != nil {
		sm = viewKV{c.sms[i], c.views}
	}
	r, err := Open(cfg, sm)
	if err != nil {
		c.t.Fatalf("open %d: %v", id, err)
	}
	c.reps[i] = r
	return i
}

func (c *cluster) change(via int, changes ...MemberChange) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.reps[via].ChangeMembers(ctx, changes)
}

// waitMembers waits until every running replica's book has exactly want
// (id -> learner).
func (c *cluster) waitMembers(want map[uint64]bool) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i, r := range c.reps {
		for r != nil {
			got := map[uint64]bool{}
			for _, p := range r.Members() {
				got[p.ID] = p.Learner
			}
			if maps.Equal(got, want) {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("replica %d has members %v, want %v", i+1, got, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestMembershipLifecycle(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 40; cfg.CatchUpEntries = 5 })
	lead := c.leader()
	for i := 0; i < 100; i++ {
		c.put(lead, fmt.Sprintf("k%03d", i), fmt.Sprint(i))
	}

	// A learner joins through a follower (raft forwards the change) and
	// catches up from a snapshot, which carries the address book.
	n4 := c.addNode()
	if err := c.change((lead+1)%3, MemberChange{Type: AddLearner, Peer: c.peers[n4]}); err != nil {
		t.Fatalf("add learner: %v", err)
	}
	c.waitMembers(map[uint64]bool{1: false, 2: false, 3: false, 4: true})
	c.waitAll(func(s *kv) bool { return s.len() == 100 })
	if r := c.sms[n4].restored(); len(r) == 0 {
		t.Fatal("the new member did not catch up from a snapshot")
	}
	if st := c.reps[n4].Status(); st.Role != "learner" {
		t.Fatalf("new member's role %q, want learner", st.Role)
	}
	for _, p := range c.reps[0].Members() {
		if p.ID == 4 && (string(p.Meta) != "meta-4" || p.Addr != c.peers[n4].Addr) {
			t.Fatalf("record of member 4 = %+v", p)
		}
	}
	c.put(n4, "via-learner", "ok") // a learner forwards writes

	// Promote it; the leader validates and commits.
	if err := c.change(lead, MemberChange{Type: AddVoter, Peer: Peer{ID: 4}}); err != nil {
		t.Fatalf("promote: %v", err)
	}
	c.waitMembers(map[uint64]bool{1: false, 2: false, 3: false, 4: false})

	// Invalid changes are refused and change nothing.
	for _, tc := range []struct {
		changes []MemberChange
		want    error
	}{
		{[]MemberChange{{Type: Remove, Peer: Peer{ID: 99}}}, errs.ErrBadMembership},
		{[]MemberChange{{Type: AddVoter, Peer: Peer{ID: 9}}}, errs.ErrBadMembership}, // no address
		{[]MemberChange{{Type: Remove, Peer: Peer{ID: 1}}, {Type: Remove, Peer: Peer{ID: 2}},
			{Type: Remove, Peer: Peer{ID: 3}}, {Type: Remove, Peer: Peer{ID: 4}}}, errs.ErrNewConfigNoQuorum},
		{nil, errs.ErrBadMembership},
		{[]MemberChange{{Type: Remove, Peer: Peer{ID: 2}}, {Type: AddLearner, Peer: Peer{ID: 2}}}, errs.ErrBadMembership},
	} {
		if err := c.change(lead, tc.changes...); !errors.Is(err, tc.want) {
			t.Fatalf("%v: got %v, want %v", tc.changes, err, tc.want)
		}
	}
	c.waitMembers(map[uint64]bool{1: false, 2: false, 3: false, 4: false})

	// Replace a follower with a new voter in one joint-consensus change.
	gone := (lead + 1) % 3
	n5 := c.addNode()
	if err := c.change(lead, MemberChange{Type: Remove, Peer: Peer{ID: uint64(gone + 1)}},
		MemberChange{Type: AddVoter, Peer: c.peers[n5]}); err != nil {
		t.Fatalf("joint change: %v", err)
	}
	c.stop(gone)
	want := map[uint64]bool{1: false, 2: false, 3: false, 4: false, 5: false}
	delete(want, uint64(gone+1))
	c.waitMembers(want)
	c.put(n5, "after-joint", "ok")
	if st := c.reps[lead].Status(); st.Role != "leader" || len(st.Progress) != 4 {
		t.Fatalf("leader status after the change: %+v", st)
	}

	// A restart keeps the replicated membership whatever the file says:
	// restart everyone with the original three-member configuration.
	orig := slices.Clone(c.peers[:3])
	for i := range c.reps {
		c.stop(i)
	}
	for i := range c.reps {
		if i == gone {
			continue
		}
		c.sms[i] = newKV()
		cfg := c.config(i)
		if i < 3 {
			cfg.Peers = orig
		}
		r, err := Open(cfg, c.sms[i])
		if err != nil {
			t.Fatalf("reopen %d: %v", i+1, err)
		}
		c.reps[i] = r
	}
	c.waitMembers(want)
	lead = c.leader()
	c.put(lead, "after-restart", "ok")
	c.waitAll(func(s *kv) bool { return s.len() == 103 })
}

// A member removed while it leads steps down and the rest elect a leader.
func TestRemoveLeader(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	c.put(lead, "a", "1")
	if err := c.change(lead, MemberChange{Type: Remove, Peer: Peer{ID: uint64(lead + 1)}}); err != nil {
		t.Fatalf("remove leader: %v", err)
	}
	c.stop(lead)
	want := map[uint64]bool{1: false, 2: false, 3: false}
	delete(want, uint64(lead+1))
	c.waitMembers(want)
	nl := c.leader()
	if nl == lead {
		t.Fatal("removed member still leads")
	}
	c.put(nl, "b", "2")
}

func TestSnapshotWrapping(t *testing.T) {
	b := book{Peers: []Peer{{ID: 1, Addr: "a:1", Meta: []byte("x")}, {ID: 2, Addr: "b:2", Learner: true}}, Changed: true}
	got, data, err := unwrapSnapshot(wrapSnapshot(b, []byte("state")))
	if err != nil || string(data) != "state" || got == nil || len(got.Peers) != 2 || !got.Changed ||
		string(got.Peers[0].Meta) != "x" || !got.Peers[1].Learner {
		t.Fatalf("round trip: %+v %q %v", got, data, err)
	}
	if got, data, err := unwrapSnapshot([]byte("legacy")); err != nil || got != nil || string(data) != "legacy" {
		t.Fatalf("legacy snapshot: %+v %q %v", got, data, err)
	}
	for _, bad := range [][]byte{append(slices.Clone(snapMagic), 0xff), append(slices.Clone(snapMagic), 5, '{')} {
		if _, _, err := unwrapSnapshot(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%q: %v, want ErrCorrupt", bad, err)
		}
	}
}

// A learner added with PromoteWhenCaughtUp becomes a voter by itself once
// it has the log.
func TestAutoPromoteCaughtUpLearner(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	for i := 0; i < 50; i++ {
		c.put(lead, fmt.Sprintf("k%d", i), "v")
	}
	n4 := c.addNode()
	if err := c.change(lead, MemberChange{Type: AddLearner, Peer: c.peers[n4], PromoteWhenCaughtUp: true}); err != nil {
		t.Fatal(err)
	}
	c.waitMembers(map[uint64]bool{1: false, 2: false, 3: false, 4: false})
	c.waitAll(func(s *kv) bool { return s.len() == 50 })
	for _, p := range c.reps[n4].Members() {
		if p.AutoPromote {
			t.Fatalf("promotion request left in the book: %+v", p)
		}
	}
	// A voter in raft's eyes: it can take leadership (a learner cannot).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.reps[lead].TransferLeadership(ctx, 4); err != nil {
		t.Fatalf("transfer to the promoted member: %v", err)
	}
	c.put(n4, "led-by-4", "ok")
}

// The snapshot a member added needs is written off the raft loop to a file
// like any other (on the loop it held up every request while it was
// taken, and was stored whole, so sent whole), and streamed to the new
// member.
func TestMemberAddedFromSnapshotFile(t *testing.T) {
	c := startCluster(t, 3, &cluster{t: t, views: newViewGate(), tweak: func(cfg *Config) {
		cfg.SnapshotEntries, cfg.CatchUpEntries = 20, 5
		cfg.SnapshotStreams = func() bool { return true }
	}})
	close(c.views.open)
	lead := c.leader()
	for i := 0; i < 50; i++ {
		c.put(lead, fmt.Sprintf("k%d", i), "v")
	}
	waitFor(t, func() bool { return c.reps[lead].Status().FirstIndex > 20 }) // compacted: a new member needs a snapshot
	n4 := c.addNode()
	if err := c.change(lead, MemberChange{Type: AddLearner, Peer: c.peers[n4]}); err != nil {
		t.Fatal(err)
	}
	c.waitAll(func(s *kv) bool { return s.len() == 50 })
	if r := c.sms[n4].restored(); len(r) == 0 || r[0] <= 50 {
		t.Fatalf("new member restored %v, want a snapshot taken after its addition", r)
	}
	if got, _ := filepath.Glob(filepath.Join(c.dirs[n4], "snap", "snap-0-*-from-*")); len(got) != 1 {
		t.Fatalf("new member's streamed snapshot files: %v, want one", got)
	}
}
