package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	dto "github.com/prometheus/client_model/go"

	"github.com/meridian-coord/meridian/internal/errs"
	zk "github.com/meridian-coord/meridian/internal/zkproto"
)

// replyOnSocket serves one real loopback connection with the listener's
// connection code (its writer, reply and close) on server s, queues a
// successful reply to xid 1 (a getData) and then the reply to xid 2 (a
// create) failing with err, and returns the client's end.
func replyOnSocket(t *testing.T, s *Server, err error) (net.Conn, *zkConn) {
	t.Helper()
	ln, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		t.Fatal(lerr)
	}
	defer ln.Close()
	cli, derr := net.Dial("tcp", ln.Addr().String())
	if derr != nil {
		t.Fatal(derr)
	}
	t.Cleanup(func() { cli.Close() })
	srv, aerr := ln.Accept()
	if aerr != nil {
		t.Fatal(aerr)
	}
	c := &zkConn{l: s.zk, s: s, c: srv, signal: make(chan struct{}, 1), wrote: make(chan struct{}, 1), done: make(chan struct{}),
		tail: closedChan, slots: make(chan struct{}, zkPipelineDepth), readerDone: make(chan struct{}), session: 0x42}
	close(c.readerDone) // no reader here: nothing to linger for
	s.wg.Add(1)
	go c.writeLoop()
	t.Cleanup(func() { c.close("test done") })
	c.reply(zk.RequestHeader{Xid: 1, Type: zk.OpGetData}, 7, nil, nil)
	c.reply(zk.RequestHeader{Xid: 2, Type: zk.OpCreate}, 0, err, nil)
	return cli, c
}

// TestZKConnectionLossClosesInsteadOfReplying: for every error that means
// "cannot serve now" or "outcome unknown" the listener closes the
// connection after the replies queued before it, and sends no -4 or -7;
// for a definite error it replies with the error's code and keeps the
// connection.
func TestZKConnectionLossClosesInsteadOfReplying(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.leader()
	s := tc.servers[0]
	closed := func() float64 {
		var m dto.Metric
		s.metrics.requests.WithLabelValues("zk:create", "connection_closed").Write(&m)
		return m.GetCounter().GetValue()
	}

	lossy := []error{errs.ErrNotLeader, errs.ErrUnavailable, errs.ErrOutcomeUnknown, errs.ErrStopped,
		errs.ErrConnectionLoss, errs.ErrTimeout, fmt.Errorf("propose: %w", errs.ErrOutcomeUnknown)}
	for _, err := range lossy {
		before := closed()
		cli, _ := replyOnSocket(t, s, err)
		if h := rawReply(t, cli, nil); h.Xid != 1 || h.Err != 0 || h.Zxid != 7 {
			t.Fatalf("%v: the earlier request's reply: %+v", err, h)
		}
		cli.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, rerr := cli.Read(make([]byte, 1)); n != 0 || !errors.Is(rerr, io.EOF) {
			t.Fatalf("%v: want the connection closed (EOF) instead of a reply, got %d bytes, %v", err, n, rerr)
		}
		if closed() != before+1 {
			t.Fatalf("%v: connection loss not counted", err)
		}
	}

	definite := []error{errs.ErrNoNode, errs.ErrBadVersion, errs.ErrNodeExists, errs.ErrNotEmpty, errs.ErrNoAuth,
		errs.ErrNotReadOnly, errs.ErrThrottled, errs.ErrSessionExpired}
	for _, err := range definite {
		cli, c := replyOnSocket(t, s, err)
		if h := rawReply(t, cli, nil); h.Xid != 1 || h.Err != 0 {
			t.Fatalf("%v: the earlier request's reply: %+v", err, h)
		}
		if h := rawReply(t, cli, nil); h.Xid != 2 || h.Err != errs.ZKCode(err) {
			t.Fatalf("%v: want a reply with code %d, got %+v", err, errs.ZKCode(err), h)
		}
		c.reply(zk.RequestHeader{Xid: 3, Type: zk.OpGetData}, 0, nil, nil) // still open
		if h := rawReply(t, cli, nil); h.Xid != 3 || h.Err != 0 {
			t.Fatalf("%v: connection not kept: %+v", err, h)
		}
	}
}

