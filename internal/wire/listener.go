package wire

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Split serves this transport's connections from ln and returns a
// listener of every other connection, for the gRPC server. A connection
// is this transport's when its first bytes are Preface; it is told apart
// by its first byte, so a gRPC client (TLS or HTTP/2 preface first) is
// never made to wait. Closing the returned listener closes ln.
//
// A connection that sends nothing within HandshakeTimeout is closed.
func (s *Server) Split(ln net.Listener) net.Listener {
	g := &grpcListener{Listener: ln, conns: make(chan net.Conn), done: make(chan struct{})}
	go g.accept(s)
	return g
}

type grpcListener struct {
	net.Listener
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	err   error // the inner listener's failure
}

func (g *grpcListener) accept(s *Server) {
	for {
		conn, err := g.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			g.mu.Lock()
			g.err = err
			g.mu.Unlock()
			g.Close()
			return
		}
		go g.route(s, conn)
	}
}

// route reads the first byte(s) of conn and serves it here or hands it to gRPC.
func (g *grpcListener) route(s *Server, conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(s.opts.HandshakeTimeout))
	var first [len(Preface)]byte
	if _, err := io.ReadFull(conn, first[:1]); err != nil {
		conn.Close()
		return
	}
	if first[0] != Preface[0] {
		_ = conn.SetReadDeadline(time.Time{})
		select {
		case g.conns <- &prefixConn{Conn: conn, prefix: first[:1]}:
		case <-g.done:
			conn.Close()
		}
		return
	}
	if _, err := io.ReadFull(conn, first[1:]); err != nil || string(first[:]) != Preface {
		conn.Close()
		return
	}
	s.ServeConn(conn)
}

func (g *grpcListener) Accept() (net.Conn, error) {
	select {
	case c := <-g.conns:
		return c, nil
	case <-g.done:
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.err != nil {
			return nil, g.err
		}
		return nil, net.ErrClosed
	}
}

func (g *grpcListener) Close() error {
	var err error
	g.once.Do(func() {
		close(g.done)
		err = g.Listener.Close()
	})
	return err
}

// prefixConn gives back the bytes read to route it.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
