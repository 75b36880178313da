package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/fsm"
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

// waitGroupOpen waits until every running server runs the keyspace's group.
func (tc *testCluster) waitGroupOpen(group uint64) {
	tc.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, s := range tc.servers {
		for s != nil && s.keyspaceGroups.get(group) == nil {
			if time.Now().After(deadline) {
				tc.t.Fatalf("server %d does not run group %d", s.cfg.ID, group)
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

// Write then flag through the ZooKeeper port: a connection that read the
// flag (root) reads the config (keyspace) from its member's copy only once
// that copy's last zxid reaches what the connection has seen, and
// otherwise after a ReadIndex round on the keyspace's group: the
// connection's last zxid bounds its reads, not only its writes. Seen here
// with the group's quorum gone: the member's copy, below the flag's zxid,
// may not answer (before, it answered from the copy at once, and a member
// whose copy lagged served a config older than the flag).
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
	if _, err := zw.Create("/flag", []byte("1"), 0, acl); err != nil {
		t.Fatal(err)
	}
	// Read before the flag: the member's copy of the keyspace is as fresh
	// as anything this connection has seen, so it answers locally.
	if _, err := zr.Sync("/eu"); err != nil {
		t.Fatal(err)
	}
	if data, _, err := zr.Get("/eu/config"); err != nil || string(data) != "v1" {
		t.Fatalf("config: %q %v", data, err)
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
	for i := range tc.servers {
		if i != r {
			tc.stop(i)
		}
	}
	if data, _, err := zr.Get("/eu/config"); err == nil {
		t.Fatalf("member %d answered a keyspace read from its copy (%q), below the flag's zxid the connection had seen, with no ReadIndex round", r+1, data)
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