// TestZKOutcomeUnknownIsConnectionLoss: a go-zookeeper client whose write
// cannot be committed (both followers of a 3-member cluster stopped) sees
// the connection closed, as with ZooKeeper, not "unknown error: -4"; once
// the followers are back it reconnects and goes on with the same session.
// On the plain port and on the TLS port (where the end of stream is a TLS
// close_notify).
func TestZKOutcomeUnknownIsConnectionLoss(t *testing.T) {
	t.Run("plain", func(t *testing.T) { outcomeUnknownIsConnectionLoss(t, false) })
	t.Run("tls", func(t *testing.T) { outcomeUnknownIsConnectionLoss(t, true) })
}

func outcomeUnknownIsConnectionLoss(t *testing.T, useTLS bool) {
	var dir string
	var pool *x509.CertPool
	var ports []int
	if useTLS {
		dir, pool = testPKI(t)
		ports = freePorts(t, 3)
	}
	// Long sessions: the client keeps its session through the outage.
	tc := newTestCluster(t, 3, func(c *Config) {
		c.SessionTickMs = 1000
		if useTLS {
			c.ZKSecureListen = "127.0.0.1:" + strconv.Itoa(ports[c.ID-1])
			c.ZKTLSCert, c.ZKTLSKey = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
			c.ZKTLSClientCA = filepath.Join(dir, "ca.pem")
		}
	})
	lead := tc.leader()
	addr := tc.zkAddrs()[lead]
	dial := gozk.Dialer(net.DialTimeout)
	if useTLS {
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		addr = "127.0.0.1:" + strconv.Itoa(ports[lead])
		dial = func(network, addr string, timeout time.Duration) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, addr,
				&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}})
		}
	}
	conn, events, err := gozk.Connect([]string{addr}, 15*time.Second, gozk.WithDialer(dial), gozk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	awaitState := func(want gozk.State) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for conn.State() != want {
			select {
			case <-events:
			case <-deadline:
				t.Fatalf("state %v, want %v", conn.State(), want)
			}
		}
	}
	awaitState(gozk.StateHasSession)
	sid := conn.SessionID()
	acl := gozk.WorldACL(gozk.PermAll)
	if _, err := conn.Create("/before", []byte("x"), 0, acl); err != nil {
		t.Fatal(err)
	}

	var followers []int
	for i := range tc.servers {
		if i != lead {
			followers = append(followers, i)
			tc.stop(i)
		}
	}
	// The leader cannot commit: the outcome of this write is unknown to
	// it (or it stepped down and cannot serve): connection loss.
	_, err = conn.Create("/lost", []byte("y"), 0, acl)
	if !errors.Is(err, gozk.ErrConnectionClosed) {
		t.Fatalf("write without a quorum: %v, want %v (connection loss)", err, gozk.ErrConnectionClosed)
	}
	for _, i := range followers {
		tc.start(i)
	}
	tc.leader()
	awaitState(gozk.StateHasSession)
	if got := conn.SessionID(); got != sid {
		t.Fatalf("session 0x%x after reconnecting, want the same 0x%x", got, sid)
	}
	if _, err := conn.Create("/after", []byte("z"), 0, acl); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
	if d, _, err := conn.Get("/before"); err != nil || string(d) != "x" {
		t.Fatalf("read after recovery: %q %v", d, err)
	}
	// The session's ephemeral still works: it was never expired.
	if _, err := conn.Create("/eph", nil, gozk.FlagEphemeral, acl); err != nil {
		t.Fatalf("ephemeral after recovery: %v", err)
	}
}
