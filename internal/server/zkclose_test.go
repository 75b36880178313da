package server

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// gateListener's Accept hands out the connections the test sends it, even
// after Close: a connection the kernel accepted just before the listener
// closed.
type gateListener struct {
	entered chan struct{}
	conns   chan net.Conn
}

func (g *gateListener) Accept() (net.Conn, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	if c, ok := <-g.conns; ok {
		return c, nil
	}
	return nil, net.ErrClosed
}
func (g *gateListener) Close() error   { return nil }
func (g *gateListener) Addr() net.Addr { return &net.TCPAddr{} }

// A ZooKeeper connection accepted while the server stops is closed, not
// served: a kazoo harness once waited forever on a server whose Close
// waited for such a connection (accepted, then registered after the
// listener's close had closed every registered one).
func TestZKConnAcceptedDuringClose(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	s := tc.servers[0]
	ln := &gateListener{entered: make(chan struct{}, 1), conns: make(chan net.Conn, 1)}
	s.wg.Add(1)
	go s.zk.accept(ln)
	<-ln.entered
	s.zk.close()
	client, srv := net.Pipe()
	defer client.Close()
	ln.conns <- srv
	close(ln.conns)
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := client.Read(make([]byte, 1))
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("a connection accepted during close: read %v, want it closed", err)
	}
}
