package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/fsm"
	zk "github.com/meridian-coord/meridian/internal/zkproto"
)

// Faults of a keyspace's regions, with real members (sockets, Pebble)
// stopped as a whole: what a keyspace survives and what its clients see
// when it does not. docs/reliability.md, "Keyspaces: what survives what".

// faultTickMs is the raft tick of these clusters: an election timeout of
// 1 s, so that five or six members in one process under the race detector
// on two shared cores keep their leaders.
const faultTickMs = 100

// createKeyspace is tc.keyspace retried while the root's leadership moves
// (a loaded machine before any fault): ErrKeyspaceExists after a retry is
// the earlier try applied.
func createKeyspace(tc *testCluster, i int, prefix, home string, survival fsm.Survival) fsm.Keyspace {
	tc.t.Helper()
	for deadline, tries := time.Now().Add(60*time.Second), 0; ; tries++ {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ks, _, err := tc.servers[i].createKeyspace(c, prefix, home, survival)
		cancel()
		if err == nil || (tries > 0 && errors.Is(err, errs.ErrKeyspaceExists)) {
			if err != nil {
				s := tc.servers[i]
				s.mu.RLock()
				ks, _ = s.fsm.KeyspaceFor(prefix)
				s.mu.RUnlock()
			}
			tc.waitGroupOpen(ks.Group)
			return ks
		}
		if time.Now().After(deadline) {
			tc.t.Fatalf("create keyspace %s: %v", prefix, err)
		}
	}
}

// mustCreate creates path, retrying an unknown outcome (a loaded machine
// before any fault); NodeExists after a retry is the earlier try applied.
func mustCreate(t *testing.T, c *client.Client, path string, data []byte) {
	t.Helper()
	for deadline, tries := time.Now().Add(30*time.Second), 0; ; tries++ {
		_, _, err := c.Create(ctx(t), path, data, client.CreateOptions{})
		if err == nil || (tries > 0 && errors.Is(err, errs.ErrNodeExists)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("create %s: %v", path, err)
		}
	}
}

// zoneCluster is six members: 1-3 in region eu (zones a, b, c), the root
// group's learners; 4-6 in region us (zones a, b, c), its voters. A
// zone-survival keyspace homed in eu has voters 1-3 and learners 4-6, and
// the root keeps its quorum when eu is lost, as it must for sessions.
func zoneCluster(t *testing.T) *testCluster {
	tc := newTestCluster(t, 6, func(c *Config) {
		c.TickMs = faultTickMs
		for i := range c.Members {
			c.Members[i].Region, c.Members[i].Zone = "eu", string(rune('a'+i))
			if i >= 3 {
				c.Members[i].Region, c.Members[i].Zone = "us", string(rune('a'+i-3))
			} else {
				c.Members[i].Role = "learner"
			}
		}
	})
	tc.rootLeader()
	return tc
}

// rootLeader is tc.leader with more time: five or six members electing
// at 1 s election timeouts under the race detector on a loaded 2-core
// machine took up to 15 s to agree.
func (tc *testCluster) rootLeader() {
	tc.t.Helper()
	tc.agreedLeader(60*time.Second, "no root leader the members agree on", func(s *Server) uint64 { return s.Replica().Status().Leader })
}

// keyspaceLeader waits until the running members agree on a leader of
// group and returns its index.
func (tc *testCluster) keyspaceLeader(group uint64) int {
	tc.t.Helper()
	return tc.agreedLeader(30*time.Second, fmt.Sprintf("group %d: no leader the running members agree on", group),
		func(s *Server) uint64 { return s.keyspaceGroups.get(group).rep.Leader() })
}

