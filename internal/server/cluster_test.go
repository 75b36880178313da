package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/testutil"
	"github.com/meridian-coord/meridian/internal/tree"
)

// testCluster runs n servers in this process, each with real Pebble storage
// in a temp dir and real loopback sockets.
type testCluster struct {
	t       testing.TB
	cfgs    []Config
	servers []*Server
}

func freePorts(t testing.TB, n int) []int { return testutil.FreePorts(t, n) }

func newTestCluster(t testing.TB, n int, tweak func(*Config)) *testCluster {
	t.Helper()
	ports := freePorts(t, 3*n)
	dir := t.TempDir()
	members := make([]Member, n)
	for i := range members {
		members[i] = Member{ID: uint64(i + 1), Region: "local", Zone: fmt.Sprintf("z%d", i+1),
			Peer: fmt.Sprintf("127.0.0.1:%d", ports[3*i]), GRPC: fmt.Sprintf("127.0.0.1:%d", ports[3*i+1]),
			ZK: fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])}
	}
	tc := &testCluster{t: t}
	for i := 0; i < n; i++ {
		c := Config{ID: uint64(i + 1), DataDir: fmt.Sprintf("%s/n%d", dir, i+1), Members: members,
			TickMs: 20, ElectionTicks: 10, SessionTickMs: 100, RequestTimeoutMs: 5000}
		if err := c.UseDevTLS(dir + "/tls"); err != nil {
			t.Fatal(err)
		}
		if tweak != nil {
			tweak(&c)
		}
		tc.cfgs = append(tc.cfgs, c)
	}
	tc.servers = make([]*Server, n)
	for i := range tc.cfgs {
		tc.start(i)
	}
	t.Cleanup(tc.closeAll)
	if strings.HasPrefix(t.Name(), withKeyspaceTest+"/") {
		tc.leader()
		tc.keyspace(withKeyspacePrefix, tc.cfgs[0].Members[0].Region, fsm.SurvivalZone)
	}
	return tc
}

