package testutil

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a target, delaying each chunk by a
// settable one-way delay in both directions, or stalling all traffic. It is
// a test fixture for placing a server "far away"; the WAN emulator with
// jitter and accuracy checks is internal/netem.
type Proxy struct {
	Addr   string
	target string
	ln     net.Listener
	delay  atomic.Int64 // one-way, ns
	stall  atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

// NewProxy listens on a loopback port and forwards to target until the test ends.
func NewProxy(t testing.TB, target string, oneWay time.Duration) *Proxy {
	t.Helper()
	// 127.0.0.2: a proxy's port must not be one FreePorts just handed out
	// (closed, hence free again) for a server on 127.0.0.1 to bind later.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln}
	p.delay.Store(int64(oneWay))
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// SetDelay changes the one-way delay of traffic sent from now on.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Stall holds all traffic (connections stay open) until Stall(false).
func (p *Proxy) Stall(on bool) { p.stall.Store(on) }

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// pipe copies src to dst; each chunk is stamped on arrival and written once
// its delay has passed, so order is kept and delays do not add up.
func (p *Proxy) pipe(src, dst net.Conn) {
	type chunk struct {
		due time.Time
		b   []byte
	}
	q := make(chan chunk, 1024)
	go func() {
		defer dst.Close()
		for c := range q {
			for p.stall.Load() {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	}()
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{due: time.Now().Add(time.Duration(p.delay.Load())), b: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			if err != io.EOF {
				src.Close()
			}
			return
		}
	}
}
