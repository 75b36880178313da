package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/server"
)

// statusOf asks one server for its own view (no session, no quorum needed).
func statusOf(t *testing.T, addr string, tc *tls.Config) (*meridianpb.StatusResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, client.DialOptions(client.Config{TLS: tc})...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return meridianpb.NewMeridianClient(conn).Status(ctx, &meridianpb.StatusRequest{})
}

// TestNodeOfAnotherClusterRefused: a node of one cluster, restarted by
// hand on the peer addresses of a stopped member of another cluster (same
// CA, same member ids, its own data and cluster token, a higher term and a
// longer log: it would win an election) is refused by every member: it
// does not become their leader, moves none of their terms, and neither
// side receives the other's data.
func TestNodeOfAnotherClusterRefused(t *testing.T) {
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	ports := freePorts(t, 12)
	membersOf := func(off int) []server.Member {
		var ms []server.Member
		for i := 0; i < 3; i++ {
			ms = append(ms, server.Member{ID: uint64(i + 1), Region: "local", Zone: "z",
				Peer: fmt.Sprintf("127.0.0.1:%d", ports[off+2*i]), GRPC: fmt.Sprintf("127.0.0.1:%d", ports[off+2*i+1])})
		}
		return ms
	}
	membersA, membersB := membersOf(0), membersOf(6)
	writeCfg := func(name string, id uint64, members []server.Member, data, token string) string {
		cfg := server.Config{ID: id, DataDir: data, Members: members, ClusterToken: token,
			TickMs: 50, ElectionTicks: 10, SessionTickMs: 500}
		if err := cfg.UseDevTLS(tlsDir); err != nil { // one CA for both clusters
			t.Fatal(err)
		}
		p := filepath.Join(dir, name+".yaml")
		if err := cfg.WriteFile(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	grpcOf := func(ms []server.Member) []string {
		var eps []string
		for _, m := range ms {
			eps = append(eps, m.GRPC)
		}
		return eps
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Cluster B runs first and leaves a long history: six leadership
	// transfers (a new term each) and data of its own.
	procsB := make([]*proc, 3)
	for i := range 3 {
		id := uint64(i + 1)
		p := writeCfg(fmt.Sprintf("b%d", id), id, membersB, filepath.Join(dir, fmt.Sprintf("b%d", id)), "token of cluster B")
		procsB[i] = startServer(t, p, filepath.Join(dir, fmt.Sprintf("b%d.log", id)))
	}
	clientTLS, err := client.DevTLS(tlsDir)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := client.New(ctx, client.Config{Endpoints: grpcOf(membersB), RequestTimeout: 10 * time.Second, TLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	lead := leaderOf(t, cb)
	for range 6 {
		next := lead%3 + 1
		if err := cb.TransferLeader(ctx, next); err != nil {
			t.Fatalf("cluster B: transfer to %d: %v", next, err)
		}
		lead = leaderOf(t, cb)
	}
	if _, _, err := cb.Create(ctx, "/b-only", []byte("b"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stB, err := cb.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cb.Close()
	for _, p := range procsB {
		p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
	}

	// Cluster A: the dev directory's token.
	var cfgA []string
	procsA := make([]*proc, 3)
	for i := range 3 {
		id := uint64(i + 1)
		cfgA = append(cfgA, writeCfg(fmt.Sprintf("a%d", id), id, membersA, filepath.Join(dir, fmt.Sprintf("a%d", id)), ""))
		procsA[i] = startServer(t, cfgA[i], filepath.Join(dir, fmt.Sprintf("a%d.log", id)))
	}
	ca, err := client.New(ctx, client.Config{Endpoints: grpcOf(membersA), RequestTimeout: 10 * time.Second, TLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	x := leaderOf(t, ca)
	if _, _, err := ca.Create(ctx, "/a-only", []byte("a"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	procsA[x-1].cmd.Process.Signal(syscall.SIGKILL)
	<-procsA[x-1].done
	var survivors []string
	for _, m := range membersA {
		if m.ID != x {
			survivors = append(survivors, m.GRPC)
		}
	}
	// The survivors elect one of them (their view of the dead leader is
	// gone) before the stray node appears.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		agreed := true
		for _, ep := range survivors {
			st, err := statusOf(t, ep, clientTLS)
			agreed = agreed && err == nil && st.GetLeaderId() != 0 && st.GetLeaderId() != x
		}
		if agreed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cluster A's survivors elected no leader")
		}
	}

	// B's member x, restarted by hand on A's addresses of member x.
	stray := writeCfg("stray", x, membersA, filepath.Join(dir, fmt.Sprintf("b%d", x)), "token of cluster B")
	startServer(t, stray, filepath.Join(dir, "stray.log"))
	// Its own history, replayed: alone of cluster B it can commit nothing
	// more, so its applied index stays put unless cluster A feeds it.
	var strayApplied uint64
	for deadline := time.Now().Add(20 * time.Second); ; {
		st, err := statusOf(t, membersA[x-1].GRPC, clientTLS)
		if err == nil && st.GetAppliedIndex() >= stB.GetAppliedIndex() && st.GetAppliedIndex() == st.GetCommitIndex() {
			strayApplied = st.GetAppliedIndex()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stray node did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// For several election timeouts: A's survivors elect one of them, at a
	// term below B's, and the stray never leads anyone.
	var newLeader uint64
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, ep := range survivors {
			st, err := statusOf(t, ep, clientTLS)
			if err != nil {
				continue
			}
			if st.GetLeaderId() == x {
				t.Fatalf("%s follows the stray node of cluster B (member %d)", ep, x)
			}
			if st.GetTerm() >= stB.GetTerm() {
				t.Fatalf("%s reached term %d: cluster B's term (%d) got through", ep, st.GetTerm(), stB.GetTerm())
			}
			newLeader = max(newLeader, st.GetLeaderId())
		}
		st, err := statusOf(t, membersA[x-1].GRPC, clientTLS)
		if err == nil && (st.GetLeaderId() != 0 || st.GetAppliedIndex() != strayApplied) {
			t.Fatalf("stray node: leader %d, applied %d (its own history: %d): it reached cluster A", st.GetLeaderId(), st.GetAppliedIndex(), strayApplied)
		}
	}
	if newLeader == 0 || newLeader == x {
		t.Fatalf("cluster A's survivors have no leader of their own (%d)", newLeader)
	}
	// A still serves its data, and only its data.
	cs, err := client.New(ctx, client.Config{Endpoints: survivors, RequestTimeout: 10 * time.Second, TLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if d, _, err := cs.Get(ctx, "/a-only"); err != nil || string(d) != "a" {
		t.Fatalf("cluster A lost /a-only: %q, %v", d, err)
	}
	if _, _, err := cs.Get(ctx, "/b-only"); err == nil {
		t.Fatal("cluster A serves cluster B's /b-only")
	}
	// The refusals are logged, naming the other cluster.
	refused := false
	for _, m := range membersA {
		if m.ID == x {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("a%d.log", m.ID)))
		refused = refused || strings.Contains(string(b), "member of another cluster")
	}
	if !refused {
		t.Fatal("no survivor logged refusing the stray node as a member of another cluster")
	}
}
