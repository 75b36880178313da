package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	dto "github.com/prometheus/client_model/go"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/fsm"
)

// waitRecorded waits until every running server's state records the
// cluster version want.
func waitRecorded(t *testing.T, tc *testCluster, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		for _, s := range tc.servers {
			if s != nil && s.recordedVersion() != want {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for i, s := range tc.servers {
				if s != nil {
					t.Logf("server %d: recorded cluster version %d", i+1, s.recordedVersion())
				}
			}
			t.Fatalf("cluster version %d never recorded everywhere", want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClusterVersionRecorded: a cluster whose members all run this binary
// records its apply version, and status shows both.
func TestClusterVersionRecorded(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	waitRecorded(t, tc, fsm.ApplyVersion)
	for _, s := range tc.servers {
		st := (&api{s: s}).status()
		if st.GetApplyVersion() != fsm.ApplyVersion || st.GetClusterVersion() != fsm.ApplyVersion {
			t.Fatalf("member %d status: apply_version %d, cluster_version %d; want %d and %d",
				s.cfg.ID, st.GetApplyVersion(), st.GetClusterVersion(), fsm.ApplyVersion, fsm.ApplyVersion)
		}
	}
}

// TestClusterVersionUpgrade: a rolling upgrade with a regional keyspace.
// With one member running (advertising) an older binary, apply version
// 4, the cluster version stays 4: every write, in the keyspace too, goes
// in an envelope that binary applies, without dependencies, and nothing
// newer is proposed; a read of the keyspace by a session that saw the
// root is linearizable (a ReadIndex round), since the dependencies are
// missing. Once the member is "upgraded" the leader records 5, each
// group's leader proposes its dependency marker, and a flag written
// before the upgrade leads a new reader to wait for the keyspace write it
// followed (the marker covers entries from before it).
func TestClusterVersionUpgrade(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		if c.ID == 3 {
			c.ApplyVersion = fsm.UnadvertisedVersion
		}
	})
	lead := tc.leader()
	waitRecorded(t, tc, fsm.UnadvertisedVersion)
	ks, _, err := tc.servers[lead].createKeyspace(ctx(t), "/eu", "local", fsm.SurvivalZone)
	if err != nil {
		t.Fatal(err)
	}
	tc.waitGroupOpen(ks.Group)
	acl := gozk.WorldACL(gozk.PermAll)
	for i, addr := range tc.zkAddrs() {
		zc, _ := zkConnect(t, []string{addr})
		if _, err := zc.Create(fmt.Sprintf("/eu/c%d", i), []byte("v1"), 0, acl); err != nil {
			t.Fatalf("member %d: keyspace write with an older member: %v", i+1, err)
		}
		if _, err := zc.Create(fmt.Sprintf("/flag%d", i), nil, 0, acl); err != nil {
			t.Fatalf("member %d: root write with an older member: %v", i+1, err)
		}
		zc.Close()
	}
	config := tc.servers[lead].keyspaceGroups.get(ks.Group).rep.AppliedIndex()
	for i, s := range tc.servers {
		for _, g := range []*group{s.root, s.keyspaceGroups.get(ks.Group)} {
			g.fsm.RLock()
			deps, from := g.fsm.Deps(), g.fsm.DepsFrom()
			g.fsm.RUnlock()
			if len(deps) != 0 || from != 0 {
				t.Fatalf("member %d group %d: dependencies %v, marker at %d: an entry the older member cannot apply was proposed", i+1, g.id, deps, from)
			}
		}
	}
	// A kind of entry only this binary applies is refused at the
	// proposer, on every member: here the dependency marker.
	for i, s := range tc.servers {
		_, err := s.Submit(ctx(t), inGroup{depsMarker{}, s.keyspaceGroups.get(ks.Group)}).Wait()
		if !errors.Is(err, errs.ErrClusterVersion) {
			t.Fatalf("member %d proposed a dependency marker with an older member: %v, want ErrClusterVersion", i+1, err)
		}
	}
	// A read of /eu for a session that saw the root asks /eu's leader.
	f := (lead + 1) % 3
	readIndex := func() float64 {
		var out dto.Metric
		if err := tc.servers[f].metrics.readWaits.WithLabelValues("read_index").Write(&out); err != nil {
			t.Fatal(err)
		}
		return out.GetCounter().GetValue()
	}
	zf, _ := zkConnect(t, tc.zkAddrs()[f:f+1])
	if _, _, err := zf.Get("/flag0"); err != nil {
		t.Fatal(err)
	}
	before := readIndex()
	if _, _, err := zf.Get("/eu/c0"); err != nil {
		t.Fatal(err)
	}
	if readIndex() == before {
		t.Fatalf("member %d read /eu locally for a session that saw the root while dependencies are missing", f+1)
	}

	tc.servers[2].setApplyVersion(fsm.ApplyVersion) // "upgraded"
	waitRecorded(t, tc, fsm.ApplyVersion)
	tc.waitGroupOpen(ks.Group) // and the markers applied everywhere
	// A new reader of a flag written before the upgrade waits for the
	// keyspace write that preceded it: the root's marker names /eu's
	// commit index, at or past that write.
	zr, _ := zkConnect(t, tc.zkAddrs()[f:f+1])
	if _, _, err := zr.Get("/flag2"); err != nil {
		t.Fatal(err)
	}
	if v := zkView(t, tc.servers[f], zr); v.need(ks.Group) < config {
		t.Fatalf("after the upgrade a reader of the old flag has /eu at %d in its view, below the write at %d", v.need(ks.Group), config)
	}
	before = readIndex()
	if data, _, err := zr.Get("/eu/c2"); err != nil || string(data) != "v1" {
		t.Fatalf("read after the upgrade: %q %v", data, err)
	}
	if readIndex() != before {
		t.Fatalf("member %d still asked /eu's leader after every marker applied", f+1)
	}
	// New writes carry their dependencies.
	zw, _ := zkConnect(t, tc.zkAddrs()[lead:lead+1])
	if _, err := zw.Create("/flag9", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Create("/eu/c9", nil, 0, acl); err != nil {
		t.Fatalf("keyspace write after the upgrade: %v", err)
	}
	g := tc.servers[lead].keyspaceGroups.get(ks.Group)
	g.fsm.RLock()
	deps := g.fsm.Deps()
	g.fsm.RUnlock()
	if deps[0] == 0 {
		t.Fatalf("after the upgrade /eu depends on %v, want the root", deps)
	}
}

// zkView is the view of ZooKeeper session zc's connection on server s.
func zkView(t *testing.T, s *Server, zc *gozk.Conn) *view {
	t.Helper()
	s.zk.mu.Lock()
	c := s.zk.bySes[zc.SessionID()]
	s.zk.mu.Unlock()
	if c == nil {
		t.Fatal("no connection for the session")
	}
	s.settle(c.view)
	return c.view
}

// TestClusterVersionNeverFalls: a member that advertises less than the
// recorded version (an older binary added later) does not lower it.
func TestClusterVersionNeverFalls(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	lead := tc.leader()
	waitRecorded(t, tc, fsm.ApplyVersion)
	tc.servers[(lead+1)%3].setApplyVersion(fsm.UnadvertisedVersion)
	time.Sleep(3 * advertiseEvery)
	for i, s := range tc.servers {
		if v := s.recordedVersion(); v != fsm.ApplyVersion {
			t.Fatalf("member %d: cluster version %d after a member advertised %d; want it kept at %d",
				i+1, v, fsm.UnadvertisedVersion, fsm.ApplyVersion)
		}
	}
}

// TestDecodeVersion: advertisements come from the network; anything
// malformed is an error, never a panic or an absurd version.
func TestDecodeVersion(t *testing.T) {
	if v, err := decodeVersion(encodeVersion(fsm.ApplyVersion)); err != nil || v != fsm.ApplyVersion {
		t.Fatalf("round trip: %d, %v", v, err)
	}
	for _, b := range [][]byte{nil, {versionTag}, {versionTag, 0}, {versionTag, 0x80}, {versionTag, 5, 1},
		{placementTag, 5}, append([]byte{versionTag}, encodeVersion(maxApplyVersion + 1)[1:]...),
		{versionTag, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if v, err := decodeVersion(b); err == nil {
			t.Errorf("decodeVersion(%x) = %d, want an error", b, v)
		}
	}
}

// Once the cluster version says every member reads them, a member too far
// behind for the leader's log gets the leader's snapshot streamed into a
// file of its own, and catches up from it.
func TestSnapshotStreamedAtClusterVersion(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.SnapshotEntries = 20 })
	waitRecorded(t, tc, fsm.ApplyVersion)
	lead := tc.leader()
	f := (lead + 1) % 3
	tc.stop(f)
	c := tc.client(tc.cfgs[lead].Self().GRPC)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 200 {
		if _, _, err := c.Create(ctx, fmt.Sprintf("/s%03d", i), []byte("v"), client.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tc.start(f)
	back := tc.client(tc.cfgs[f].Self().GRPC)
	deadline := time.Now().Add(20 * time.Second)
	for {
		kids, _, err := back.Children(ctx, "/", client.WithConsistency(client.Linearizable))
		if err == nil && len(kids) >= 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted member did not catch up: %d children, err %v", len(kids), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	streamed, _ := filepath.Glob(filepath.Join(tc.cfgs[f].DataDir, "snap", "snap-0-*-from-*"))
	if len(streamed) == 0 {
		all, _ := filepath.Glob(filepath.Join(tc.cfgs[f].DataDir, "snap", "*"))
		t.Fatalf("the member caught up without a streamed snapshot; its snapshot files: %v", all)
	}
}