// writeWithin retries write until it succeeds or d passes and returns
// how long it took. Unless noQuorumOK, an error saying the keyspace has no
// quorum fails the test at once: that is not what losing one member may
// bring.
func writeWithin(t *testing.T, what string, d time.Duration, noQuorumOK bool, write func(context.Context) error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := write(c)
		cancel()
		if err == nil {
			return time.Since(start)
		}
		if !noQuorumOK && (errors.Is(err, errs.ErrNoQuorum) || errors.Is(err, errs.ErrNoQuorumInFlight) || strings.Contains(err.Error(), "-119")) {
			t.Fatalf("%s: %v", what, err)
		}
		if time.Since(start) > d {
			t.Fatalf("%s: not acknowledged within %v: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A zone-survival keyspace keeps writing when one member of its home
// region is lost, its leader included: through a member of another region
// (a learner, which forwards) and through a surviving home member, on both
// ports.
func TestKeyspaceZoneSurvivesHomeMemberLoss(t *testing.T) {
	tc := zoneCluster(t)
	ks := createKeyspace(tc, 3, "/eu", "eu", fsm.SurvivalZone)
	if !slices.Equal(ks.Voters, []uint64{1, 2, 3}) || !slices.Equal(ks.Learners, []uint64{4, 5, 6}) {
		t.Fatalf("placement: voters %v learners %v, want 1-3 (eu) and 4-6", ks.Voters, ks.Learners)
	}
	lead := tc.keyspaceLeader(ks.Group)
	home := (lead + 1) % 3 // a home member that survives
	us := tc.client(tc.endpoints()[4])
	mustCreate(t, us, "/eu/data", []byte("0"))
	tc.stop(lead)
	took := writeWithin(t, "write through member 5 (us)", 20*time.Second, false, func(c context.Context) error {
		_, err := us.Set(c, "/eu/data", []byte("1"), -1)
		return err
	})
	t.Logf("keyspace leader %d stopped; first write through us acknowledged after %v", lead+1, took)
	zc, _ := zkConnect(t, tc.zkAddrs()[home:home+1])
	took = writeWithin(t, fmt.Sprintf("ZooKeeper write through member %d (eu)", home+1), 20*time.Second, false, func(context.Context) error {
		_, err := zc.Create("/eu/zk", []byte("z"), 0, gozk.WorldACL(gozk.PermAll))
		return err
	})
	t.Logf("ZooKeeper write through member %d acknowledged after %v", home+1, took)
	next := tc.keyspaceLeader(ks.Group)
	if next == lead || next >= 3 {
		t.Fatalf("the keyspace's new leader is member %d, want another eu voter", next+1)
	}
	data, _, err := us.Get(ctx(t), "/eu/data")
	if err != nil || string(data) != "1" {
		t.Fatalf("read back: %q %v", data, err)
	}
}

// Losing the whole home region stops a zone-survival keyspace's writes
// with a declared error, soon and not after the request timeout, on both
// ports: the gRPC error names the keyspace and the unreachable voters, a
// ZooKeeper client gets NOTREADONLY (ZooKeeper's answer to a write on a
// server cut off from its quorum). Nothing else stops: the keyspace's
// data stays readable from the other region's members (sequential reads,
// both ports) for sessions that have seen nothing newer than those
// copies, a read that would need the keyspace's leader fails as soon, the
// root's writes go on, and once the region is back the keyspace writes
// again.
func TestKeyspaceZoneHomeRegionLoss(t *testing.T) {
	tc := zoneCluster(t)
	ks := createKeyspace(tc, 3, "/eu", "eu", fsm.SurvivalZone)
	us := tc.client(tc.endpoints()[3])
	zc, _ := zkConnect(t, tc.zkAddrs()[5:6])
	mustCreate(t, us, "/eu/data", []byte("kept"))
	// Every us member has applied it before the region goes, and the
	// ZooKeeper session has read it.
	for _, s := range tc.servers[3:] {
		g := s.keyspaceGroups.get(ks.Group)
		deadline := time.Now().Add(10 * time.Second)
		for {
			g.fsm.RLock()
			_, _, err := g.fsm.Tree().Get("/eu/data")
			g.fsm.RUnlock()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("member %d never applied /eu/data: %v", s.cfg.ID, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if data, _, err := zc.Get("/eu/data"); err != nil || string(data) != "kept" {
		t.Fatalf("ZooKeeper read before the loss: %q %v", data, err)
	}
	for i := 0; i < 3; i++ {
		tc.stop(i)
	}
	lost := time.Now()

	// Native port: within a few election timeouts every write is refused
	// as not applied, with the keyspace and its voters named.
	var refusal error
	deadline := lost.Add(10 * time.Second)
	for refusal == nil {
		_, err := us.Set(ctx(t), "/eu/data", []byte("lost"), -1)
		switch {
		case errors.Is(err, errs.ErrNoQuorum):
			refusal = err
		case err == nil:
			t.Fatal("a write to the keyspace was acknowledged with its home region down")
		case time.Now().After(deadline):
			t.Fatalf("no declared refusal %v after the home region was lost: %v", time.Since(lost), err)
		case !errors.Is(err, errs.ErrNoQuorumInFlight) && !errors.Is(err, errs.ErrTimeout):
			t.Fatalf("write in flight when the region was lost: %v, want an unknown outcome", err)
		default:
			t.Logf("at %v: %v", time.Since(lost).Round(time.Millisecond), err)
		}
	}
	t.Logf("refused %v after the region was lost: %v", time.Since(lost).Round(time.Millisecond), refusal)
	for _, want := range []string{"keyspace /eu", "home region eu", "1 (eu/a)", "2 (eu/b)", "3 (eu/c)"} {
		if !strings.Contains(refusal.Error(), want) {
			t.Errorf("refusal %q does not say %q", refusal, want)
		}
	}
	start := time.Now()
	if _, _, err := us.Create(ctx(t), "/eu/new", nil, client.CreateOptions{}); !errors.Is(err, errs.ErrNoQuorum) {
		t.Fatalf("create in the keyspace: %v, want ErrNoQuorum", err)
	}
	if took := time.Since(start); took > tc.cfgs[3].requestTimeout()/2 {
		t.Fatalf("the refusal took %v (request timeout %v)", took, tc.cfgs[3].requestTimeout())
	}
	// Each member judges for itself: wait for the others' judgement (a
	// write in flight at that moment is an unknown outcome).
	for _, s := range tc.servers[4:] {
		for deadline := time.Now().Add(10 * time.Second); s.keyspaceGroups.get(ks.Group).noQuorum() == nil; {
			if time.Now().After(deadline) {
				t.Fatalf("member %d never judged the keyspace without a quorum", s.cfg.ID)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// ZooKeeper port: NOTREADONLY in the reply (go-zookeeper knows no
	// such code: "unknown error: -119"), the session and its reads kept.
	if _, err := zc.Set("/eu/data", []byte("zk"), -1); err == nil || !strings.Contains(err.Error(), "-119") {
		t.Fatalf("ZooKeeper setData in the keyspace: %v, want ZNOTREADONLY (-119)", err)
	}
	if data, _, err := zc.Get("/eu/data"); err != nil || string(data) != "kept" {
		t.Fatalf("ZooKeeper read after the refusal, same session: %q %v", data, err)
	}
	c, resp := zkDial(t, tc.zkAddrs()[4], false)
	if resp == nil {
		t.Fatal("no ZooKeeper session on member 5")
	}
	if h, _ := zkCall(t, c, 1, zk.OpCreate, &zk.CreateRequest{Path: "/eu/zk", ACL: []zk.ACL{{Perms: 31, ID: zk.Id{Scheme: "world", ID: "anyone"}}}}); h.Err != -119 {
		t.Fatalf("ZooKeeper create in the keyspace: err %d, want ZNOTREADONLY (-119)", h.Err)
	}

	// Native sequential read by the session that wrote the data.
	if data, _, err := us.Get(ctx(t), "/eu/data", client.WithConsistency(client.Sequential)); err != nil || string(data) != "kept" {
		t.Fatalf("sequential read of the keyspace: %q %v", data, err)
	}
	// A session created after the loss has a newer zxid (its own
	// creation's) but has seen nothing of the keyspace: the copy answers
	// it (per-group views, docs/architecture.md "Ordering").
	fresh := tc.client(tc.endpoints()[5])
	if data, _, err := fresh.Get(ctx(t), "/eu/data", client.WithConsistency(client.Sequential)); err != nil || string(data) != "kept" {
		t.Fatalf("a new session's sequential read: %q %v", data, err)
	}
	// A ZooKeeper session resumed on another member while the keyspace
	// has no quorum, claiming a zxid above the keyspace's copy (its
	// creation's, in the root): admitted, and served by the root (before,
	// the resume waited for every group and the session was lost).
	frame, err := zk.AppendRecordFrame(nil, &zk.ConnectRequest{TimeOut: 4000, SessionID: resp.SessionID, Passwd: resp.Passwd,
		LastZxidSeen: int64(resp.SessionID)})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	rc, err := net.Dial("tcp", tc.zkAddrs()[5])
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rc.Write(frame)
	rc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := zk.ReadFrame(rc, 1<<20)
	resumed := &zk.ConnectResponse{}
	if err != nil || resumed.Decode(zk.NewDecoder(b)) != nil || resumed.SessionID != resp.SessionID || resumed.TimeOut == 0 {
		t.Fatalf("ZooKeeper resume on member 6 while the keyspace has no quorum: %+v %v", resumed, err)
	}
	if h, _ := zkCall(t, rc, 2, zk.OpExists, &zk.ExistsRequest{Path: "/elsewhere-not"}); h.Err != -101 { // ZNONODE
		t.Fatalf("a root read on the resumed session: err %d", h.Err)
	}
	// Linearizable: always the leader's, refused as fast.
	start = time.Now()
	if _, _, err := us.Get(ctx(t), "/eu/data"); !errors.Is(err, errs.ErrNoQuorumRead) || time.Since(start) > tc.cfgs[3].requestTimeout()/2 {
		t.Fatalf("a linearizable read of the keyspace: %v after %v", err, time.Since(start))
	}
	// The root writes on.
	if _, _, err := us.Create(ctx(t), "/elsewhere", nil, client.CreateOptions{}); err != nil {
		t.Fatalf("a write outside the keyspace: %v", err)
	}

	// The region back, the keyspace writes again.
	for i := 0; i < 3; i++ {
		tc.start(i)
	}
	back := writeWithin(t, "write after the region is back", 45*time.Second, true, func(c context.Context) error {
		_, err := us.Set(c, "/eu/data", []byte("back"), -1)
		return err
	})
	t.Logf("writes again %v after the region's members restarted", back.Round(time.Millisecond))
}

// regionCluster is five members, all the root's voters: r1 (zones a, b,
// the keyspace's home), r2 (a, b) and r3 (a). A region-survival keyspace
// homed in r1 has all five as voters, two a region but r3; losing r1
// leaves three of five, for the keyspace and for the root.
func regionCluster(t *testing.T) *testCluster {
	where := [][2]string{{"r1", "a"}, {"r1", "b"}, {"r2", "a"}, {"r2", "b"}, {"r3", "a"}}
	tc := newTestCluster(t, 5, func(c *Config) {
		c.TickMs = faultTickMs
		for i := range c.Members {
			c.Members[i].Region, c.Members[i].Zone = where[i][0], where[i][1]
		}
	})
	tc.rootLeader()
	return tc
}

// A region-survival keyspace keeps writing when its whole home region is
// lost (a leader is elected in another region), and its leader returns
// home once the region is back.
func TestKeyspaceRegionSurvivesHomeRegionLoss(t *testing.T) {
	tc := regionCluster(t)
	ks := createKeyspace(tc, 2, "/r", "r1", fsm.SurvivalRegion)
	if !slices.Equal(ks.Voters, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("voters %v, want all five", ks.Voters)
	}
	atHome := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if l := tc.keyspaceLeader(ks.Group); l < 2 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the keyspace's leader is not in its home region r1", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	atHome("before the loss")
	w := tc.client(tc.endpoints()[2])
	mustCreate(t, w, "/r/data", []byte("0"))
	tc.stop(0)
	tc.stop(1)
	took := writeWithin(t, "write through member 3 with r1 down", 20*time.Second, false, func(c context.Context) error {
		_, err := w.Set(c, "/r/data", []byte("1"), -1)
		return err
	})
	t.Logf("r1 down: first write acknowledged after %v", took.Round(time.Millisecond))
	lead := tc.keyspaceLeader(ks.Group)
	if lead < 2 {
		t.Fatalf("leader %d is in the lost region", lead+1)
	}
	// Writes keep going while r1 is down, longer than the leader's
	// hand-over period (groupDutyEvery): the leader does not hold them for
	// hand-overs to a home voter that cannot answer.
	// Before, each attempt held writes for an election timeout (at 50 ms
	// ticks: 10 writes in 3 s, 4 of them 500 ms or slower); now hundreds,
	// none that slow (one is allowed, for a loaded machine).
	election := time.Duration(tc.cfgs[2].TickMs*tc.cfgs[2].ElectionTicks) * time.Millisecond
	var n int
	var stalled []time.Duration
	for start := time.Now(); time.Since(start) < 6*groupDutyEvery; n++ {
		t0 := time.Now()
		if _, err := w.Set(ctx(t), "/r/data", []byte{byte(n)}, -1); err != nil {
			t.Fatalf("write %d with r1 down: %v", n, err)
		}
		if d := time.Since(t0); d >= election {
			stalled = append(stalled, d)
		}
	}
	t.Logf("r1 down: %d writes in %v, leader member %d; %d took an election timeout (%v) or more: %v", n, 6*groupDutyEvery, lead+1, len(stalled), election, stalled)
	if len(stalled) > 1 {
		t.Fatalf("with r1 down %d writes of %d took an election timeout or more: %v", len(stalled), n, stalled)
	}
	tc.start(0)
	tc.start(1)
	tc.waitGroupOpen(ks.Group)
	atHome("after r1 is back")
	if _, err := w.Set(ctx(t), "/r/data", []byte("home"), -1); err != nil {
		t.Fatal(err)
	}
}

// withKeyspaceTest's subtests run other tests of this package on
// clusters that hold a regional keyspace, withKeyspacePrefix, created by
// newTestCluster before the test sees the cluster.
const (
	withKeyspaceTest   = "TestZKWithKeyspace"
	withKeyspacePrefix = "/ks"
)

// TestZKWithKeyspace runs the go-zookeeper tests again on clusters where
// a keyspace exists: zxids are then clocks comparable across groups, a
// reconnecting client's watches wait for every group, and "/" lists the
// keyspace's root. Their paths stay outside it (each test creates its own
// top-level node, which a keyspace's root would already be; a keyspace
// covering a client's paths is in the kazoo and zkCli keyspace runs and
// TestKeyspaceThroughZooKeeperPort). Left out: the tests on one member,
// where zone survival has no three zones, and
// TestZKResumeNotBehindANotification: its session (2 s, the most 100 ms
// session ticks allow) expires before it resumes on a follower whose
// links are delayed 300 ms, since the resume also waits for a ReadIndex
// round of the idle keyspace's group, whose last zxid is behind the
// client's (docs/compatibility.md, "Regional keyspaces").
func TestZKWithKeyspace(t *testing.T) {
	for _, test := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"TestZKClientBasics", TestZKClientBasics},
		{"TestZKWatchesAndEphemerals", TestZKWatchesAndEphemerals},
		{"TestZKLockView", TestZKLockView},
		{"TestZKACLsIPAndSuperDigest", TestZKACLsIPAndSuperDigest},
		{"TestZKOutcomeUnknownIsConnectionLoss", TestZKOutcomeUnknownIsConnectionLoss},
	} {
		t.Run(test.name, test.run)
	}
}
