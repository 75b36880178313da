package replica

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// watchedNet counts what one member's replica of a group sends, and can
// lose its quiesce notices to some members.
type watchedNet struct {
	Network
	sent    *atomic.Int64 // raft messages
	notices *atomic.Int64 // quiesce notices handed to the transport
	drop    func(to uint64) bool
}

func (n watchedNet) Send(m *pb.Message) {
	n.sent.Add(1)
	n.Network.Send(m)
}

func (n watchedNet) SendWake(to uint64) { n.Network.(quiesceSender).SendWake(to) }

func (n watchedNet) SendQuiesce(to, term, index uint64) {
	if n.drop != nil && n.drop(to) {
		return
	}
	n.notices.Add(1)
	n.Network.(quiesceSender).SendQuiesce(to, term, index)
}

// watchedGroup is a group whose members' networks are watched.
type watchedGroup struct {
	*group
	sent, notices []*atomic.Int64
}

func (c *cluster) newWatchedGroup(gc GroupConfig, drop func(to uint64) bool) *watchedGroup {
	w := &watchedGroup{group: &group{c: c, gc: gc, reps: make([]*Replica, len(c.reps)), sms: make([]*kv, len(c.reps))}}
	for i := range c.reps {
		sent, notices := &atomic.Int64{}, &atomic.Int64{}
		w.sent, w.notices = append(w.sent, sent), append(w.notices, notices)
		w.sms[i] = newKV()
		r, err := c.reps[i].openGroup(gc, w.sms[i], func(n Network) Network {
			return watchedNet{Network: n, sent: sent, notices: notices, drop: drop}
		})
		if err != nil {
			c.t.Fatalf("member %d: open group %d: %v", i+1, gc.Group, err)
		}
		w.reps[i] = r
	}
	return w
}

// waitQuiet waits until every running member in want has quiesced the group.
func (w *watchedGroup) waitQuiet(want ...int) {
	w.c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		quiet := true
		for _, i := range want {
			if w.running(i) && !w.reps[i].Quiesced() {
				quiet = false
			}
		}
		if quiet {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.c.t.Fatalf("group %d did not quiesce on members %v", w.gc.Group, want)
}

func (w *watchedGroup) sentTotal() int64 {
	var n int64
	for _, s := range w.sent {
		n += s.Load()
	}
	return n
}

// An idle group stops ticking on every member: its replicas send nothing
// over many ticks, while the root group keeps ticking. A write wakes it
// and commits, and it quiesces again. When the member that leads it dies
// while it is quiet, the other voters notice from the latency probes,
// tick again and elect a leader, and writes continue.
func TestIdleGroupQuiesces(t *testing.T) {
	c := newCluster(t, 3, nil) // 20 ms tick, 200 ms election timeout, probes every 200 ms
	c.leader()
	g := c.newWatchedGroup(GroupConfig{Group: 7, Voters: []uint64{1, 2, 3}}, nil)
	lead := g.leader()
	g.put(lead, "a", "1")
	g.waitQuiet(0, 1, 2)
	before := g.sentTotal()
	time.Sleep(25 * 20 * time.Millisecond) // 25 ticks
	if n := g.sentTotal() - before; n != 0 {
		t.Fatalf("a quiesced group sent %d raft messages in 25 ticks", n)
	}
	for i := range c.reps {
		if !g.reps[i].Quiesced() || !g.reps[i].Status().Quiesced {
			t.Fatalf("member %d woke with nothing to do", i+1)
		}
		if c.reps[i].Quiesced() {
			t.Fatalf("member %d: the root group quiesced", i+1)
		}
	}
	if g.notices[lead].Load() == 0 {
		t.Fatal("the leader quiesced without telling the members")
	}

	follower := (lead + 1) % 3
	g.put(follower, "b", "2") // through a quiet follower: wakes it and the leader
	g.waitQuiet(0, 1, 2)

	// A change of the root's membership wakes every group on the member
	// (here without a change): the leader heartbeats again, then goes quiet.
	before = g.sentTotal()
	c.reps[lead].wakeGroups()
	for deadline := time.Now().Add(5 * time.Second); g.sentTotal() == before; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the woken leader sent nothing")
		}
	}
	g.waitQuiet(0, 1, 2)

	// The quiet group's leader member dies: the others see its probes go
	// unanswered, tick, and elect a leader among themselves.
	died := time.Now()
	c.stop(lead)
	newLead := g.leader()
	took := time.Since(died)
	t.Logf("new leader %d %v after the quiet leader's member died", newLead+1, took)
	if newLead == lead {
		t.Fatalf("the dead member still leads")
	}
	// Detection: an election timeout of silence (at least three probe
	// intervals: 600 ms), checked every half election timeout; then raft's
	// one to two election timeouts.
	if took > 3*time.Second {
		t.Fatalf("a new leader took %v", took)
	}
	g.put(newLead, "c", "3")
	g.waitQuiet(newLead, (newLead+1)%3, (newLead+2)%3)
}

