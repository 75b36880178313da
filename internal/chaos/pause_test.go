package chaos

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/client"
)

// startCluster builds the server binary and starts a cluster of real
// processes for one test (cfg's Binary, Dir and Logf are filled in); it is
// closed when the test ends. Skipped with -short.
func startCluster(t *testing.T, cfg ClusterConfig) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("real processes")
	}
	bin, err := BuildServer(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Binary, cfg.Dir, cfg.Logf = bin, t.TempDir(), t.Logf
	cl, err := NewCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestPausedServerClientKeepsSession is the regression test for a liveness
// bug the chaos suite found (pause-follower scenarios): a client connected to
// a SIGSTOPped server kept sending keepalives into the open but silent
// connection, never moved to another server, and lost its session. Its
// keepalive now leaves a server that does not answer in time.
func TestPausedServerClientKeepsSession(t *testing.T) {
	cl := startCluster(t, ClusterConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader, err := cl.Leader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f := leader%3 + 1 // a follower
	c, err := client.New(ctx, client.Config{Endpoints: cl.Endpoints(int(f - 1)), SessionTimeout: clientSession, DialTimeout: time.Second, KeepEndpointOrder: true, TLS: cl.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Endpoint() != cl.Nodes[f-1].GRPC {
		t.Fatalf("client on %s, want follower %d (%s)", c.Endpoint(), f, cl.Nodes[f-1].GRPC)
	}
	sess := c.SessionID()
	cl.Pause(f)
	time.Sleep(3 * clientSession)
	cl.Resume(f)
	// An ephemeral create needs the session alive (a read would not). A
	// leader change while it is in flight leaves its outcome unknown; then
	// it is retried, and NodeExists means the first one was applied.
	for {
		_, _, err := c.Create(ctx, "/after-pause", nil, client.CreateOptions{Mode: client.Ephemeral})
		if err == nil || (errors.Is(err, client.ErrNodeExists)) {
			break
		}
		if !errors.Is(err, client.ErrOutcomeUnknown) && !errors.Is(err, client.ErrConnectionLoss) {
			t.Fatalf("after a %v pause of its server (session timeout %v): %v", 3*clientSession, clientSession, err)
		}
	}
	if c.SessionID() != sess {
		t.Fatalf("session changed")
	}
	if c.Endpoint() == cl.Nodes[f-1].GRPC {
		t.Fatalf("client did not move off the paused server")
	}
}
