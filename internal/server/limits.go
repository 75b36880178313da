package server

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"
)

// knownFourLetterWords lists the words Meridian answers, sorted.
func knownFourLetterWords() []string {
	out := make([]string, 0, len(fourLetterWords))
	for w := range fourLetterWords {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// fourLetterWordEnabled: w is in four_letter_words (or that list is "*").
func (c *Config) fourLetterWordEnabled(w string) bool {
	ws := c.FourLetterWords
	if len(ws) == 0 {
		ws = []string{"srvr"}
	}
	return slices.Contains(ws, w) || slices.Contains(ws, "*")
}

// perIPListener closes, at accept, a connection from an address that
// already has max open through this listener (ZooKeeper's maxClientCnxns:
// one host cannot take every slot of a port). max 0: no cap.
type perIPListener struct {
	net.Listener
	max    int
	onDeny func(remote string)

	mu sync.Mutex
	n  map[string]int
}

func limitPerIP(ln net.Listener, max int, onDeny func(string)) net.Listener {
	if max <= 0 {
		return ln
	}
	return &perIPListener{Listener: ln, max: max, onDeny: onDeny, n: map[string]int{}}
}

func (l *perIPListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := hostOf(c.RemoteAddr())
		l.mu.Lock()
		if l.n[ip] >= l.max {
			l.mu.Unlock()
			c.Close()
			if l.onDeny != nil {
				l.onDeny(ip)
			}
			continue
		}
		l.n[ip]++
		l.mu.Unlock()
		return &perIPConn{Conn: c, l: l, ip: ip}, nil
	}
}

func (l *perIPListener) release(ip string) {
	l.mu.Lock()
	if l.n[ip]--; l.n[ip] <= 0 {
		delete(l.n, ip)
	}
	l.mu.Unlock()
}

type perIPConn struct {
	net.Conn
	l    *perIPListener
	ip   string
	once sync.Once
}

func (c *perIPConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// Descriptors a server needs besides its client connections: inbound peer
// connections (the peer port's cap), outbound ones, Pebble's open files
// (its default table cache) and listeners, logs and slack.
const (
	fdPeerInbound = 256
	fdReserve     = 1024 + 64
	// defaultMaxClientConnections is max_client_connections when the file
	// descriptor limit has room for it.
	defaultMaxClientConnections = 10000
	// minAutoClientConnections: below this, max_client_connections left
	// at its default refuses to start rather than serve almost nobody.
	minAutoClientConnections = 64
)

// raiseFDLimit raises the soft RLIMIT_NOFILE to the hard limit, as the Go
// runtime does at start on most systems (done again here in case the
// process was started with a lower soft limit by something Go did not see),
// and returns the soft limit now in force.
func raiseFDLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		want := lim
		want.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
			lim = want
		}
	}
	return uint64(lim.Cur), nil
}

// checkFDLimit checks that this server's connection caps fit the file
// descriptor limit: max_client_connections on the ZooKeeper port(s) (one
// cap shared by the plain and TLS ports) and again on the gRPC port,
// max_http_connections, the peer port's inbound cap and a reserve for
// storage files. A max_client_connections left at 0 becomes 10000, or
// what fits, split between the two client ports. The limit is checked per
// server: servers sharing a process (tests) are each checked alone.
func (c *Config) checkFDLimit(limit uint64) error {
	fixed := uint64(c.MaxHTTPConnections) + fdPeerInbound + fdReserve
	ports := uint64(1) // gRPC
	if c.ListenZK != "" || c.ZKSecureListen != "" {
		ports++
	}
	if c.MaxClientConnections == 0 {
		room := uint64(0)
		if limit > fixed {
			room = (limit - fixed) / ports
		}
		if room < minAutoClientConnections {
			return fmt.Errorf("file descriptor limit %d leaves room for %d client connections per port after max_http_connections %d, %d peer connections and %d for storage; raise the limit (ulimit -n)",
				limit, room, c.MaxHTTPConnections, fdPeerInbound, fdReserve)
		}
		c.MaxClientConnections = int(min(room, defaultMaxClientConnections))
		return nil
	}
	need := ports*uint64(c.MaxClientConnections) + fixed
	if need > limit {
		return fmt.Errorf("connection caps need %d file descriptors (max_client_connections %d on each of %d client ports, max_http_connections %d, %d peer connections, %d for storage) but the limit is %d; lower them or raise the limit (ulimit -n)",
			need, c.MaxClientConnections, ports, c.MaxHTTPConnections, fdPeerInbound, fdReserve, limit)
	}
	return nil
}

func (c *Config) idleTimeout() time.Duration {
	return time.Duration(c.IdleTimeoutMs) * time.Millisecond
}

// deniedConn logs connections closed by the per-address cap, at most one
// line per second per port (a host hammering the port must not flood the
// log); the count of those not logged is in the next line.
func (s *Server) deniedConn(port string) func(string) {
	var mu sync.Mutex
	var last time.Time
	var skipped int
	return func(ip string) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(last) >= time.Second {
			s.log.Warn("connections from this address exceed max_client_cnxns; closing new ones",
				"port", port, "remote", ip, "max_client_cnxns", s.cfg.maxClientCnxns(), "closed_since_last_report", skipped)
			last, skipped = now, 0
			return
		}
		skipped++
	}
}