// A member that loses its quiesce notices keeps ticking; the group keeps
// working, and no election follows (its pre-votes wake the leader, whose
// heartbeats resume, and the others refuse it while they follow a leader).
func TestLostQuiesceNotice(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.leader()
	g := c.newWatchedGroup(GroupConfig{Group: 8, Voters: []uint64{1, 2, 3}}, func(to uint64) bool { return to == 3 })
	g.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.reps[0].TransferLeadership(ctx, 1); err != nil {
		t.Fatal(err)
	}
	g.put(0, "a", "1")
	term := g.reps[0].Term()
	var leaderQuiet bool
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if g.reps[2].Quiesced() {
			t.Fatal("member 3 quiesced without a notice")
		}
		leaderQuiet = leaderQuiet || g.reps[0].Quiesced()
	}
	if !leaderQuiet || g.notices[0].Load() == 0 {
		t.Fatalf("the leader never quiesced (quiet %v, notices %d)", leaderQuiet, g.notices[0].Load())
	}
	for i := 0; i < 5; i++ {
		g.put(2, fmt.Sprintf("b%d", i), "via the member that keeps ticking")
	}
	if got := g.reps[0].Term(); got != term || g.reps[0].Leader() != 1 {
		t.Fatalf("term %d -> %d, leader %d: a lost notice led to an election", term, got, g.reps[0].Leader())
	}
}

// A learner that restarts while its group is quiet asks the others to
// wake once it has known no leader for an election timeout: the leader's
// heartbeats tell it the leader and the commit index, it serves a
// linearizable read, and the group quiesces again with it.
func TestRestartedLearnerWakesQuietGroup(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.leader()
	g := c.newGroup(GroupConfig{Group: 9, Voters: []uint64{1, 2}, Learners: []uint64{3}})
	lead := g.leader()
	g.put(lead, "a", "1")
	w := &watchedGroup{group: g}
	w.waitQuiet(0, 1, 2)
	c.stop(2)
	c.start(2)
	g.open(2)
	if got := g.leader(); got != lead {
		t.Fatalf("leader %d, was %d: the restart caused an election", got+1, lead+1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := g.reps[2].ReadIndex(ctx); err != nil {
		t.Fatalf("read on the restarted learner: %v", err)
	}
	if v, _ := g.sms[2].get("a"); v != "1" {
		t.Fatalf("the restarted learner read %q", v)
	}
	w.waitQuiet(0, 1, 2)
}

// A group that opts out, and any group of a member without latency
// probes (nothing to watch its leader with), keeps ticking when idle.
func TestGroupsThatNeverQuiesce(t *testing.T) {
	for name, tc := range map[string]struct {
		tweak func(*Config)
		never bool
	}{
		"NeverQuiesce": {nil, true},
		"no probes":    {func(cfg *Config) { cfg.ProbeInterval = -1 }, false},
	} {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 3, tc.tweak)
			c.leader()
			g := c.newWatchedGroup(GroupConfig{Group: 5, Voters: []uint64{1, 2, 3}, NeverQuiesce: tc.never}, nil)
			g.put(g.leader(), "a", "1")
			for deadline := time.Now().Add(30 * 20 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				for i := range g.reps {
					if g.reps[i].Quiesced() {
						t.Fatalf("member %d quiesced", i+1)
					}
				}
			}
			before := g.sentTotal()
			time.Sleep(5 * 20 * time.Millisecond)
			if g.sentTotal() == before {
				t.Fatal("no heartbeats from a group that keeps ticking")
			}
		})
	}
}
