package server

import (
	"context"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/client"
	"github.com/meridian-coord/meridian/internal/testutil"
)

// The client measures every endpoint, keeps its session on the nearest,
// and fails over to the next nearest.
func TestClientPrefersNearestServer(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	// The nearest is a follower, so stopping it below costs no election
	// (which could make the next nearest refuse the session for a moment).
	l := tc.leader()
	nearIdx, farIdx := (l+1)%3, (l+2)%3
	// Wide margins: under the race detector on 2 busy cores a loopback
	// Status call has been seen to take more than 20 ms (min of 3 samples),
	// which ranked the unproxied server behind a 10 ms proxy.
	far := testutil.NewProxy(t, tc.servers[farIdx].GRPCAddr(), 100*time.Millisecond)
	mid := testutil.NewProxy(t, tc.servers[l].GRPCAddr(), 40*time.Millisecond)
	near := tc.servers[nearIdx].GRPCAddr()
	c, err := client.New(ctx(t), client.Config{Endpoints: []string{far.Addr, mid.Addr, near}, TLS: tc.proxiedTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Endpoint(); got != near {
		t.Fatalf("session on %s, want the nearest %s (measured %v)", got, near, c.EndpointRTTs())
	}
	rtt := c.EndpointRTTs()
	if len(rtt) != 3 || rtt[far.Addr] < 200*time.Millisecond || rtt[mid.Addr] < 80*time.Millisecond ||
		!(rtt[near] < rtt[mid.Addr] && rtt[mid.Addr] < rtt[far.Addr]) {
		t.Fatalf("measured %v", rtt)
	}
	if _, _, err := c.Create(ctx(t), "/n", []byte("x"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.stop(nearIdx)
	if _, err := c.Set(ctx(t), "/n", []byte("y"), -1); err != nil && !isUnknownOutcome(err) {
		t.Fatal(err)
	}
	if _, _, err := c.Get(ctx(t), "/n"); err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoint(); got != mid.Addr {
		t.Fatalf("failed over to %s, want the next nearest %s", got, mid.Addr)
	}

	// KeepEndpointOrder: the order given, nearest or not.
	c2, err := client.New(ctx(t), client.Config{Endpoints: []string{far.Addr, mid.Addr}, KeepEndpointOrder: true, TLS: tc.proxiedTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got := c2.Endpoint(); got != far.Addr || len(c2.EndpointRTTs()) != 0 {
		t.Fatalf("KeepEndpointOrder: on %s, rtts %v", got, c2.EndpointRTTs())
	}
}

func isUnknownOutcome(err error) bool {
	return err == client.ErrOutcomeUnknown || err == client.ErrConnectionLoss
}

// A hedged sequential read is answered by the second-nearest server while
// the session's server is stalled; without the hedge, or while the client
// holds a watch, the read waits on the stalled server.
func TestHedgedReadSurvivesAStalledServer(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	p0 := testutil.NewProxy(t, tc.servers[0].GRPCAddr(), 0)
	p1 := testutil.NewProxy(t, tc.servers[1].GRPCAddr(), 5*time.Millisecond)
	c, err := client.New(ctx(t), client.Config{Endpoints: []string{p1.Addr, p0.Addr}, SessionTimeout: 30 * time.Second, TLS: tc.proxiedTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Endpoint() != p0.Addr {
		t.Fatalf("session on %s, want %s", c.Endpoint(), p0.Addr)
	}
	if _, _, err := c.Create(ctx(t), "/h", []byte("v"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	seq := client.WithConsistency(client.Sequential)
	short := func(d time.Duration) context.Context {
		cx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return cx
	}

	p0.Stall(true)
	data, _, err := c.Get(short(3*time.Second), "/h", seq, client.WithHedge())
	if err != nil || string(data) != "v" {
		t.Fatalf("hedged read with the session's server stalled: %q %v", data, err)
	}
	if _, _, err := c.Get(short(300*time.Millisecond), "/h", seq); err == nil {
		t.Fatal("an unhedged read was answered by a stalled server")
	}
	if _, _, err := c.Get(short(300*time.Millisecond), "/h", client.WithHedge()); err == nil {
		t.Fatal("a linearizable read was hedged")
	}
	p0.Stall(false)

	if _, _, _, err := c.GetW(ctx(t), "/h"); err != nil {
		t.Fatal(err)
	}
	p0.Stall(true)
	if _, _, err := c.Get(short(300*time.Millisecond), "/h", seq, client.WithHedge()); err == nil {
		t.Fatal("a read was hedged while the client holds a watch")
	}
	p0.Stall(false)
}
