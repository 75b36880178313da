package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/fsm"
	"github.com/meridian-coord/meridian/internal/pki"
)

// TestDashboardAccess: the dashboard answers an admin and a monitor
// (monitor_subjects) and refuses anyone else; a monitor gets the
// dashboard only, not /status or the profiles; with
// dashboard_open_on_loopback a caller on loopback needs no certificate
// for the dashboard, and still does for /status. Nothing is writable.
func TestDashboardAccess(t *testing.T) {
	ports := freePorts(t, 3)
	tc := newTestCluster(t, 3, func(c *Config) {
		c.ListenHTTP = fmt.Sprintf("127.0.0.1:%d", ports[c.ID-1])
		c.MonitorSubjects = []string{"CN=watcher,O=ops"}
		c.EnablePprof = true
		c.DashboardOpenOnLoopback = c.ID == 2
	})
	tc.leader()
	ca, err := pki.LoadCA(filepath.Dir(tc.cfgs[0].TLS.CA))
	if err != nil {
		t.Fatal(err)
	}
	certOf := func(name, org string) []tls.Certificate {
		leaf, err := ca.IssueClient(name, org)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{leaf.TLSCertificate()}
	}
	admin := tc.clientTLS().Certificates
	who := map[string][]tls.Certificate{"admin": admin, "monitor": certOf("watcher", "ops"),
		"stranger": certOf("stranger", ""), "nobody": nil}
	do := func(server int, as, method, path string) (int, http.Header, string) {
		t.Helper()
		tlsc := tc.clientTLS()
		tlsc.Certificates = who[as]
		cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsc}}
		defer cl.CloseIdleConnections()
		req, _ := http.NewRequest(method, fmt.Sprintf("https://127.0.0.1:%d%s", ports[server-1], path), nil)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	dashboard := []string{"/", "/dashboard/state", "/dashboard/app.js", "/dashboard/app.css"}
	for _, c := range []struct {
		server int
		as     string
		paths  []string
		want   int
	}{
		{1, "admin", dashboard, 200},
		{1, "admin", []string{"/status"}, 200},
		{1, "monitor", dashboard, 200},
		{1, "monitor", []string{"/status", "/debug/pprof/goroutine?debug=1"}, 403},
		{1, "stranger", append(dashboard, "/status"), 403},
		{1, "nobody", append(dashboard, "/status"), 403},
		{2, "nobody", dashboard, 200},
		{2, "nobody", []string{"/status", "/debug/pprof/goroutine?debug=1"}, 403},
		{2, "stranger", dashboard, 200},
		{1, "admin", []string{"/nothing-here", "/dashboard/", "/dashboard/nothing"}, 404},
	} {
		for _, p := range c.paths {
			if code, _, body := do(c.server, c.as, "GET", p); code != c.want {
				t.Errorf("server %d, %s, GET %s: %d, want %d (%.100q)", c.server, c.as, p, code, c.want, body)
			}
		}
	}
	// Read-only: no method but GET (and HEAD) is answered.
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		for _, p := range dashboard {
			if code, _, _ := do(1, "admin", m, p); code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s as admin: %d, want 405", m, p, code)
			}
		}
	}
	code, h, body := do(1, "monitor", "GET", "/")
	if code != 200 || !strings.Contains(body, `<script src="/dashboard/app.js"`) || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %s %.200q", code, h.Get("Content-Type"), body)
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("page's Content-Security-Policy %q: want nothing but this server", csp)
	}
	if strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Errorf("the page names another site:\n%s", body)
	}
}

