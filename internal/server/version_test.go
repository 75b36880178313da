package server

import (
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	dto "github.com/prometheus/client_model/go"

	"github.com/meridian-coord/meridian/client"
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

// TestClusterVersionGatesDependentWrites: with one member running (that
// is, advertising) an older binary, apply version 4, the cluster version
// stays 4 and a write that must carry dependencies on other groups (a
// ZooKeeper session that wrote the root, then writes a keyspace) is
// refused on every member, NOTREADONLY, never proposed: the older binary
// would skip such an entry and its copy would diverge. Writes that need
// no newer format go on. Once the member is upgraded the leader records
// the new cluster version and the same write applies, with its
// dependency.
func TestClusterVersionGatesDependentWrites(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.RequestTimeoutMs = 2000
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
		flag, err := zc.Create("/flag", nil, gozk.FlagSequence, acl)
		if err != nil {
			t.Fatalf("member %d: root write: %v", i+1, err)
		}
		// go-zookeeper knows no NOTREADONLY: "unknown error: -119".
		if _, err := zc.Create("/eu/config", []byte("v1"), 0, acl); err == nil || !strings.Contains(err.Error(), "-119") {
			t.Fatalf("member %d: keyspace write after a root write with an older member: %v, want NOTREADONLY (-119)", i+1, err)
		}
		if _, _, err := zc.Get(flag); err != nil {
			t.Fatalf("member %d: read after the refusal, same session: %v", i+1, err)
		}
		zc.Close()
	}
	// Root writes need no newer format: they go on, native ones too.
	c := tc.client(tc.endpoints()[lead])
	if _, _, err := c.Create(ctx(t), "/plain", nil, client.CreateOptions{}); err != nil {
		t.Fatalf("root write with an older member: %v", err)
	}
	for i, s := range tc.servers {
		g := s.keyspaceGroups.get(ks.Group)
		g.fsm.RLock()
		_, err := g.fsm.Tree().Exists("/eu/config")
		deps, exists := g.fsm.Deps(), err == nil
		g.fsm.RUnlock()
		if len(deps) != 0 || exists {
			t.Fatalf("member %d: /eu depends on %v, /eu/config exists %v: an entry the older member cannot apply was proposed", i+1, deps, exists)
		}
	}
	// An older member's writes carry no dependencies, so a read of /eu
	// by a session that saw the root asks /eu's leader (a ReadIndex
	// round), where it would be local once every member writes them.
	f := (lead + 1) % 3
	readIndex := func() float64 {
		var out dto.Metric
		if err := tc.servers[f].metrics.readWaits.WithLabelValues("read_index").Write(&out); err != nil {
			t.Fatal(err)
		}
		return out.GetCounter().GetValue()
	}
	zf, _ := zkConnect(t, tc.zkAddrs()[f:f+1])
	if _, _, err := zf.Get("/plain"); err != nil {
		t.Fatal(err)
	}
	before := readIndex()
	if _, _, err := zf.Get("/eu"); err != nil {
		t.Fatal(err)
	}
	if readIndex() == before {
		t.Fatalf("member %d read /eu for a session that saw the root without a ReadIndex round while a member writes no dependencies", f+1)
	}

	tc.servers[2].setApplyVersion(fsm.ApplyVersion) // "upgraded"
	waitRecorded(t, tc, fsm.ApplyVersion)
	zc, _ := zkConnect(t, tc.zkAddrs()[lead:lead+1])
	if _, err := zc.Create("/flag", nil, gozk.FlagSequence, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.Create("/eu/config", []byte("v1"), 0, acl); err != nil {
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
