package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/errs"
)

// nativeSets is how many native SetData calls server i answered with ok.
func (tc *testCluster) nativeSets(i int) float64 {
	var m dto.Metric
	tc.servers[i].metrics.requests.WithLabelValues("SetData", "ok").Write(&m)
	return m.GetCounter().GetValue()
}

// sessionOn opens a session on server f with every other server as a
// further endpoint, as a user configures a client.
func (tc *testCluster) sessionOn(f int) *client.Client {
	tc.t.Helper()
	eps := []string{tc.cfgs[f].Self().GRPC}
	for i, c := range tc.cfgs {
		if i != f {
			eps = append(eps, c.Self().GRPC)
		}
	}
	c := tc.client(eps...)
	if got := c.Endpoint(); got != eps[0] {
		tc.t.Fatalf("session on %s, want %s", got, eps[0])
	}
	return c
}

// routedTo writes path until a write lands on server i (the client decides
// its route in the background after its first write), and fails after d.
func routedTo(t *testing.T, tc *testCluster, c *client.Client, i int, path string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		before := tc.nativeSets(i)
		if _, err := c.Set(ctx(t), path, []byte("probe"), -1); err != nil && !isUnknownOutcome(err) && !errors.Is(err, errs.ErrConnectionLoss) {
			t.Fatal(err)
		}
		if tc.nativeSets(i) > before {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("writes never reached server %d", i+1)
}

// followerSession is a three-server cluster, its leader l, a follower f
// and a client whose session is on f (every server its endpoint) that
// created /r.
func followerSession(t *testing.T) (tc *testCluster, l, f int, c *client.Client) {
	t.Helper()
	tc = newTestCluster(t, 3, nil)
	l = tc.leader()
	f = (l + 1) % 3
	c = tc.sessionOn(f)
	if _, _, err := c.Create(ctx(t), "/r", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return tc, l, f, c
}

// A client whose session is on a follower sends its writes straight to the
// leader, another of its endpoints in the same region; reads stay on the
// follower and see every write the client made. While it holds a watch its
// writes go through the follower again (only the session's server orders a
// reply after the notifications before it), and after the watch is
// removed they go to the leader again.
func TestWritesGoStraightToTheLeader(t *testing.T) {
	tc, l, f, c := followerSession(t)
	routedTo(t, tc, c, l, "/r", 10*time.Second)

	leaderBefore, followerBefore := tc.nativeSets(l), tc.nativeSets(f)
	const n = 20
	for i := 0; i < n; i++ {
		want := fmt.Sprint(i)
		if _, err := c.Set(ctx(t), "/r", []byte(want), -1); err != nil {
			t.Fatal(err)
		}
		got, _, err := c.Get(ctx(t), "/r", client.WithConsistency(client.Sequential))
		if err != nil || string(got) != want {
			t.Fatalf("read after write %d on the session's server: %q, %v", i, got, err)
		}
	}
	if dl, df := tc.nativeSets(l)-leaderBefore, tc.nativeSets(f)-followerBefore; dl != n || df != 0 {
		t.Fatalf("%d writes: leader answered %v, the session's server %v; want %d and 0", n, dl, df, n)
	}
	if got, want := c.Endpoint(), tc.cfgs[f].Self().GRPC; got != want {
		t.Fatalf("session moved to %s", got)
	}

	events, remove, err := c.AddWatch(ctx(t), "/w", false)
	if err != nil {
		t.Fatal(err)
	}
	leaderBefore, followerBefore = tc.nativeSets(l), tc.nativeSets(f)
	for i := 0; i < 5; i++ {
		if _, err := c.Set(ctx(t), "/r", []byte("w"), -1); err != nil {
			t.Fatal(err)
		}
	}
	if dl, df := tc.nativeSets(l)-leaderBefore, tc.nativeSets(f)-followerBefore; dl != 0 || df != 5 {
		t.Fatalf("with a watch: leader answered %v writes, the session's server %v; want 0 and 5", dl, df)
	}
	if _, _, err := c.Create(ctx(t), "/w", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.Path != "/w" {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event for /w")
	}
	remove()
	leaderBefore = tc.nativeSets(l)
	if _, err := c.Set(ctx(t), "/r", []byte("x"), -1); err != nil {
		t.Fatal(err)
	}
	if tc.nativeSets(l) != leaderBefore+1 {
		t.Fatal("after the watch was removed, the write did not go to the leader")
	}
}

// A leader answering more writes at once than routedWriteLimit asks the
// clients that route writes to it to send them through their own servers:
// the client does for a few seconds (client.RouteHold), then routes them
// to the leader again.
func TestBusyLeaderSendsWritesBackToTheSession(t *testing.T) {
	tc, l, f, c := followerSession(t)
	def := routedWriteLimit.Load()
	t.Cleanup(func() { routedWriteLimit.Store(def) })
	routedWriteLimit.Store(0) // every write the leader answers is past the limit
	routedTo(t, tc, c, l, "/r", 10*time.Second)

	leaderBefore, followerBefore := tc.nativeSets(l), tc.nativeSets(f)
	const n = 10
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := c.Set(ctx(t), "/r", []byte(fmt.Sprint(i)), -1); err != nil {
			t.Fatal(err)
		}
	}
	// Each write that reaches the busy leader holds the next ones off for
	// at least RouteHold/2.
	most := float64(time.Since(start) / (client.RouteHold / 2))
	if dl, df := tc.nativeSets(l)-leaderBefore, tc.nativeSets(f)-followerBefore; dl > most || dl+df != n {
		t.Fatalf("leader busy: it answered %v writes, the session's server %v; want at most %v and the rest of %d", dl, df, most, n)
	}

	routedWriteLimit.Store(def)
	routedTo(t, tc, c, l, "/r", 2*client.RouteHold)
	leaderBefore = tc.nativeSets(l)
	for i := 0; i < n; i++ {
		if _, err := c.Set(ctx(t), "/r", []byte("x"), -1); err != nil {
			t.Fatal(err)
		}
	}
	if dl := tc.nativeSets(l) - leaderBefore; dl != n {
		t.Fatalf("leader no longer busy: it answered %v of %d writes", dl, n)
	}
}

// A leader in another region than the session's server answers no writes
// of the client: they go through the server near it.
func TestWritesStayWhenTheLeaderIsInAnotherRegion(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		for i := range c.Members {
			c.Members[i].Region = fmt.Sprintf("r%d", i+1)
		}
	})
	l := tc.leader()
	f := (l + 1) % 3
	c := tc.sessionOn(f)
	if _, _, err := c.Create(ctx(t), "/r", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the route decided in the background
	leaderBefore, followerBefore := tc.nativeSets(l), tc.nativeSets(f)
	for i := 0; i < 10; i++ {
		if _, err := c.Set(ctx(t), "/r", []byte("x"), -1); err != nil {
			t.Fatal(err)
		}
	}
	if dl, df := tc.nativeSets(l)-leaderBefore, tc.nativeSets(f)-followerBefore; dl != 0 || df != 10 {
		t.Fatalf("leader answered %v writes, the session's server %v; want 0 and 10", dl, df)
	}
}

// When the leader a client writes to stops, the write in flight fails
// with an unknown outcome (as on the session's server), the next ones go
// through the session's server, and once another leader is elected they
// go straight to it (unless the session's server is that leader).
func TestWritesFollowANewLeader(t *testing.T) {
	tc, l, _, c := followerSession(t)
	routedTo(t, tc, c, l, "/r", 10*time.Second)
	tc.stop(l)
	l2 := tc.leader()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err = c.Set(ctx(t), "/r", []byte("after"), -1); err == nil {
			break
		}
		if !isUnknownOutcome(err) && !errors.Is(err, errs.ErrConnectionLoss) {
			t.Fatal(err)
		}
	}
	if err != nil {
		t.Fatalf("no write succeeded after the leader stopped: %v", err)
	}
	routedTo(t, tc, c, l2, "/r", 10*time.Second)
	if got, _, err := c.Get(ctx(t), "/r", client.WithConsistency(client.Sequential)); err != nil || string(got) != "probe" {
		t.Fatalf("read after the writes: %q, %v", got, err)
	}
}