func testLogger() *slog.Logger {
	if os.Getenv("MERIDIAN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func (tc *testCluster) start(i int) {
	tc.t.Helper()
	s, err := New(tc.cfgs[i], testLogger())
	if err != nil {
		tc.t.Fatalf("start server %d: %v", i+1, err)
	}
	s.Serve()
	tc.servers[i] = s
}

func (tc *testCluster) stop(i int) {
	if s := tc.servers[i]; s != nil {
		s.Close()
		tc.servers[i] = nil
	}
}

func (tc *testCluster) closeAll() {
	for i := range tc.servers {
		tc.stop(i)
	}
}

func (tc *testCluster) endpoints() []string {
	var eps []string
	for _, c := range tc.cfgs {
		eps = append(eps, c.Self().GRPC)
	}
	return eps
}

// leader waits for a leader that every running server agrees on.
func (tc *testCluster) leader() int {
	tc.t.Helper()
	return tc.agreedLeader(15*time.Second, "no leader elected", func(s *Server) uint64 { return s.Replica().Status().Leader })
}

// agreedLeader waits up to d until every running server names the same
// running leader by leaderOf, and returns its index; fails with why.
func (tc *testCluster) agreedLeader(d time.Duration, why string, leaderOf func(*Server) uint64) int {
	tc.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var lead uint64
		agree := true
		for _, s := range tc.servers {
			if s == nil {
				continue
			}
			l := leaderOf(s)
			if l == 0 || (lead != 0 && l != lead) {
				agree = false
				break
			}
			lead = l
		}
		if agree && lead != 0 && tc.servers[lead-1] != nil {
			return int(lead - 1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tc.t.Fatal(why)
	return -1
}

// client opens a session trying eps in the order given (these tests place
// clients on chosen servers; nearest-first ordering has its own tests).
func (tc *testCluster) client(eps ...string) *client.Client {
	tc.t.Helper()
	if len(eps) == 0 {
		eps = tc.endpoints()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: eps, SessionTimeout: 2 * time.Second, RequestTimeout: 5 * time.Second, DialTimeout: time.Second,
		KeepEndpointOrder: true, TLS: tc.clientTLS()})
	if err != nil {
		tc.t.Fatalf("client: %v", err)
	}
	tc.t.Cleanup(func() { c.Close() })
	return c
}

// clientTLS is the TLS configuration of a client of this cluster: its dev
// CA and the dev admin client certificate.
func (tc *testCluster) clientTLS() *tls.Config {
	tc.t.Helper()
	if tc.cfgs[0].Insecure {
		return nil
	}
	c, err := client.DevTLS(filepath.Dir(tc.cfgs[0].TLS.CA))
	if err != nil {
		tc.t.Fatal(err)
	}
	return c
}

// proxiedTLS is clientTLS for endpoints that are proxies (testutil.NewProxy
// listens on 127.0.0.2): the servers' certificates name 127.0.0.1.
func (tc *testCluster) proxiedTLS() *tls.Config {
	c := tc.clientTLS()
	c.ServerName = "127.0.0.1"
	return c
}

// httpGet fetches url (https://host:port/path) with the dev CA, as the dev
// admin when admin is set, else with no client certificate.
func (tc *testCluster) httpGet(url string, admin bool) (int, string) {
	tc.t.Helper()
	tlsc := tc.clientTLS()
	if !admin {
		tlsc.Certificates = nil
	}
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsc}}
	defer cl.CloseIdleConnections()
	resp, err := cl.Get(url)
	if err != nil {
		tc.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// dialOptions are those of a raw gRPC connection to this cluster.
func (tc *testCluster) dialOptions() []grpc.DialOption {
	return client.DialOptions(client.Config{TLS: tc.clientTLS()})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestClusterCRUDAndStat(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	c := tc.client()
	cx := ctx(t)

	p, st, err := c.Create(cx, "/app", []byte("v1"), client.CreateOptions{})
	if err != nil || p != "/app" {
		t.Fatalf("create: %q %v", p, err)
	}
	if st.GetCzxid() == 0 || st.GetCzxid() != st.GetMzxid() || st.GetVersion() != 0 {
		t.Fatalf("fresh stat wrong: %+v", st)
	}
	if _, _, err := c.Create(cx, "/app", nil, client.CreateOptions{}); !errors.Is(err, client.ErrNodeExists) {
		t.Fatalf("duplicate create: want ErrNodeExists, got %v", err)
	}
	if _, _, err := c.Create(cx, "/missing/child", nil, client.CreateOptions{}); !errors.Is(err, client.ErrNoNode) {
		t.Fatalf("create without parent: want ErrNoNode, got %v", err)
	}
	if _, _, err := c.Create(cx, "bad//path", nil, client.CreateOptions{}); !errors.Is(err, client.ErrInvalidPath) {
		t.Fatalf("bad path: want ErrInvalidPath, got %v", err)
	}
	if _, _, err := c.Create(cx, "/big", make([]byte, 1048576), client.CreateOptions{}); !errors.Is(err, client.ErrDataTooLarge) {
		t.Fatalf("1 MiB data: want ErrDataTooLarge, got %v", err)
	}
	st2, err := c.Set(cx, "/app", []byte("v2"), 0)
	if err != nil || st2.GetVersion() != 1 || st2.GetMzxid() <= st.GetMzxid() {
		t.Fatalf("set: %+v %v", st2, err)
	}
	if _, err := c.Set(cx, "/app", []byte("v3"), 0); !errors.Is(err, client.ErrBadVersion) {
		t.Fatalf("stale version: want ErrBadVersion, got %v", err)
	}
	s1, _, _ := c.Create(cx, "/app/job-", nil, client.CreateOptions{Mode: client.PersistentSequential})
	s2, _, _ := c.Create(cx, "/app/job-", nil, client.CreateOptions{Mode: client.PersistentSequential})
	if s1 != "/app/job-0000000000" || s2 != "/app/job-0000000001" {
		t.Fatalf("sequential names: %s %s", s1, s2)
	}
	kids, pst, err := c.Children(cx, "/app")
	if err != nil || len(kids) != 2 || pst.GetNumChildren() != 2 || pst.GetCversion() != 2 {
		t.Fatalf("children: %v %+v %v", kids, pst, err)
	}
	if err := c.Delete(cx, "/app", client.AnyVersion); !errors.Is(err, client.ErrNotEmpty) {
		t.Fatalf("delete non-empty: want ErrNotEmpty, got %v", err)
	}
	// Every server, read sequentially after the client's last zxid, agrees.
	for _, ep := range tc.endpoints() {
		cc := tc.client(ep)
		data, _, err := cc.Get(cx, "/app", client.WithConsistency(client.Sequential))
		if err != nil || string(data) != "v2" {
			t.Fatalf("%s: get = %q, %v", ep, data, err)
		}
	}
	// Multi: all or nothing.
	res, err := c.Multi(cx, client.CreateOp("/m1", nil, client.CreateOptions{}), client.CheckOp("/app", 7))
	if !errors.Is(err, client.ErrBadVersion) || len(res) != 2 || res[0].GetErrorCode() != 0 || res[1].GetErrorCode() != -103 {
		t.Fatalf("failed multi: %v %v", res, err)
	}
	if ok, _, _ := c.Exists(cx, "/m1"); ok {
		t.Fatal("failed multi left /m1 behind")
	}
	if _, err := c.Multi(cx, client.CreateOp("/m1", nil, client.CreateOptions{}), client.SetOp("/m1", []byte("x"), 0)); err != nil {
		t.Fatalf("multi: %v", err)
	}
	data, _, err := c.Get(cx, "/m1")
	if err != nil || string(data) != "x" {
		t.Fatalf("after multi: %q %v", data, err)
	}
}

func TestEphemeralsGoWithSession(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	owner := tc.client()
	observer := tc.client()
	cx := ctx(t)
	if _, _, err := owner.Create(cx, "/lock", []byte("me"), client.CreateOptions{Mode: client.Ephemeral}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := owner.Create(cx, "/lock/child", nil, client.CreateOptions{}); !errors.Is(err, client.ErrNoChildrenForEphemerals) {
		t.Fatalf("child of ephemeral: %v", err)
	}
	_, st, ch, err := observer.ExistsW(cx, "/lock")
	if err != nil || st.GetEphemeralOwner() != owner.SessionID() {
		t.Fatalf("exists: %+v %v", st, err)
	}
	owner.Close()
	select {
	case ev := <-ch:
		if ev.Type != client.EventNodeDeleted || ev.Path != "/lock" {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delete event after session close")
	}
}

func TestSessionExpiresWithoutKeepalive(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	lead := tc.leader()
	// Connect to a follower so the expiry is decided by the leader and
	// replicated back, not short-circuited locally.
	follower := (lead + 1) % 3
	c := tc.client(tc.cfgs[follower].Self().GRPC)
	observer := tc.client()
	cx := ctx(t)
	if _, _, err := c.Create(cx, "/e", nil, client.CreateOptions{Mode: client.Ephemeral}); err != nil {
		t.Fatal(err)
	}
	// Kill the client's server: no more keepalives reach anyone for c's only endpoint.
	tc.stop(follower)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		ok, _, err := observer.Exists(cx, "/e")
		if err == nil && !ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("ephemeral of a dead session was never removed")
}

func TestWatchesFireInOrder(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	c := tc.client()
	w := tc.client()
	cx := ctx(t)
	ch, remove, err := w.AddWatch(cx, "/w", true)
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	c.Create(cx, "/w", nil, client.CreateOptions{})
	c.Create(cx, "/w/a", nil, client.CreateOptions{})
	c.Set(cx, "/w/a", []byte("1"), -1)
	c.Delete(cx, "/w/a", -1)
	want := []struct {
		typ  client.EventType
		path string
	}{{client.EventNodeCreated, "/w"}, {client.EventNodeCreated, "/w/a"}, {client.EventNodeDataChanged, "/w/a"}, {client.EventNodeDeleted, "/w/a"}}
	var last int64
	for _, wnt := range want {
		select {
		case ev := <-ch:
			if ev.Type != wnt.typ || ev.Path != wnt.path || ev.Zxid <= last {
				t.Fatalf("got %+v, want %v %s after zxid %d", ev, wnt.typ, wnt.path, last)
			}
			last = ev.Zxid
		case <-time.After(5 * time.Second):
			t.Fatalf("missing event %v %s", wnt.typ, wnt.path)
		}
	}
	// One-shot data watch fires once.
	c.Create(cx, "/once", nil, client.CreateOptions{})
	_, _, once, err := w.GetW(cx, "/once")
	if err != nil {
		t.Fatal(err)
	}
	c.Set(cx, "/once", []byte("a"), -1)
	c.Set(cx, "/once", []byte("b"), -1)
	if ev := <-once; ev.Type != client.EventNodeDataChanged {
		t.Fatalf("one-shot: %+v", ev)
	}
	if _, open := <-once; open {
		t.Fatal("one-shot watch fired twice")
	}
}

// TestLeaderFailover: the leader dies during a stream of writes; every
// acknowledged write is readable afterwards, and the old leader catches up
// when it returns.
func TestLeaderFailover(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.SnapshotEntries = 50 })
	lead := tc.leader()
	c := tc.client()
	cx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, _, err := c.Create(cx, "/f", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	stopWriters := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopWriters:
					return
				default:
				}
				p := fmt.Sprintf("/f/w%d-%d", w, i)
				if _, _, err := c.Create(cx, p, []byte(p), client.CreateOptions{}); err == nil {
					mu.Lock()
					acked[p] = true
					mu.Unlock()
				}
			}
		}(w)
	}
	time.Sleep(500 * time.Millisecond)
	tc.stop(lead)
	time.Sleep(1500 * time.Millisecond)
	close(stopWriters)
	wg.Wait()
	newLead := tc.leader()
	if newLead == lead {
		t.Fatal("stopped server still leader")
	}
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	if n < 20 {
		t.Fatalf("only %d writes acknowledged", n)
	}
	check := func(cl *client.Client, opts ...client.ReadOption) {
		kids, _, err := cl.Children(cx, "/f", opts...)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, k := range kids {
			have["/f/"+k] = true
		}
		for p := range acked {
			if !have[p] {
				t.Fatalf("acknowledged write %s lost", p)
			}
		}
	}
	check(c)
	tc.start(lead)
	// The returning server catches up (through a snapshot: SnapshotEntries is small).
	if err := c.Sync(cx); err != nil {
		t.Fatal(err)
	}
	back := tc.client(tc.cfgs[lead].Self().GRPC)
	deadline := time.Now().Add(20 * time.Second)
	for {
		kids, _, err := back.Children(cx, "/f", client.WithConsistency(client.Linearizable))
		if err == nil && len(kids) >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted server did not catch up: %d children, err %v", len(kids), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	check(back, client.WithConsistency(client.Linearizable))
}

// TestWholeClusterRestart: every acknowledged write survives stopping and
// restarting all servers.
func TestWholeClusterRestart(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.SnapshotEntries = 30 })
	tc.leader()
	c := tc.client()
	cx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 100; i++ {
		if _, _, err := c.Create(cx, fmt.Sprintf("/r%03d", i), []byte{byte(i)}, client.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	tc.closeAll()
	for i := range tc.cfgs {
		tc.start(i)
	}
	tc.leader()
	c2 := tc.client()
	kids, _, err := c2.Children(cx, "/")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range kids {
		if len(k) == 4 && k[0] == 'r' {
			n++
		}
	}
	if n != 100 {
		t.Fatalf("after restart %d of 100 nodes", n)
	}
	for _, ep := range tc.endpoints() {
		cc := tc.client(ep)
		d, _, err := cc.Get(cx, "/r042", client.WithConsistency(client.Sequential))
		if err != nil || len(d) != 1 || d[0] != 42 {
			t.Fatalf("%s: /r042 = %v, %v", ep, d, err)
		}
	}
	if _, _, err := c2.Create(cx, "/after", nil, client.CreateOptions{}); err != nil {
		t.Fatalf("write after restart: %v", err)
	}
}

func TestTransferLeader(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	lead := tc.leader()
	target := uint64((lead+1)%3 + 1)
	c := tc.client()
	if err := c.TransferLeader(ctx(t), target); err != nil {
		t.Fatal(err)
	}
	if got := tc.leader(); uint64(got+1) != target {
		t.Fatalf("leader %d, want %d", got+1, target)
	}
}

// TestWatchSurvivesServerFailure: a client's server dies; the client moves to
// another server with the same session, re-registers its watch, and is told
// of a change made while it was moving.
func TestWatchSurvivesServerFailure(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	cx := ctx(t)
	writer := tc.client(tc.endpoints()[1:]...) // not on the server that will die
	if _, _, err := writer.Create(cx, "/cfg", []byte("v1"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The watcher prefers member 1, then 2, then 3.
	w := tc.client()
	sid := w.SessionID()
	_, _, ch, err := w.GetW(cx, "/cfg")
	if err != nil {
		t.Fatal(err)
	}
	first := w.Endpoint()
	for i, c := range tc.cfgs {
		if c.Self().GRPC == first {
			tc.stop(i)
		}
	}
	// If the dead server led, a write in flight may end "outcome unknown";
	// an unconditional set is safe to repeat.
	for {
		_, err := writer.Set(cx, "/cfg", []byte("v2"), -1)
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrOutcomeUnknown) && !errors.Is(err, client.ErrTimeout) {
			t.Fatal(err)
		}
	}
	select {
	case ev := <-ch:
		if ev.Type != client.EventNodeDataChanged || ev.Path != "/cfg" {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("watch did not fire after failover")
	}
	if w.SessionID() != sid || w.Endpoint() == first {
		t.Fatalf("session %d→%d endpoint %s→%s: want same session on another server", sid, w.SessionID(), first, w.Endpoint())
	}
	// The moved session still works and never reads older data.
	data, _, err := w.Get(cx, "/cfg", client.WithConsistency(client.Sequential))
	if err != nil || string(data) != "v2" {
		t.Fatalf("after failover read %q, %v", data, err)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	ports := freePorts(t, 3)
	tc := newTestCluster(t, 3, func(c *Config) {
		c.ListenHTTP = fmt.Sprintf("127.0.0.1:%d", ports[c.ID-1])
		c.EnablePprof = c.ID == 1
	})
	tc.leader()
	c := tc.client()
	if _, _, err := c.Create(ctx(t), "/m", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	getFrom := func(server int, path string) (int, string) {
		return tc.httpGet(fmt.Sprintf("https://127.0.0.1:%d%s", ports[server-1], path), true)
	}
	get := func(path string) (int, string) { return getFrom(1, path) }
	// Profiles only where enable_pprof is set.
	if code, body := get("/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile") {
		t.Errorf("pprof enabled: goroutine profile %d %.80q", code, body)
	}
	if code, _ := getFrom(2, "/debug/pprof/goroutine?debug=1"); code != 404 {
		t.Errorf("pprof not enabled: goroutine profile answered %d, want 404", code)
	}
	if code, _ := get("/livez"); code != 200 {
		t.Fatalf("livez %d", code)
	}
	// The port speaks TLS only; /status and the profiles need an admin
	// certificate, what a monitoring system scrapes needs none.
	if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/livez", ports[0])); err == nil {
		code := resp.StatusCode
		resp.Body.Close()
		if code == 200 {
			t.Fatal("plaintext HTTP request served")
		}
	}
	anon := func(path string) int {
		code, _ := tc.httpGet(fmt.Sprintf("https://127.0.0.1:%d%s", ports[0], path), false)
		return code
	}
	for path, want := range map[string]int{"/status": 403, "/debug/pprof/goroutine?debug=1": 403, "/livez": 200, "/readyz": 200, "/metrics": 200} {
		if code := anon(path); code != want {
			t.Errorf("%s without a client certificate: %d, want %d", path, code, want)
		}
	}
	if code, body := get("/status"); code != 200 || !strings.Contains(body, `"cluster_id"`) {
		t.Errorf("/status as admin: %d %.120q", code, body)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("readyz %d with a leader", code)
	}
	_, body := get("/metrics")
	for _, m := range []string{"meridian_proposals_total", "meridian_raft_fsync_duration_seconds_count", "meridian_apply_duration_seconds", "meridian_znodes", "meridian_sessions"} {
		if !strings.Contains(body, m) {
			t.Fatalf("/metrics lacks %s", m)
		}
	}
	// A lone survivor has no quorum, hence no leader: not ready.
	tc.stop(1)
	tc.stop(2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := get("/readyz"); code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("readyz stayed 200 without a quorum")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWatchEventBeforeNewData: ZooKeeper's ordering guarantee — a client
// that reads data changed after it set a watch has already been given the
// watch's event when the read returns.
func TestWatchEventBeforeNewData(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	cx := ctx(t)
	writer := tc.client(tc.endpoints()[2])
	watcher := tc.client(tc.endpoints()[0])
	if _, _, err := writer.Create(cx, "/o", []byte("0"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 30; i++ {
		_, _, ch, err := watcher.GetW(cx, "/o", client.WithConsistency(client.Linearizable))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprint(i)
		if _, err := writer.Set(cx, "/o", []byte(want), -1); err != nil {
			t.Fatal(err)
		}
		for {
			data, _, err := watcher.Get(cx, "/o", client.WithConsistency(client.Sequential))
			if err != nil {
				t.Fatal(err)
			}
			if string(data) == want {
				break
			}
		}
		select {
		case ev := <-ch:
			if ev.Type != client.EventNodeDataChanged {
				t.Fatalf("round %d: event %+v", i, ev)
			}
		default:
			t.Fatalf("round %d: read returned the new data before the watch event", i)
		}
	}
}

// TestWatchNotFiredByChangeItsReadShowed: a one-shot watch must fire only
// for a change after the state the read that set it returned. Found by the
// chaos watch checker: the client registered the watch locally before the
// read, so an event for the same path from another registration (here a
// persistent recursive watch of the same session), delivered while the read
// was in flight, fired the new watch for a change the read then showed.
func TestWatchNotFiredByChangeItsReadShowed(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.leader()
	cx := ctx(t)
	writer := tc.client(tc.endpoints()[0])
	watcher := tc.client(tc.endpoints()[0])
	if _, _, err := writer.Create(cx, "/r", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := writer.Create(cx, "/r/k", []byte("0"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec, remove, err := watcher.AddWatch(cx, "/r", true)
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	go func() {
		for range rec {
		}
	}()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := writer.Set(cx, "/r/k", []byte(fmt.Sprint(i)), -1); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for round := 0; round < 200; round++ {
		_, st, ch, err := watcher.GetW(cx, "/r/k")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-ch:
			if ev.Zxid <= st.GetMzxid() {
				t.Fatalf("round %d: watch set on mzxid %d fired for zxid %d, a change its read already showed", round, st.GetMzxid(), ev.Zxid)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: watch never fired", round)
		}
	}
}

// TestWatchNotLostWhileStreamDown: a change made while a client's watch
// stream is down must still be notified, even when the client's other
// requests have meanwhile moved its last zxid past the change. The client
// re-registered its watches relative to that last zxid, so the server took
// the change as seen (found by the chaos watch checker after kill-all:
// "wn's watch on /chaos/kv/k0 was set on mzxid 638 and has not fired").
// Watches are now re-registered relative to what the streams covered.
func TestWatchNotLostWhileStreamDown(t *testing.T) {
	tc, f, watcher, writer := watcherOnFollower(t)
	cx := ctx(t)
	if _, _, err := writer.Create(cx, "/x", []byte("0"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := writer.Create(cx, "/y", []byte("0"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, st, ch, err := watcher.GetW(cx, "/x", client.WithConsistency(client.Linearizable))
	if err != nil {
		t.Fatal(err)
	}
	tc.stop(f)
	if _, err := writer.Set(cx, "/x", []byte("1"), -1); err != nil {
		t.Fatal(err)
	}
	// A linearizable read moves the watcher to another server and its last
	// zxid past the change, typically before its watch stream is back.
	if _, _, err := watcher.Get(cx, "/y", client.WithConsistency(client.Linearizable)); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-ch:
		if ev.Type != client.EventNodeDataChanged || ev.Zxid <= st.GetMzxid() {
			t.Fatalf("event %+v for a watch set on mzxid %d", ev, st.GetMzxid())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the change made while the watch stream was down was never notified")
	}
}

// TestWriteInFlightAtStopIsNotReportedUnapplied: a write raft had accepted
// when its server stopped may still commit, so it must not be answered with
// an error that says it was not applied (ErrStopped, which clients may
// retry: a double write). Found by the chaos suite (seed 40720: a member
// that exited on a full disk answered ErrStopped for a forwarded write that
// committed; porcupine then found a version no known write had made).
func TestWriteInFlightAtStopIsNotReportedUnapplied(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	lead := tc.leader()
	f := (lead + 1) % 3
	s := tc.servers[f]
	type outcome struct {
		path string
		err  error
	}
	out := make(chan outcome, 100000)
	var wg sync.WaitGroup
	var stopped atomic.Bool
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stopped.Load(); i++ {
				p := fmt.Sprintf("/inflight-%d-%d", w, i)
				_, err := s.Submit(context.Background(), treeCommand(&tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: p}})).Wait()
				out <- outcome{p, err}
				if err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // writes flowing
	tc.stop(f)
	stopped.Store(true)
	wg.Wait()
	close(out)
	leader := tc.servers[lead]
	time.Sleep(time.Second) // let everything accepted commit
	var refused, unknown int
	for o := range out {
		if o.err == nil || !errs.Retryable(o.err) {
			unknown++
			continue
		}
		refused++
		leader.mu.RLock()
		_, _, gerr := leader.mu.tree.Get(o.path)
		leader.mu.RUnlock()
		if gerr == nil {
			t.Fatalf("%s was answered %v (not applied) but exists", o.path, o.err)
		}
	}
	t.Logf("%d answered not applied, %d applied or unknown", refused, unknown)
}

// TestEventZxidSeenBeforeDelivery: once a watch event is received, the
// client counts its zxid as seen, so the next read (whatever server serves
// it, after a reconnect say) is at least that new. The client handed the
// event out first and recorded its zxid after, so a read made on receiving
// it could be served older data (the chaos watch checker's "wn: read after
// a deleted event on /chaos/kv/k1 shows no newer data", seed 40467 of the
// long run, kill-all).
func TestEventZxidSeenBeforeDelivery(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.leader()
	cx := ctx(t)
	writer := tc.client(tc.endpoints()[0])
	watcher := tc.client(tc.endpoints()[0])
	if _, _, err := writer.Create(cx, "/e", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 200; round++ {
		_, _, ch, err := watcher.GetW(cx, "/e")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := writer.Set(cx, "/e", []byte(fmt.Sprint(round)), -1); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-ch:
			if seen := watcher.LastZxid(); seen < ev.Zxid {
				t.Fatalf("round %d: event with zxid %d received, but the client's last seen zxid is %d", round, ev.Zxid, seen)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: watch never fired", round)
		}
	}
}

// TestWatchDeletedWhileStreamDownCarriesZxid: a node deleted while a
// client's watch stream was down is notified when the stream is back, and
// that notification carries a zxid at or after the deletion, which the
// client counts as seen. It carried none (-1), so the client's next read
// could go to a server that had not applied the deletion yet and find the
// node there (the chaos watch checker after kill-all: "wn: read after a
// deleted event on /chaos/kv/k2 shows no newer data", seed 60034).
func TestWatchDeletedWhileStreamDownCarriesZxid(t *testing.T) {
	tc, f, watcher, writer := watcherOnFollower(t)
	cx := ctx(t)
	if _, _, err := writer.Create(cx, "/x", []byte("0"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, ch, err := watcher.GetW(cx, "/x", client.WithConsistency(client.Linearizable))
	if err != nil {
		t.Fatal(err)
	}
	tc.stop(f)
	if err := writer.Delete(cx, "/x", -1); err != nil {
		t.Fatal(err)
	}
	deleted := writer.LastZxid()
	select {
	case ev := <-ch:
		if ev.Type != client.EventNodeDeleted || ev.Zxid < deleted {
			t.Fatalf("event %+v for a deletion at zxid %d", ev, deleted)
		}
		if seen := watcher.LastZxid(); seen < deleted {
			t.Fatalf("told of the deletion at %d, the client has seen only %d", deleted, seen)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the deletion made while the watch stream was down was never notified")
	}
}

// watcherOnFollower starts a 3-server cluster and two clients: a watcher
// whose first server is follower f (the tests then stop it) and a writer
// on the leader.
func watcherOnFollower(t *testing.T) (tc *testCluster, f int, watcher, writer *client.Client) {
	tc = newTestCluster(t, 3, nil)
	lead := tc.leader()
	f = (lead + 1) % 3
	eps := tc.endpoints()
	return tc, f, tc.client(eps[f], eps[(f+1)%3], eps[(f+2)%3]), tc.client(eps[lead])
}