// TestDashboardState: /dashboard/state shows the members by region and
// zone with the leader, the measured round trips, the leader history, the
// keyspaces with their homes, locks with holders' tokens and waiters,
// queues, barriers and the counts, and says how many there are when it
// lists the first ones only.
func TestDashboardState(t *testing.T) {
	ports := freePorts(t, 4)
	region := map[uint64]string{1: "eu", 2: "eu", 3: "eu", 4: "us"}
	zone := map[uint64]string{1: "eu-a", 2: "eu-b", 3: "eu-c", 4: "us-a"}
	tc := newTestCluster(t, 4, func(c *Config) {
		c.ListenHTTP = fmt.Sprintf("127.0.0.1:%d", ports[c.ID-1])
		c.Members = slices.Clone(c.Members)
		for i, m := range c.Members {
			c.Members[i].Region, c.Members[i].Zone = region[m.ID], zone[m.ID]
		}
	})
	lead := tc.leader()
	tc.keyspace("/x", "eu", fsm.SurvivalZone)
	holder, waiter := tc.client(), tc.client()
	c := ctx(t)
	lease, err := holder.Lock(c, "jobs/lock", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go waiter.Lock(context.Background(), "jobs/lock", client.LockOptions{})
	for i := 0; i < 3; i++ {
		if _, err := holder.Queue("work").Push(c, []byte("item")); err != nil {
			t.Fatal(err)
		}
	}
	if err := holder.Barrier("gate").Set(c); err != nil {
		t.Fatal(err)
	}
	// Beyond what a listing shows: the first dashboardListed queues.
	for i := 0; i < dashboardListed+5; i++ {
		if _, err := holder.Queue(fmt.Sprintf("zz-%03d", i)).Push(c, nil); err != nil {
			t.Fatal(err)
		}
	}
	var st dashState
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := tc.httpGet(fmt.Sprintf("https://127.0.0.1:%d/dashboard/state", ports[lead]), true)
		if code != 200 {
			t.Fatalf("state: %d %s", code, body)
		}
		st = dashState{}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Locks.Items) == 1 && len(st.Locks.Items[0].Waiters) == 1 && len(st.RTT.Rows) == 4 && len(st.RTT.Rows[1]) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state never showed the waiter and every member's round trips: %s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st.Member != uint64(lead+1) || st.Leader != uint64(lead+1) || len(st.Members) != 4 {
		t.Fatalf("member %d, leader %d, members %+v", st.Member, st.Leader, st.Members)
	}
	for _, m := range st.Members {
		want := region[m.ID] + "/" + zone[m.ID]
		if m.Region+"/"+m.Zone != want || m.Role != "voter" || m.Leader != (m.ID == st.Leader) || m.Self != (m.ID == st.Member) {
			t.Errorf("member %+v: want %s, voter, leader iff %d", m, want, st.Leader)
		}
	}
	for from, row := range st.RTT.Rows {
		for to, us := range row {
			if from == to || us <= 0 || us > 1e6 {
				t.Errorf("round trip %d→%d: %d µs", from, to, us)
			}
		}
	}
	if len(st.Leaders) == 0 || st.Leaders[len(st.Leaders)-1].To == 0 {
		t.Errorf("leader history %+v: want the root's first leader at least", st.Leaders)
	}
	var rootSeen, ksSeen bool
	for _, h := range st.Leaders {
		rootSeen = rootSeen || (h.Keyspace == "/" && h.Region != "")
		ksSeen = ksSeen || h.Keyspace == "/x"
	}
	if !rootSeen || !ksSeen {
		t.Errorf("leader history %+v: want the root's and /x's leaders with their regions", st.Leaders)
	}
	if len(st.Keyspaces) != 1 || st.Keyspaces[0].Prefix != "/x" || st.Keyspaces[0].Home != "eu" || len(st.Keyspaces[0].Voters) == 0 {
		t.Errorf("keyspaces %+v: want /x at home in eu", st.Keyspaces)
	}
	l := st.Locks.Items[0]
	if l.Name != "jobs/lock" || len(l.Holders) != 1 || l.Holders[0].Token != lease.Token ||
		l.Holders[0].Session != fmt.Sprintf("0x%x", holder.SessionID()) || l.Waiters[0].Session != fmt.Sprintf("0x%x", waiter.SessionID()) {
		t.Errorf("lock %+v: want held by 0x%x with token %d, 0x%x waiting", l, holder.SessionID(), lease.Token, waiter.SessionID())
	}
	if st.Queues.Total != dashboardListed+6 || len(st.Queues.Items) != dashboardListed || st.Queues.Items[0].Name != "work" || st.Queues.Items[0].Ready != 3 {
		t.Errorf("queues: %d listed of %d, first %+v", len(st.Queues.Items), st.Queues.Total, st.Queues.Items[0])
	}
	if st.Barriers.Total != 1 || len(st.Barriers.Items) != 1 || st.Barriers.Items[0] != "gate" {
		t.Errorf("barriers %+v", st.Barriers)
	}
	if st.Counts.Sessions < 2 || st.Counts.Locks != 1 || st.Counts.Queues != dashboardListed+6 || st.Counts.Znodes < 2 {
		t.Errorf("counts %+v", st.Counts)
	}
}

// TestLeaderHistory: a change is recorded when a group's leader becomes
// another member, at most leaderHistoryPerGroup per group, newest first.
func TestLeaderHistory(t *testing.T) {
	var h leaderHistory
	at := time.Unix(0, 0)
	h.record(0, 1, 1, at)
	h.record(0, 0, 2, at) // an election: no leader known
	h.record(0, 1, 2, at) // the same leader again: not a change
	h.record(7, 2, 1, at)
	if got := h.all(); len(got) != 2 || got[0].Group != 7 || got[1].From != 0 || got[1].To != 1 {
		t.Fatalf("history %+v", got)
	}
	for i := 0; i < 3*leaderHistoryPerGroup; i++ {
		h.record(0, uint64(2+i%2), uint64(3+i), at)
	}
	got := h.all()
	if len(got) != leaderHistoryPerGroup+1 || got[0].Term != uint64(2+3*leaderHistoryPerGroup) {
		t.Fatalf("%d remembered, newest %+v", len(got), got[0])
	}
	h.forget(7)
	if got := h.all(); len(got) != leaderHistoryPerGroup {
		t.Fatalf("after forgetting group 7: %d", len(got))
	}
}

// TestDashboardLoopbackOnlyOnLoopback: an open dashboard is refused
// unless the HTTP port listens on loopback only.
func TestDashboardLoopbackOnlyOnLoopback(t *testing.T) {
	base := Config{ID: 1, DataDir: t.TempDir(), Insecure: true,
		Members: []Member{{ID: 1, Peer: "127.0.0.1:1", GRPC: "127.0.0.1:2"}}, DashboardOpenOnLoopback: true}
	for listen, ok := range map[string]bool{"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:8080": true,
		"0.0.0.0:8080": false, ":8080": false, "10.1.2.3:8080": false, "": false} {
		c := base
		c.ListenHTTP = listen
		if err := c.Normalize(); (err == nil) != ok {
			t.Errorf("listen_http %q with dashboard_open_on_loopback: %v, want accepted %v", listen, err, ok)
		}
	}
	c := base
	c.DashboardOpenOnLoopback, c.MonitorSubjects = false, []string{" "}
	if err := c.Normalize(); err == nil {
		t.Error("an empty monitor subject accepted")
	}
}
