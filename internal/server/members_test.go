package server

import (
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
)

// addServer starts a new server that joins the cluster (it is not a member
// until someone adds it) and returns its index.
func (tc *testCluster) addServer(region string) int {
	tc.t.Helper()
	ports := freePorts(tc.t, 3)
	id := uint64(len(tc.cfgs) + 1)
	m := Member{ID: id, Region: region, Zone: region + "-a", Peer: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		GRPC: fmt.Sprintf("127.0.0.1:%d", ports[1]), ZK: fmt.Sprintf("127.0.0.1:%d", ports[2])}
	c := tc.cfgs[0]
	c.ID, c.Join = id, true
	c.DataDir = fmt.Sprintf("%s/n%d", tc.t.TempDir(), id)
	c.Members = append(append([]Member(nil), tc.cfgs[0].Members...), m)
	c.ListenGRPC, c.ListenHTTP, c.ListenPeer, c.ListenZK = "", "", "", ""
	if err := c.UseDevTLS(filepath.Dir(c.TLS.CA)); err != nil {
		tc.t.Fatal(err)
	}
	if err := c.Normalize(); err != nil {
		tc.t.Fatal(err)
	}
	tc.cfgs = append(tc.cfgs, c)
	tc.servers = append(tc.servers, nil)
	tc.start(len(tc.cfgs) - 1)
	return len(tc.cfgs) - 1
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func memberIDs(s *Server) string {
	var b strings.Builder
	for _, m := range s.members() {
		fmt.Fprintf(&b, "%d:%s:%s ", m.ID, m.Role, m.Region)
	}
	return strings.TrimSpace(b.String())
}

// Members are added, promoted, demoted and removed at run time through the
// native API; every server sees the same membership, with the records
// (region, addresses) the change carried.
func TestMemberChanges(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	cl := tc.client()
	if _, _, err := cl.Create(ctx(t), "/before", []byte("x"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n4 := tc.addServer("far")
	self := tc.cfgs[n4].Self()
	resp, err := cl.ChangeMembers(ctx(t), &pb.MemberChangeOp{Type: pb.MemberChangeType_ADD_LEARNER, Member: toPBMember(self, 0)})
	if err != nil {
		t.Fatalf("add learner: %v", err)
	}
	if len(resp.GetMembers()) != 4 || !resp.GetMembers()[3].GetLearner() || resp.GetMembers()[3].GetRegion() != "far" || resp.GetConfigIndex() == 0 {
		t.Fatalf("member list after add: %v", resp)
	}
	want := "1:voter:local 2:voter:local 3:voter:local 4:learner:far"
	for i, s := range tc.servers {
		waitUntil(t, fmt.Sprintf("server %d's membership", i+1), func() bool { return memberIDs(s) == want })
	}
	// The new member serves the data written before it joined.
	far := tc.client(self.GRPC)
	if data, _, err := far.Get(ctx(t), "/before"); err != nil || string(data) != "x" {
		t.Fatalf("read on the new member: %q %v", data, err)
	}

	// Promote, move leadership there, demote it again while it leads: the
	// server moves leadership to a staying voter first.
	if _, err := cl.ChangeMembers(ctx(t), &pb.MemberChangeOp{Type: pb.MemberChangeType_ADD_VOTER, Member: &pb.Member{Id: 4}}); err != nil {
		t.Fatalf("promote: %v", err)
	}
	if err := cl.TransferLeader(ctx(t), 4); err != nil {
		t.Fatalf("transfer to the promoted member: %v", err)
	}
	if _, _, err := far.Create(ctx(t), "/after-promote", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if l := tc.servers[3].Replica().Leader(); l != 4 {
		t.Fatalf("leader %d before the demotion, want 4", l)
	}
	if _, err := cl.ChangeMembers(ctx(t), &pb.MemberChangeOp{Type: pb.MemberChangeType_ADD_LEARNER, Member: &pb.Member{Id: 4}}); err != nil {
		t.Fatalf("demote the leader: %v", err)
	}
	waitUntil(t, "demotion", func() bool { return memberIDs(tc.servers[0]) == want })
	if l := tc.servers[0].Replica().Leader(); l == 4 || l == 0 {
		t.Fatalf("leader %d after demoting the leader", l)
	}

	// Refused: a new member without a usable peer address, removing a
	// non-member, removing every voter.
	for _, tcse := range []struct {
		ops  []*pb.MemberChangeOp
		want error
	}{
		{[]*pb.MemberChangeOp{{Type: pb.MemberChangeType_ADD_VOTER, Member: &pb.Member{Id: 9, PeerAddr: "nowhere"}}}, errs.ErrBadMembership},
		{[]*pb.MemberChangeOp{{Type: pb.MemberChangeType_REMOVE_MEMBER, Member: &pb.Member{Id: 9}}}, errs.ErrBadMembership},
		{[]*pb.MemberChangeOp{{Type: pb.MemberChangeType_REMOVE_MEMBER, Member: &pb.Member{Id: 1}},
			{Type: pb.MemberChangeType_REMOVE_MEMBER, Member: &pb.Member{Id: 2}},
			{Type: pb.MemberChangeType_REMOVE_MEMBER, Member: &pb.Member{Id: 3}}}, errs.ErrNewConfigNoQuorum},
	} {
		if _, err := cl.ChangeMembers(ctx(t), tcse.ops...); !errors.Is(err, tcse.want) {
			t.Fatalf("%v: %v, want %v", tcse.ops, err, tcse.want)
		}
	}

	// Remove it; the rest carry on.
	if _, err := cl.ChangeMembers(ctx(t), &pb.MemberChangeOp{Type: pb.MemberChangeType_REMOVE_MEMBER, Member: &pb.Member{Id: 4}}); err != nil {
		t.Fatalf("remove: %v", err)
	}
	tc.stop(n4)
	waitUntil(t, "removal", func() bool { return memberIDs(tc.servers[0]) == "1:voter:local 2:voter:local 3:voter:local" })
	if _, _, err := cl.Create(ctx(t), "/after-remove", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// ZooKeeper's reconfig: super user only, arguments checked, versions
// compared, observers become learners, and the answer is the new
// configuration in ZooKeeper's format.
func TestZKReconfig(t *testing.T) {
	sum := sha1.Sum([]byte("super:secret"))
	tc := newTestCluster(t, 3, func(c *Config) { c.SuperDigest = "super:" + base64.StdEncoding.EncodeToString(sum[:]) })
	tc.leader()
	anon, _ := zkConnect(t, tc.zkAddrs()[:1])
	su, _ := zkConnect(t, tc.zkAddrs()[1:2])
	if err := su.AddAuth("digest", []byte("super:secret")); err != nil {
		t.Fatal(err)
	}
	// getConfig: /zookeeper/config holds the configuration, listed under
	// /zookeeper, with a data watch the reconfig below fires.
	cfgData, cfgStat, cfgWatch, err := anon.GetW("/zookeeper/config")
	if want, idx := tc.servers[0].zkConfig(); err != nil || string(cfgData) != want || cfgStat.Mzxid != int64(idx) {
		t.Fatalf("getData /zookeeper/config: %q %+v %v, want %q at mzxid %d", cfgData, cfgStat, err, want, idx)
	}
	if kids, _, err := anon.Children("/zookeeper"); err != nil || !slices.Contains(kids, "config") {
		t.Fatalf("children of /zookeeper: %v %v", kids, err)
	}
	joining := "server.100=0.0.0.0:41001:41002:observer;0.0.0.0:41003"
	if _, err := anon.IncrementalReconfig([]string{joining}, nil, -1); !errors.Is(err, gozk.ErrNoAuth) {
		t.Fatalf("reconfig without super: %v, want no auth", err)
	}
	if _, err := anon.IncrementalReconfig([]string{"some thing"}, nil, -1); !errors.Is(err, gozk.ErrBadArguments) {
		t.Fatalf("bad joining line: %v, want bad arguments", err)
	}
	if _, err := su.IncrementalReconfig([]string{joining}, nil, 12345); !errors.Is(err, gozk.ErrBadVersion) {
		t.Fatalf("stale version: %v, want bad version", err)
	}
	if _, err := su.IncrementalReconfig([]string{joining}, nil, -1); err != nil {
		t.Fatalf("add observer: %v", err)
	}
	waitUntil(t, "the observer in every server's configuration", func() bool {
		for _, s := range tc.servers {
			if got, _ := s.zkConfig(); !strings.Contains(got, joining+"\n") {
				return false
			}
		}
		return true
	})
	select {
	case ev := <-cfgWatch:
		if ev.Type != gozk.EventNodeDataChanged || ev.Path != "/zookeeper/config" {
			t.Fatalf("config watch: %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the config watch did not fire after reconfig")
	}
	if data, _, err := anon.Get("/zookeeper/config"); err != nil || !strings.Contains(string(data), joining+"\n") {
		t.Fatalf("/zookeeper/config after reconfig: %q %v", data, err)
	}
	text, version := tc.servers[0].zkConfig()
	lines := strings.Split(text, "\n")
	if len(lines) != 5 || lines[4] != fmt.Sprintf("version=%x", version) || !strings.HasPrefix(lines[0], "server.1=127.0.0.1:") ||
		!strings.Contains(lines[0], ":participant;127.0.0.1:") {
		t.Fatalf("configuration text:\n%s", text)
	}
	if m, ok := tc.servers[2].member(100); !ok || m.Role != "learner" || m.Peer != "0.0.0.0:41001" {
		t.Fatalf("member 100: %+v %v", m, ok)
	}
	if _, err := su.IncrementalReconfig(nil, []string{"100"}, int64(version)); err != nil {
		t.Fatalf("remove observer at the current version: %v", err)
	}
	waitUntil(t, "the observer gone", func() bool { _, ok := tc.servers[0].member(100); return !ok })
	// The cluster still writes.
	if _, err := anon.Create("/after-reconfig", nil, 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		t.Fatal(err)
	}
}
