package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/metadata"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/backup"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/tree"
)

// keyspace creates a keyspace through server 1 and waits until every
// server runs its group.
func (tc *testCluster) keyspace(prefix, home string, survival fsm.Survival) fsm.Keyspace {
	tc.t.Helper()
	ks, _, err := tc.servers[0].createKeyspace(context.Background(), prefix, home, survival)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.waitGroupOpen(ks.Group)
	return ks
}

// waitGroupOpen waits until every running server runs the keyspace's
// group and serves its reads as a settled cluster does: the cluster
// version recorded and, when every member writes dependencies, the
// group's and the root's dependency markers applied (version.go; until
// then reads across groups are linearizable).
func (tc *testCluster) waitGroupOpen(id uint64) {
	tc.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, s := range tc.servers {
		for s != nil && s.keyspaceGroups.get(id) == nil {
			if time.Now().After(deadline) {
				tc.t.Fatalf("server %d does not run group %d", s.cfg.ID, id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	marked := func(g *group) bool {
		g.fsm.RLock()
		defer g.fsm.RUnlock()
		return g.fsm.DepsFrom() > 0
	}
	for _, s := range tc.servers {
		for s != nil {
			v := s.recordedVersion()
			if v > 0 && (v < fsm.DepsVersion || marked(s.root) && marked(s.keyspaceGroups.get(id))) {
				break
			}
			if time.Now().After(deadline) {
				tc.t.Fatalf("server %d: cluster version %d, dependency markers of the root and group %d not both applied", s.cfg.ID, v, id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// A keyspace seen through an unmodified ZooKeeper client: one tree whose
// /eu lives in its own raft group on every member, writes and reads routed
// by any member, zxids that keep a session's order across groups, and the
// refusals (a multi across groups, deleting the keyspace's root, removing
// a keyspace that is not empty).
func TestKeyspaceThroughZooKeeperPort(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	ks, _, err := tc.servers[0].createKeyspace(ctx(t), "/eu", "local", fsm.SurvivalZone)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ks.Voters, []uint64{1, 2, 3}) || len(ks.Learners) != 0 {
		t.Fatalf("placement: voters %v learners %v, want the three zones of region local", ks.Voters, ks.Learners)
	}
	if _, _, err := tc.servers[1].createKeyspace(ctx(t), "/eu", "local", fsm.SurvivalZone); !errors.Is(err, errs.ErrKeyspaceExists) {
		t.Fatalf("second create: %v", err)
	}
	if _, _, err := tc.servers[1].createKeyspace(ctx(t), "/us", "elsewhere", fsm.SurvivalZone); !errors.Is(err, errs.ErrInvalidKeyspace) {
		t.Fatalf("a home region without members: %v", err)
	}
	tc.waitGroupOpen(ks.Group)
	st := (&api{s: tc.servers[2]}).status()
	if len(st.Keyspaces) != 1 || st.Keyspaces[0].GetPrefix() != "/eu" || st.Keyspaces[0].GetGroup() != ks.Group {
		t.Fatalf("status keyspaces: %v", st.Keyspaces)
	}

	acl := gozk.WorldACL(gozk.PermAll)
	zc, _ := zkConnect(t, tc.zkAddrs()[1:2])
	if _, err := zc.Create("/eu/config", []byte("v1"), 0, acl); err != nil {
		t.Fatalf("create in the keyspace: %v", err)
	}
	if _, err := zc.Create("/top", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	// Write then flag, across groups: the flag's zxid exceeds the config's.
	cfgStat, err := zc.Set("/eu/config", []byte("v2"), -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zc.Create("/top/ready", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	_, readyStat, err := zc.Get("/top/ready")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("config mzxid %#x, flag czxid %#x", cfgStat.Mzxid, readyStat.Czxid)
	if readyStat.Czxid <= cfgStat.Mzxid {
		t.Fatalf("flag czxid %#x not above config mzxid %#x", readyStat.Czxid, cfgStat.Mzxid)
	}
	kids, _, err := zc.Children("/")
	if err != nil || !slices.Contains(kids, "eu") || !slices.Contains(kids, "top") {
		t.Fatalf("children of /: %v, %v", kids, err)
	}

	// The data is in the keyspace's group, not the root's, on every member.
	for _, s := range tc.servers {
		g := s.keyspaceGroups.get(ks.Group)
		deadline := time.Now().Add(10 * time.Second)
		for {
			g.fsm.RLock()
			data, _, err := g.fsm.Tree().Get("/eu/config")
			g.fsm.RUnlock()
			if err == nil && string(data) == "v2" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %d: /eu/config in the group: %q %v", s.cfg.ID, data, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		s.mu.RLock()
		_, _, err := s.mu.tree.Get("/eu/config")
		s.mu.RUnlock()
		if !errors.Is(err, errs.ErrNoNode) {
			t.Fatalf("server %d: /eu/config in the root group's tree: %v", s.cfg.ID, err)
		}
	}

	// Another client on another member, after seeing the flag, reads the
	// config as written.
	zc3, _ := zkConnect(t, tc.zkAddrs()[2:3])
	if _, err := zc3.Sync("/top"); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := zc3.Exists("/top/ready"); err != nil || !ok {
		t.Fatalf("flag: %v %v", ok, err)
	}
	if data, _, err := zc3.Get("/eu/config"); err != nil || string(data) != "v2" {
		t.Fatalf("config after the flag: %q %v", data, err)
	}

	// Refusals.
	_, err = zc.Multi(&gozk.CreateRequest{Path: "/eu/m", Data: nil, Acl: acl}, &gozk.CreateRequest{Path: "/top/m", Data: nil, Acl: acl})
	if !errors.Is(err, gozk.ErrBadArguments) {
		t.Fatalf("multi across keyspaces: %v", err)
	}
	if err := zc.Delete("/eu", -1); !errors.Is(err, gozk.ErrBadArguments) {
		t.Fatalf("delete of the keyspace root: %v", err)
	}
	if _, err := tc.servers[2].removeKeyspace(ctx(t), "/eu"); !errors.Is(err, errs.ErrKeyspaceNotEmpty) {
		t.Fatalf("remove a keyspace with data: %v", err)
	}

	// A member restarted runs the group again, from its store.
	tc.stop(0)
	tc.start(0)
	tc.waitGroupOpen(ks.Group)
	zc1, _ := zkConnect(t, tc.zkAddrs()[:1])
	if _, err := zc1.Sync("/eu"); err != nil {
		t.Fatal(err)
	}
	if data, _, err := zc1.Get("/eu/config"); err != nil || string(data) != "v2" {
		t.Fatalf("after a restart: %q %v", data, err)
	}

	// Emptied, the keyspace can be removed; its root leaves the tree.
	if err := zc.Delete("/eu/config", -1); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.servers[2].removeKeyspace(ctx(t), "/eu"); err != nil {
		t.Fatalf("remove an empty keyspace: %v", err)
	}
	for _, s := range tc.servers {
		deadline := time.Now().Add(10 * time.Second)
		for s.keyspaceGroups.get(ks.Group) != nil {
			if time.Now().After(deadline) {
				t.Fatalf("server %d still runs the removed keyspace's group", s.cfg.ID)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if kids, _, err := zc.Children("/"); err != nil || slices.Contains(kids, "eu") {
		t.Fatalf("children of / after the removal: %v, %v", kids, err)
	}
	if _, err := zc.Create("/eu", nil, 0, acl); err != nil {
		t.Fatalf("the prefix is a plain path again: %v", err)
	}
}

// Sessions stay the root's, and what a session holds in a keyspace ends
// with it: its ephemerals there are deleted when it closes, and a lock it
// held there passes to the next waiter (with a larger token), on every
// member.
func TestKeyspaceSessionsEnd(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	ks := tc.keyspace("/eu", "local", fsm.SurvivalZone)

	acl := gozk.WorldACL(gozk.PermAll)
	owner, _ := zkConnect(t, tc.zkAddrs()[:1])
	watcher, _ := zkConnect(t, tc.zkAddrs()[2:3])
	if _, err := owner.Create("/eu/e", []byte("mine"), gozk.FlagEphemeral, acl); err != nil {
		t.Fatalf("ephemeral in a keyspace: %v", err)
	}
	if _, err := watcher.Sync("/eu"); err != nil { // another client's write: sync, as ZooKeeper asks
		t.Fatal(err)
	}
	ok, _, ch, err := watcher.ExistsW("/eu/e")
	if err != nil || !ok {
		t.Fatalf("ephemeral seen from another member: %v %v", ok, err)
	}
	owner.Close()
	select {
	case ev := <-ch:
		if ev.Type != gozk.EventNodeDeleted {
			t.Fatalf("event %+v, want the ephemeral's deletion", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the closed session's ephemeral in the keyspace was not deleted")
	}

	// ZooKeeper deletes a session's ephemerals before its close returns:
	// so here, in the keyspace, on the member the session used.
	closer := tc.client(tc.endpoints()[1])
	if _, _, err := closer.Create(ctx(t), "/eu/n", nil, client.CreateOptions{Mode: client.Ephemeral}); err != nil {
		t.Fatal(err)
	}
	if err := closer.Close(); err != nil {
		t.Fatal(err)
	}
	g := tc.servers[1].keyspaceGroups.get(ks.Group)
	g.fsm.RLock()
	_, _, err = g.fsm.Tree().Get("/eu/n")
	g.fsm.RUnlock()
	if !errors.Is(err, errs.ErrNoNode) {
		t.Fatalf("the ephemeral outlived its session's close: %v", err)
	}

	// A lock in the keyspace (named eu/...), held by a native session.
	holder := tc.client(tc.endpoints()[1])
	lease, err := holder.Lock(ctx(t), "eu/job", client.LockOptions{})
	if err != nil {
		t.Fatalf("lock in the keyspace: %v", err)
	}
	// Listed with the root's locks, from any member.
	ll, err := (&api{s: tc.servers[0]}).ListLocks(ctx(t), &pb.ListLocksRequest{})
	if err != nil || len(ll.GetLocks()) != 1 || ll.GetLocks()[0].GetName() != "eu/job" || len(ll.GetLocks()[0].GetHolders()) != 1 {
		t.Fatalf("ListLocks: %v %v", ll.GetLocks(), err)
	}
	next := tc.client(tc.endpoints()[2])
	got := make(chan *client.Lease, 1)
	go func() {
		l, err := next.Lock(context.Background(), "eu/job", client.LockOptions{Timeout: 15 * time.Second})
		if err != nil {
			t.Errorf("waiting lock: %v", err)
		}
		got <- l
	}()
	time.Sleep(200 * time.Millisecond) // queued behind the holder
	holder.Close()
	select {
	case l := <-got:
		if l == nil || l.Token <= lease.Token {
			t.Fatalf("next holder's token %v, first %d", l, lease.Token)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the lock held by a closed session was not handed on")
	}
	for _, s := range tc.servers {
		g := s.keyspaceGroups.get(ks.Group)
		s.mu.RLock()
		_, rootHas := s.fsm.Coord().Get("eu/job")
		s.mu.RUnlock()
		g.fsm.RLock()
		_, groupHas := g.fsm.Coord().Get("eu/job")
		g.fsm.RUnlock()
		if rootHas || !groupHas {
			t.Fatalf("server %d: lock eu/job in the root group %v, in the keyspace's %v", s.cfg.ID, rootHas, groupHas)
		}
	}
}

// The native API orders a session's writes across groups too: the client
// sends the highest zxid it has seen with every call, and each write's zxid
// exceeds it, however many writes one group applies within a millisecond.
func TestKeyspaceNativeWritesOrderedAcrossGroups(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	tc.keyspace("/eu", "local", fsm.SurvivalZone)
	c := tc.client(tc.endpoints()[1])
	if _, _, err := c.Create(ctx(t), "/eu/config", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Create(ctx(t), "/flag", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		cfg, err := c.Set(ctx(t), "/eu/config", []byte{byte(i)}, -1)
		if err != nil {
			t.Fatal(err)
		}
		flag, err := c.Set(ctx(t), "/flag", []byte{byte(i)}, -1)
		if err != nil {
			t.Fatal(err)
		}
		if flag.Mzxid <= cfg.Mzxid {
			t.Fatalf("round %d: the flag's zxid %#x is not above the config's %#x", i, flag.Mzxid, cfg.Mzxid)
		}
		back, err := c.Set(ctx(t), "/eu/config", []byte{byte(i)}, -1)
		if err != nil {
			t.Fatal(err)
		}
		if back.Mzxid <= flag.Mzxid {
			t.Fatalf("round %d: the config's zxid %#x is not above the flag's %#x", i, back.Mzxid, flag.Mzxid)
		}
	}
}

// A region-survival keyspace spreads its voters over the regions and keeps
// its leader in its home region.
func TestKeyspaceRegionSurvivalLeaderAtHome(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		for i := range c.Members {
			c.Members[i].Region = fmt.Sprintf("r%d", i+1)
		}
	})
	tc.leader()
	ks := tc.keyspace("/r", "r2", fsm.SurvivalRegion)
	if !slices.Equal(ks.Voters, []uint64{1, 2, 3}) {
		t.Fatalf("voters %v, want one in each region", ks.Voters)
	}
	for round := 0; round < 2; round++ {
		deadline := time.Now().Add(15 * time.Second)
		for {
			g := tc.servers[1].keyspaceGroups.get(ks.Group)
			if g.rep.IsLeader() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the keyspace's leader is %d, not its home region's member 2", round, g.rep.Leader())
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Moved away, it comes back.
		g := tc.servers[1].keyspaceGroups.get(ks.Group)
		if err := g.rep.TransferLeadership(ctx(t), 3); err != nil {
			t.Fatal(err)
		}
	}
}

// Write then flag across keyspaces, read through another member: the
// flag's entry (root group) carries the config's group and index as a
// dependency, so a connection that has seen the flag has the config's
// index in its view, and a member answers a read of the keyspace from its
// own copy only once that copy has applied it. Seen here three ways: the
// member's view after reading the flag names the config's index; with
// the keyspace's quorum gone, the member still answers from its copy,
// which has the config (reads stay local, no round trip to a leader); and
// a call whose view asks for more than the copy has is not answered from
// it (it waits, here until the request times out).
func TestKeyspaceZooKeeperReadAfterFlag(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.RequestTimeoutMs = 1000 })
	lead := tc.leader()
	ks, _, err := tc.servers[lead].createKeyspace(ctx(t), "/eu", "local", fsm.SurvivalZone)
	if err != nil {
		t.Fatal(err)
	}
	tc.waitGroupOpen(ks.Group)
	acl := gozk.WorldACL(gozk.PermAll)
	r := (lead + 1) % 3
	zw, _ := zkConnect(t, tc.zkAddrs()[lead:lead+1])
	zr, _ := zkConnect(t, tc.zkAddrs()[r:r+1])
	if _, err := zw.Create("/eu/config", []byte("v1"), 0, acl); err != nil {
		t.Fatal(err)
	}
	config := tc.servers[lead].keyspaceGroups.get(ks.Group).rep.AppliedIndex()
	if _, err := zw.Create("/flag", []byte("1"), 0, acl); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _, err := zr.Get("/flag")
		if err == nil && string(data) == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flag on member %d: %q %v", r+1, data, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The reader's view on member r names the config's index of /eu.
	s := tc.servers[r]
	var v *view
	s.zk.mu.Lock()
	if c := s.zk.bySes[zr.SessionID()]; c != nil {
		v = c.view
	}
	s.zk.mu.Unlock()
	if v == nil {
		t.Fatal("no connection for the reader's session")
	}
	s.settle(v)
	if got := v.need(ks.Group); got < config {
		t.Fatalf("after the flag the reader's view has /eu at %d, below the config's index %d", got, config)
	}
	for i := range tc.servers {
		if i != r {
			tc.stop(i)
		}
	}
	if data, _, err := zr.Get("/eu/config"); err != nil || string(data) != "v1" {
		t.Fatalf("member %d, quorum gone: config %q, %v; want v1 from its copy", r+1, data, err)
	}
	// A native call whose view needs more of /eu than this copy has.
	api := rawConn(t, s.GRPCAddr(), tc.clientTLS())
	g := s.keyspaceGroups.get(ks.Group)
	need := fmt.Sprintf("%d:%d", ks.Group, g.rep.AppliedIndex()+5)
	cctx := metadata.AppendToOutgoingContext(ctx(t), seenGroupsHeader, need)
	if resp, err := api.GetData(cctx, &pb.ReadRequest{Path: "/eu/config"}); !errors.Is(errs.FromGRPC(err), errs.ErrTimeout) {
		t.Fatalf("a view beyond the copy: %v, %v; want a timeout", resp, err)
	}
}

// Reads of a keyspace nobody writes stay on the member that serves the
// client, on both ports, while the same client writes another keyspace
// (whose zxids run ahead of the idle one's): nothing the client saw
// depends on anything in the idle keyspace that the member's copy lacks,
// so no read asks the idle keyspace's leader (meridian_read_waits_total
// {kind="read_index"} stays where it was). Before, every such read took a
// ReadIndex round, across regions when the keyspace's home is far.
func TestKeyspaceReadsOfIdleKeyspaceStayLocal(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	tc.keyspace("/busy", "local", fsm.SurvivalZone)
	idle := tc.keyspace("/idle", "local", fsm.SurvivalZone)
	acl := gozk.WorldACL(gozk.PermAll)
	// A member that does not lead the idle keyspace.
	m := 0
	for i, s := range tc.servers {
		if g := s.keyspaceGroups.get(idle.Group); g.rep.Leader() != s.cfg.ID {
			m = i
			break
		}
	}
	zc, _ := zkConnect(t, tc.zkAddrs()[m:m+1])
	if _, err := zc.Create("/idle/x", []byte("x"), 0, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.Create("/busy/w", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	nc := tc.client(tc.servers[m].GRPCAddr())
	defer nc.Close()
	readIndex := func() float64 {
		var out dto.Metric
		if err := tc.servers[m].metrics.readWaits.WithLabelValues("read_index").Write(&out); err != nil {
			t.Fatal(err)
		}
		return out.GetCounter().GetValue()
	}
	// The native client's watch stream, opened in the background, first
	// brings every group up to what the client saw (a ReadIndex round for
	// each behind it): counted before the reads.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s := tc.servers[m]
		h := s.hubs.lookup(nc.SessionID())
		if h != nil {
			h.mu.Lock()
			up := h.gen > 0
			h.mu.Unlock()
			if up {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the native client's watch stream never attached")
		}
	}
	before := readIndex()
	for i := range 20 {
		if _, err := zc.Set("/busy/w", []byte{byte(i)}, -1); err != nil {
			t.Fatal(err)
		}
		if data, _, err := zc.Get("/idle/x"); err != nil || string(data) != "x" {
			t.Fatalf("ZooKeeper read %d: %q %v", i, data, err)
		}
		if _, err := nc.Set(ctx(t), "/busy/w", []byte{byte(i)}, client.AnyVersion); err != nil {
			t.Fatal(err)
		}
		if data, _, err := nc.Get(ctx(t), "/idle/x", client.WithConsistency(client.Sequential)); err != nil || string(data) != "x" {
			t.Fatalf("native read %d: %q %v", i, data, err)
		}
	}
	if got := readIndex() - before; got != 0 {
		t.Fatalf("%v reads of the idle keyspace asked its leader", got)
	}
	g := tc.servers[m].keyspaceGroups.get(idle.Group)
	if z, seen := g.lastZxid(), nc.LastZxid(); z >= seen {
		t.Fatalf("the idle keyspace's last zxid %d is not below what the client saw (%d): the test shows nothing", z, seen)
	}
}

// A keyspace group's membership follows the cluster's: a member added to
// the cluster joins the group as a learner and serves the keyspace from
// its own copy; a voter removed from the cluster is replaced by a member
// of the home region in a zone the other voters are not in, then leaves
// the group; and the group still opens after a restart (its first
// configuration names the removed member).
func TestKeyspaceGroupFollowsMembership(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	lead := tc.leader()
	ks := tc.keyspace("/eu", "local", fsm.SurvivalZone)
	cl := tc.client(tc.servers[lead].GRPCAddr())
	defer cl.Close()
	if _, _, err := cl.Create(ctx(t), "/eu/a", []byte("1"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	conf := func(i int) (voters, learners []uint64) {
		g := tc.servers[i].keyspaceGroups.get(ks.Group)
		if g == nil {
			return nil, nil
		}
		voters, learners = g.members()
		slices.Sort(voters)
		slices.Sort(learners)
		return voters, learners
	}
	n4 := tc.addServer("local") // zone local-a
	self := tc.cfgs[n4].Self()
	if _, err := cl.ChangeMembers(ctx(t), &pb.MemberChangeOp{Type: pb.MemberChangeType_ADD_LEARNER, Member: toPBMember(self, 0)}); err != nil {
		t.Fatalf("add learner: %v", err)
	}
	waitUntil(t, "member 4 a learner of the keyspace's group", func() bool {
		v, l := conf(lead)
		return slices.Equal(v, []uint64{1, 2, 3}) && slices.Equal(l, []uint64{4})
	})
	c4 := tc.client(tc.servers[n4].GRPCAddr())
	defer c4.Close()
	waitUntil(t, "the keyspace read from member 4's copy", func() bool {
		data, _, err := c4.Get(ctx(t), "/eu/a", client.WithConsistency(client.Sequential))
		return err == nil && string(data) == "1"
	})
	// Remove a member that leads neither the cluster nor the keyspace.
	gone := -1
	for i := range 3 {
		if i != lead && tc.servers[i].keyspaceGroups.get(ks.Group).rep.Leader() != uint64(i+1) {
			gone = i
			break
		}
	}
	if _, err := cl.ChangeMembers(ctx(t), &pb.MemberChangeOp{Type: pb.MemberChangeType_REMOVE_MEMBER, Member: &pb.Member{Id: uint64(gone + 1)}}); err != nil {
		t.Fatalf("remove member %d: %v", gone+1, err)
	}
	tc.stop(gone)
	want := slices.DeleteFunc([]uint64{1, 2, 3, 4}, func(id uint64) bool { return id == uint64(gone+1) })
	waitUntil(t, "member 4 a voter in place of the removed one", func() bool {
		v, l := conf(lead)
		return slices.Equal(v, want) && len(l) == 0
	})
	if _, err := cl.Set(ctx(t), "/eu/a", []byte("2"), client.AnyVersion); err != nil {
		t.Fatal(err)
	}
	// keyspace ls shows the group's configuration now.
	list, err := cl.Keyspaces(ctx(t))
	if err != nil || len(list) != 1 || !slices.Equal(list[0].GetVoters(), want) {
		t.Fatalf("keyspace ls: %v %v, want voters %v", list, err, want)
	}
	// Every member still opens the group after a restart.
	for _, i := range []int{lead, n4} {
		tc.stop(i)
		tc.start(i)
	}
	tc.waitGroupOpen(ks.Group)
	// (c4's session may have expired while its only server was down.)
	c4 = tc.client(tc.servers[n4].GRPCAddr())
	defer c4.Close()
	waitUntil(t, "the write on member 4 after the restarts", func() bool {
		data, _, err := c4.Get(ctx(t), "/eu/a", client.WithConsistency(client.Sequential))
		return err == nil && string(data) == "2"
	})
}

// The counts an operator reads (status, meridian_znodes, the four-letter
// words) cover every keyspace's znodes once: a keyspace's root counts as
// the one znode the tree shows, its ephemerals count too, and its sessions
// are the root's.
func TestKeyspaceCountedOnce(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.FourLetterWords = []string{"mntr"} })
	lead := tc.leader()
	s := tc.servers[lead]
	a := &api{s: s}
	before := a.status().GetZnodes()
	tc.keyspace("/eu", "local", fsm.SurvivalZone)
	zc, _ := zkConnect(t, tc.zkAddrs()[lead:lead+1])
	acl := gozk.WorldACL(gozk.PermAll)
	if _, err := zc.Create("/eu/a", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.Create("/eu/e", nil, gozk.FlagEphemeral, acl); err != nil {
		t.Fatal(err)
	}
	if got := a.status().GetZnodes(); got != before+3 {
		t.Fatalf("status znodes %d after a keyspace and two znodes in it, want %d", got, before+3)
	}
	mntr := fourLetter(t, tc.zkAddrs()[lead], "mntr")
	for _, want := range []string{fmt.Sprintf("zk_znode_count\t%d\n", before+3), "zk_ephemerals_count\t1\n"} {
		if !strings.Contains(mntr, want) {
			t.Errorf("mntr lacks %q:\n%s", want, mntr)
		}
	}
}

// A backup saved from a running cluster while it takes writes holds every
// write acknowledged before the save began, in the root group and in a
// keyspace, and the locks held; each group's snapshot restores. (A caller
// without the admin identity: TestAdminOperationsNeedAdmin.)
func TestSnapshotSaveUnderLoad(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	lead := tc.leader()
	ks := tc.keyspace("/eu", "local", fsm.SurvivalZone)
	cl := tc.client(tc.servers[lead].GRPCAddr())
	defer cl.Close()
	for i := range 20 {
		for _, p := range []string{fmt.Sprintf("/r%d", i), fmt.Sprintf("/eu/k%d", i)} {
			if _, _, err := cl.Create(ctx(t), p, []byte(p), client.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := cl.Lock(ctx(t), "eu/job", client.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	loaded := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				loaded <- n
				return
			default:
			}
			if _, err := cl.Set(ctx(t), "/eu/k0", []byte{byte(n)}, client.AnyVersion); err == nil {
				n++
			}
		}
	}()
	var file bytes.Buffer
	var calls int
	admin := tc.client(tc.servers[(lead+1)%3].GRPCAddr()) // the test cluster's client is admin
	defer admin.Close()
	err := admin.SaveSnapshot(ctx(t), &file, func(done, total uint64) { calls++ })
	close(stop)
	if n := <-loaded; err != nil || n == 0 {
		t.Fatalf("save: %v (%d writes during it)", err, n)
	}
	m, snaps, err := backup.Read(file.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Groups) != 2 || m.Groups[1].Group != ks.Group || m.Groups[1].Prefix != "/eu" || len(m.Members) != 3 || calls == 0 {
		t.Fatalf("manifest %+v, %d progress calls", m, calls)
	}
	if _, err := backup.Inspect(m, snaps); err != nil {
		t.Fatal(err)
	}
	root, eu := fsm.New(fsm.Hooks{}), fsm.NewKeyspace(fsm.Hooks{}, ks)
	if err := root.Restore(m.Groups[0].Index, snaps[0]); err != nil {
		t.Fatal(err)
	}
	if err := eu.Restore(m.Groups[1].Index, snaps[1]); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if data, _, err := root.Tree().Get(fmt.Sprintf("/r%d", i)); err != nil || string(data) != fmt.Sprintf("/r%d", i) {
			t.Fatalf("/r%d missing from the backup", i)
		}
		if _, _, err := eu.Tree().Get(fmt.Sprintf("/eu/k%d", i)); err != nil {
			t.Fatalf("/eu/k%d missing from the backup", i)
		}
	}
	if l, ok := eu.Coord().Get("eu/job"); !ok || len(l.Holders) != 1 {
		t.Fatalf("the held lock eu/job: %+v %v", l, ok)
	}
}

// treeDump is every znode of t below path (data and ACL), path first.
func treeDump(t *testing.T, tr *tree.Tree, path string, out map[string]string) {
	t.Helper()
	data, st, err := tr.Get(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	acl, _, _ := tr.GetACL(path)
	out[path] = fmt.Sprintf("%q %v owner=%v", data, acl, st.EphemeralOwner != 0)
	kids, _, _ := tr.Children(path)
	for _, k := range kids {
		child := path + "/" + k
		if path == "/" {
			child = "/" + k
		}
		treeDump(t, tr, child, out)
	}
}

// A backup restored into a new cluster (new members' data directories,
// a new cluster token) reproduces every znode with its data and ACL, in
// the root group and in a keyspace, counters, queue items, the leader
// preference (a cluster setting) and the keyspace table, without the
// saved sessions (their ephemerals gone,
// their locks free); the new cluster is its own (another cluster id)
// and takes writes, in the keyspace too.
func TestSnapshotRestoreIntoNewCluster(t *testing.T) {
	a := newTestCluster(t, 3, nil)
	lead := a.leader()
	ks := a.keyspace("/eu", "local", fsm.SurvivalZone)
	cl := a.client(a.servers[lead].GRPCAddr())
	for i := range 5 {
		if _, _, err := cl.Create(ctx(t), fmt.Sprintf("/r%d", i), []byte{byte(i)}, client.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := cl.Create(ctx(t), fmt.Sprintf("/eu/k%d", i), []byte{byte(i)}, client.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	readOnly := []*client.ACL{{Perms: 1, Scheme: "world", Id: "anyone"}} // READ
	if _, _, err := cl.Create(ctx(t), "/eu/ro", []byte("ro"), client.CreateOptions{ACL: readOnly}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Create(ctx(t), "/eu/e", nil, client.CreateOptions{Mode: client.Ephemeral}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Lock(ctx(t), "eu/job", client.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Add(ctx(t), "eu/c", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Queue("eu/q").Push(ctx(t), []byte("item")); err != nil {
		t.Fatal(err)
	}
	if err := cl.PreferLeaderRegion(ctx(t), "local"); err != nil { // a cluster setting
		t.Fatal(err)
	}
	var file bytes.Buffer
	if err := cl.SaveSnapshot(ctx(t), &file, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	sa := a.servers[lead]
	sa.mu.RLock()
	treeDump(t, sa.mu.tree, "/", want)
	sa.mu.RUnlock()
	ga := sa.keyspaceGroups.get(ks.Group)
	ga.fsm.RLock()
	treeDump(t, ga.fsm.Tree(), "/eu", want)
	ga.fsm.RUnlock()
	if !strings.Contains(want["/eu/ro"], "[{1 {world anyone}}]") {
		t.Fatalf("the read-only ACL as saved: %s", want["/eu/ro"])
	}
	delete(want, "/eu/e") // the saved session's ephemeral
	cidA := sa.rep.Status().ClusterID

	b := newTestCluster(t, 3, func(c *Config) {
		c.ClusterToken = "restored"
		if err := Restore(*c, file.Bytes(), time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
	})
	blead := b.leader()
	sb := b.servers[blead]
	if cid := sb.rep.Status().ClusterID; cid == cidA {
		t.Fatalf("the restored cluster has the saved one's id %s", cid)
	}
	b.waitGroupOpen(ks.Group)
	got := map[string]string{}
	sb.mu.RLock()
	treeDump(t, sb.mu.tree, "/", got)
	sb.mu.RUnlock()
	if p := sb.preferredRegion(); p != "local" {
		t.Errorf("the leader preference restored as %q, saved as local", p)
	}
	gb := sb.keyspaceGroups.get(ks.Group)
	gb.fsm.RLock()
	treeDump(t, gb.fsm.Tree(), "/eu", got)
	if l, ok := gb.fsm.Coord().Get("eu/job"); ok && len(l.Holders) > 0 {
		t.Errorf("the saved session still holds eu/job: %+v", l)
	}
	counter := gb.fsm.Coord().CounterValue("eu/c")
	queued := gb.fsm.Coord().QueueStats("eu/q")
	gb.fsm.RUnlock()
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: restored %s, saved %s", p, got[p], w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s restored, not saved (or a saved session's ephemeral)", p)
		}
	}
	if counter != 5 || queued.Ready != 1 {
		t.Errorf("counter %d, queue %+v; want 5 and one ready item", counter, queued)
	}
	nc := b.client(sb.GRPCAddr())
	for _, p := range []string{"/after", "/eu/after"} {
		if _, _, err := nc.Create(ctx(t), p, nil, client.CreateOptions{}); err != nil {
			t.Fatalf("a write to the restored cluster: %s: %v", p, err)
		}
	}
	if data, _, err := nc.Get(ctx(t), "/eu/k3"); err != nil || !bytes.Equal(data, []byte{3}) {
		t.Fatalf("/eu/k3 through the restored cluster: %v %v", data, err)
	}
}

// A keyspace leader ends there the sessions its root state no longer
// knows, but not one its root state has not seen yet: a session's id is
// its creation's zxid in the root, and a participant above the root's last
// zxid was created after that state (the member's root lags), so its
// absence is not its end. Before the fix the duty expired such a session
// in the keyspace while it lived: its ephemerals went, its locks too.
func TestKeyspaceDutySparesUnseenSessions(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	ks := tc.keyspace("/eu", "local", fsm.SurvivalZone)
	s := tc.servers[0]
	g := s.keyspaceGroups.get(ks.Group)
	// As if created in the root after every member's state: an hour past
	// the clock zxids the root assigns once it is clocked (a root write
	// after this one, such as the cluster version's record, gets such a
	// zxid, far above an index).
	unseen := max(s.lastZxid(), time.Now().Add(time.Hour).UnixMilli()<<fsm.LogicalBits)
	cmd := &tree.Command{Session: unseen, Op: tree.Op{Type: tree.OpCreate, Path: "/eu/e", Data: []byte{},
		ACL: tree.OpenACL, Mode: tree.ModeEphemeral}}
	if out, err := s.Submit(ctx(t), inGroup{treeCommand(cmd), g}).Wait(); err != nil || out.res.Err != nil {
		t.Fatalf("ephemeral of a session the root has not seen: %v %v", err, out.res.Err)
	}
	time.Sleep(4 * groupDutyEvery) // the leader's duty runs every tick
	for _, s := range tc.servers {
		g := s.keyspaceGroups.get(ks.Group)
		g.fsm.RLock()
		participants := g.fsm.Participants()
		g.fsm.RUnlock()
		if !slices.Contains(participants, unseen) {
			t.Fatalf("server %d: the keyspace ended session %d, which its root has not seen (participants %v)", s.cfg.ID, unseen, participants)
		}
	}
}

// With placement: auto, a zone-survival keyspace's leadership moves to the
// home voter its writes come through (a write through a follower waits for
// one more round trip and for that follower's apply), and stays there;
// with placement off it does not move.
func TestKeyspaceLeaderFollowsItsWrites(t *testing.T) {
	for _, auto := range []bool{true, false} {
		t.Run(fmt.Sprintf("auto=%v", auto), func(t *testing.T) {
			tc := newTestCluster(t, 3, func(c *Config) {
				if auto {
					c.Placement, c.PlacementMinIntervalMs = "auto", 1000
				}
			})
			tc.leader()
			ks := tc.keyspace("/eu", "local", fsm.SurvivalZone)
			leaderOf := func() uint64 { return tc.servers[0].keyspaceGroups.get(ks.Group).rep.Leader() }
			deadline := time.Now().Add(15 * time.Second)
			for leaderOf() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the keyspace's group elected no leader")
				}
				time.Sleep(10 * time.Millisecond)
			}
			// Write through a member that does not lead the group.
			via := uint64(1)
			if leaderOf() == 1 {
				via = 2
			}
			was := leaderOf()
			writer := tc.client(tc.cfgs[via-1].Self().GRPC)
			if _, _, err := writer.Create(ctx(t), "/eu/load", nil, client.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			end := time.Now().Add(6 * time.Second)
			for i := 0; time.Now().Before(end); i++ {
				if _, err := writer.Set(ctx(t), "/eu/load", []byte(fmt.Sprint(i)), -1); err != nil && !isUnknownOutcome(err) {
					t.Fatal(err)
				}
				if auto && leaderOf() == via {
					break
				}
			}
			switch l := leaderOf(); {
			case auto && l != via:
				t.Fatalf("keyspace leader %d, want %d, the member its writes came through", l, via)
			case !auto && l != was:
				t.Fatalf("keyspace leader moved from %d to %d with placement off", was, l)
			}
			if !auto {
				return
			}
			// It stays: the writes now start on the leader.
			stop := time.Now().Add(2500 * time.Millisecond)
			for time.Now().Before(stop) {
				if _, err := writer.Set(ctx(t), "/eu/load", []byte("x"), -1); err != nil && !isUnknownOutcome(err) {
					t.Fatal(err)
				}
				if l := leaderOf(); l != via && l != 0 {
					t.Fatalf("keyspace leadership left %d for %d while its writes stayed there", via, l)
				}
			}
		})
	}
}

// Once its keyspaces are removed the root's entries carry no clock again,
// but their zxids stay above their log indexes (clock.go): a read that
// must wait for a zxid this member has not applied yet waits for that
// entry, not for the log index of that number, which would outlast the
// request.
func TestReadWaitsForZxidAfterKeyspacesRemoved(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	s := tc.servers[0]
	tc.keyspace("/eu", "local", fsm.SurvivalZone)
	c := tc.client()
	if _, _, err := c.Create(ctx(t), "/before", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.removeKeyspace(ctx(t), "/eu"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); s.clocked(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the member still has keyspaces 10 s after the last was removed")
		}
	}
	last := s.root.lastZxid()
	if uint64(last) <= s.root.rep.AppliedIndex()+1000 {
		t.Fatalf("the root's zxid %d is not ahead of its index %d: nothing to test", last, s.root.rep.AppliedIndex())
	}
	done := make(chan error, 1)
	go func() { done <- s.readBarrier(context.Background(), s.root, false, last+1) }()
	if _, _, err := c.Create(ctx(t), "/after", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the read's wait: %v", err)
		}
	case <-time.After(3 * time.Second): // the request timeout is 5 s
		t.Fatal("a read waiting for the next zxid still waits after an entry past it applied")
	}
}
