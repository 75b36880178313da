package chaos

import (
	"io"
	"net"
	"sync"
)

// Proxy forwards TCP connections from its listener to one target; Block
// turns it into a black hole. It carries one direction of one raft link
// (the transport dials one connection per sender→receiver pair), so cutting
// it is a one-way partition.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	blocked bool
	closed  bool
	conns   map[net.Conn]struct{}
}

// maxProxyConns bounds live connections through one proxy.
const maxProxyConns = 64

// NewProxy listens on a free loopback port and forwards to target. It
// listens on 127.0.0.2 so its port can never be one freePorts handed to a
// server on 127.0.0.1 (closed, free again) that the server binds later, e.g.
// on a restart.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.accept()
	return p, nil
}

// Addr is the address to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.conns) >= maxProxyConns {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			in.Close()
			continue
		}
		p.mu.Lock()
		blocked := p.blocked
		p.mu.Unlock()
		if blocked {
			// Black hole: the connection is accepted and held, nothing
			// is forwarded; Unblock closes it and the sender redials.
			go func() { io.Copy(io.Discard, in); p.untrack(in) }()
			continue
		}
		go p.forward(in)
	}
}

func (p *Proxy) forward(in net.Conn) {
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		p.untrack(in)
		return
	}
	if !p.track(out) {
		out.Close()
		p.untrack(in)
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		// Either side ending ends both: a half-open raft link would
		// only delay the sender's redial.
		p.untrack(dst)
		p.untrack(src)
	}
	go pipe(out, in)
	go pipe(in, out)
	wg.Wait()
}

// closeAll closes every connection through the proxy. Caller holds p.mu.
func (p *Proxy) closeAllLocked() {
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Block drops every connection and black-holes new ones: bytes already
// in flight are lost, as in a real partition.
func (p *Proxy) Block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = true
	p.closeAllLocked()
}

// Unblock forwards again; connections accepted while blocked are closed so
// their senders redial through a working path.
func (p *Proxy) Unblock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.blocked {
		return
	}
	p.blocked = false
	p.closeAllLocked()
}

// Close stops the proxy.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.closeAllLocked()
	p.mu.Unlock()
	return p.ln.Close()
}