// A client that stops writing closes its connection to the leader after
// WriteRouteIdle; its next write goes through the session's server and
// later ones to the leader again. With WritesThroughSession no write goes
// to the leader and no connection is opened to it.
func TestLeaderConnectionClosedWhenIdle(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	f := (l + 1) % 3
	open := func(through bool) *client.Client {
		eps := []string{tc.cfgs[f].Self().GRPC, tc.cfgs[l].Self().GRPC}
		c, err := client.New(ctx(t), client.Config{Endpoints: eps, KeepEndpointOrder: true, TLS: tc.clientTLS(),
			SessionTimeout: 2 * time.Second, DialTimeout: time.Second, RequestTimeout: 500 * time.Millisecond,
			WriteRouteIdle: 300 * time.Millisecond, WritesThroughSession: through})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	conns := func() int { return tc.servers[l].wire.Conns() }
	// Until conns() settles at want (connections close asynchronously).
	waitConns := func(want int, why string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for conns() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the leader serves %d native connections, want %d", why, conns(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	base := conns()

	c := open(false)
	if _, _, err := c.Create(ctx(t), "/idle", nil, client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	routedTo(t, tc, c, l, "/idle", 10*time.Second)
	if conns() != base+1 {
		t.Fatalf("routed: the leader serves %d native connections, want %d", conns(), base+1)
	}
	// Idle past WriteRouteIdle, then the next keepalive (every 0.67 s)
	// and RequestTimeout's grace: closed.
	waitConns(base, "idle")
	leaderBefore, followerBefore := tc.nativeSets(l), tc.nativeSets(f)
	if _, err := c.Set(ctx(t), "/idle", []byte("x"), -1); err != nil {
		t.Fatal(err)
	}
	if dl, df := tc.nativeSets(l)-leaderBefore, tc.nativeSets(f)-followerBefore; dl != 0 || df != 1 {
		t.Fatalf("first write after the idle close: leader %v, session's server %v; want 0 and 1", dl, df)
	}
	routedTo(t, tc, c, l, "/idle", 10*time.Second)
	c.Close()
	waitConns(base, "closed")

	c = open(true)
	leaderBefore, followerBefore = tc.nativeSets(l), tc.nativeSets(f)
	for i := 0; i < 10; i++ {
		if _, err := c.Set(context.Background(), "/idle", []byte("y"), -1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if dl, df := tc.nativeSets(l)-leaderBefore, tc.nativeSets(f)-followerBefore; dl != 0 || df != 10 {
		t.Fatalf("WritesThroughSession: leader %v, session's server %v; want 0 and 10", dl, df)
	}
	if conns() != base {
		t.Fatalf("WritesThroughSession: the leader serves %d native connections, want %d", conns(), base)
	}
}
