package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-coord/meridian/internal/errs"
	"github.com/meridian-coord/meridian/internal/session"
	"github.com/meridian-coord/meridian/internal/tree"
	zk "github.com/meridian-coord/meridian/internal/zkproto"
)

// The ZooKeeper-protocol listener: one goroutine reads and serves a
// connection's requests in order, so replies go out in request order
// (writes are pipelined: see zkConn.pipeline); one writes its outbound
// queue. Watch notifications enter the same queue from apply, before the
// reply of any request that could observe the change, so a client sees an
// event before data that follows it.
//
// This file owns the listener and its connections: accept and the
// connection caps, the reader (readLoop, the handshake that opens or
// resumes a session, read-only sessions) and the writer (writeLoop), the
// outbound queue with its backpressure, the pipelining budget, and close
// with its linger after a connection loss. The other jobs have their own
// files: zkops.go (opcode dispatch, pipelining, multi, replies), zkauth.go
// (identities, addauth, SASL), zkfourletter.go (four-letter words),
// zkviews.go (/meridian and /zookeeper/config), zkreconfig.go (reconfig).

const (
	zkMaxQueuedFrames = 10000 // outbound frames per connection; beyond: the connection is closed
	// A connection's requests are not read while more than zkReadPauseBytes
	// of its replies wait to be written: a client that sends faster than it
	// reads (or never reads) is held back by TCP instead of making the
	// server buffer its replies. Notifications, queued from apply, cannot
	// wait; zkMaxQueuedBytes bounds the queue anyway, and the connection is
	// closed beyond it.
	zkReadPauseBytes = 4 << 20
	zkMaxQueuedBytes = 64 << 20
	// zkPipelineDepth bounds one connection's pipelined writes in flight; at
	// the limit the reader waits for the oldest one's reply before reading on.
	zkPipelineDepth = 128
	// zkMaxPipelinedBytes bounds the request bytes of all connections'
	// pipelined writes together; beyond it a write is not pipelined but
	// served in turn, after the connection's earlier writes.
	zkMaxPipelinedBytes = 64 << 20
	// zkLossLinger bounds how long a connection closed for connection loss
	// waits, after its last reply and end of stream, for the client to
	// close its end (see lingerAfterLoss).
	zkLossLinger = 2 * time.Second
)

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

type zkListener struct {
	s   *Server
	lns []net.Listener // the plain port and the TLS port

	mu     sync.Mutex
	conns  map[*zkConn]struct{}
	bySes  map[int64]*zkConn
	closed bool // close ran: a connection accepted since is closed, not served

	stats zkStats // what srvr, stat, mntr and cons report

	pipelinedBytes atomic.Int64 // request bytes of pipelined writes in flight
}

// reservePipelined claims n bytes of the pipelining budget; false at the limit.
func (l *zkListener) reservePipelined(n int) bool {
	for {
		cur := l.pipelinedBytes.Load()
		if cur+int64(n) > zkMaxPipelinedBytes {
			return false
		}
		if l.pipelinedBytes.CompareAndSwap(cur, cur+int64(n)) {
			return true
		}
	}
}

// newZKListener is created before the replica starts applying (apply tells
// it about ended sessions); listen starts serving once the server is up.
func newZKListener(s *Server) *zkListener {
	return &zkListener{s: s, conns: map[*zkConn]struct{}{}, bySes: map[int64]*zkConn{}}
}

// listen serves the ZooKeeper protocol on addr, over TLS when tc is set
// (the handshake runs on the connection's first read, under its deadline).
func (l *zkListener) listen(addr string, tc *tls.Config) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen zk: %w", err)
	}
	// maxClientCnxns: per client address, on each ZooKeeper port.
	ln = limitPerIP(ln, l.s.cfg.maxClientCnxns(), l.s.deniedConn("zk"))
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	l.mu.Lock()
	l.lns = append(l.lns, ln)
	l.mu.Unlock()
	l.s.wg.Add(1)
	go l.accept(ln)
	return nil
}

func (l *zkListener) accept(ln net.Listener) {
	defer l.s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-l.s.stop:
				return
			default:
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		l.mu.Lock()
		if l.closed {
			// Accepted just before close closed the listener: close would
			// not see it, and nothing else ever would.
			l.mu.Unlock()
			c.Close()
			return
		}
		if len(l.conns) >= l.s.cfg.MaxClientConnections { // further ones are closed at once
			l.mu.Unlock()
			l.s.log.Warn("zk: connection limit reached; closing new connection", "remote", c.RemoteAddr().String())
			c.Close()
			continue
		}
		zc := &zkConn{l: l, s: l.s, c: c, signal: make(chan struct{}, 1), wrote: make(chan struct{}, 1), done: make(chan struct{}),
			tail: closedChan, slots: make(chan struct{}, zkPipelineDepth), readerDone: make(chan struct{})}
		l.conns[zc] = struct{}{}
		l.mu.Unlock()
		l.s.wg.Add(2)
		go zc.readLoop()
		go zc.writeLoop()
	}
}

func (l *zkListener) close() {
	l.mu.Lock()
	l.closed = true
	for _, ln := range l.lns {
		ln.Close()
	}
	for c := range l.conns {
		c.close("server stopping")
	}
	l.mu.Unlock()
}

// closeAllConns closes every client connection (clients reconnect and
// re-register their watches).
func (l *zkListener) closeAllConns(why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		c.close(why)
	}
}

// sessionEnded closes the connection of a session that closed or expired.
func (l *zkListener) sessionEnded(id int64) {
	l.mu.Lock()
	c := l.bySes[id]
	l.mu.Unlock()
	if c != nil && !c.closing.Load() {
		c.close("session ended")
	}
}

type zkConn struct {
	l *zkListener
	s *Server
	c net.Conn

	received, sent atomic.Int64 // frames, for cons
	fourLetter     atomic.Bool  // a four-letter-word connection: its reply is not a packet
	sidForCons     atomic.Int64 // session id and timeout (ms) once established, for cons
	toForCons      atomic.Int64
	session        int64
	readOnly       bool        // a read-only session (no quorum): local, never in the tree
	sasl           *digestMD5  // a SASL exchange in progress
	closing        atomic.Bool // the client asked to close: reply before closing
	timeout        time.Duration
	auth           []tree.ID
	lastZxid       int64
	// seen is lastZxid for the reader goroutine while pipelined replies
	// update lastZxid: what the session has seen, which its next write's
	// zxid must exceed (a write to another group waits for the replies in
	// flight first, so it is complete then).
	seen atomic.Int64
	// view is what the client has seen through this connection, group by
	// group (view.go): what its reads wait for. Set by the handshake;
	// nil on a read-only session, which reads what its member has.
	view *view

	// Pipelined writes (see pipeline): tail is closed once the reply of the
	// latest pipelined write is queued; slots bounds those in flight;
	// pipeGroup is the group the latest one went to.
	tail      chan struct{}
	slots     chan struct{}
	pipeGroup *group

	mu       sync.Mutex
	out      [][]byte
	pending  int           // bytes queued or being written
	signal   chan struct{} // to the writer: frames queued
	wrote    chan struct{} // to the reader: the writer wrote a batch
	closed   bool
	done     chan struct{}
	closeWhy string

	lost       atomic.Bool   // closed for connection loss: linger before closing the socket
	readerDone chan struct{} // closed when the reader has stopped reading
}

// close ends the connection: the writer flushes what is queued (the reply
// to closeSession, the expired ConnectResponse) and then closes the socket,
// which also unblocks the reader. False if it was already closed.
func (c *zkConn) close(why string) bool { return c.closeAs(why, false) }

// closeAs is close; lost marks a close for connection loss (see
// lingerAfterLoss), set before the writer can see the connection closed.
func (c *zkConn) closeAs(why string, lost bool) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.lost.Store(lost)
	c.closed, c.closeWhy = true, why
	close(c.done)
	c.mu.Unlock()
	return true
}

func (c *zkConn) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.out)
}

// enqueue adds a frame to the outbound queue; a connection whose client does
// not read is closed at the limit rather than buffering without bound.
func (c *zkConn) enqueue(frame []byte) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if len(c.out) >= zkMaxQueuedFrames || c.pending+len(frame) > zkMaxQueuedBytes {
		c.mu.Unlock()
		c.close("outbound queue full (client not reading)")
		return
	}
	c.out = append(c.out, frame)
	c.pending += len(frame)
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// awaitRoom holds the reader while more than zkReadPauseBytes of replies
// wait for the client; false when the connection closed meanwhile (a client
// that never reads is closed by the writer's deadline).
func (c *zkConn) awaitRoom() bool {
	for {
		c.mu.Lock()
		pending, closed := c.pending, c.closed
		c.mu.Unlock()
		if closed {
			return false
		}
		if pending <= zkReadPauseBytes {
			return true
		}
		select {
		case <-c.wrote:
		case <-c.done:
			return false
		}
	}
}

// Notify implements watch.Watcher: called from apply, never blocks.
func (c *zkConn) Notify(ev tree.Event) {
	if ev.Type <= 0 {
		return // Meridian-internal notifications (lock loss) have no ZooKeeper form
	}
	if c.view != nil {
		c.view.event(ev.Path)
	}
	c.enqueue(zk.EncodeNotification(ev.Zxid, zk.WatcherEvent{Type: int32(ev.Type), State: zk.StateSyncConnected, Path: ev.Path}))
}

func (c *zkConn) countReceived() {
	c.received.Add(1)
	c.l.stats.received.Add(1)
}

func (c *zkConn) writeLoop() {
	defer c.s.wg.Done()
	defer c.c.Close()
	// Each frame is already its own slice: a batch goes out in one writev,
	// without a per-connection buffer (64 KiB each was 640 MiB of heap at
	// the connection limit, idle or not). A TLS connection has no writev
	// (net.Buffers writes it one frame, one record, at a time), so its
	// batch is coalesced in a buffer the size of a TLS record.
	var batch net.Buffers
	var out io.Writer = c.c
	var tlsBuf *bufio.Writer
	if _, plain := c.c.(*net.TCPConn); !plain {
		tlsBuf = bufio.NewWriterSize(c.c, 16<<10)
		out = tlsBuf
	}
	for {
		c.mu.Lock()
		frames := c.out
		c.out = nil
		closed := c.closed
		c.mu.Unlock()
		// A client that stops reading cannot hold the writer forever.
		c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if !c.fourLetter.Load() {
			c.sent.Add(int64(len(frames)))
			c.l.stats.sent.Add(int64(len(frames)))
		}
		if len(frames) > 0 {
			batch = append(batch[:0], frames...)
			_, err := batch.WriteTo(out)
			if err == nil && tlsBuf != nil {
				err = tlsBuf.Flush()
			}
			if err != nil {
				c.close("write failed")
				return
			}
			n := 0
			for _, f := range frames {
				n += len(f)
			}
			c.mu.Lock()
			c.pending -= n
			c.mu.Unlock()
			select {
			case c.wrote <- struct{}{}:
			default:
			}
		}
		if closed {
			c.lingerAfterLoss()
			return
		}
		select {
		case <-c.signal:
		case <-c.done:
		}
	}
}

// lingerAfterLoss, on a connection closed for connection loss, ends the
// stream behind the replies just written and waits (at most zkLossLinger,
// less if the server stops) for the reader to read what the client still
// sends until the client closes its end. Closing a TCP socket with unread
// requests in it resets the connection, and a reset discards replies not
// yet transmitted: the replies to the requests before the lost one must
// arrive first, as ZooKeeper sends them.
func (c *zkConn) lingerAfterLoss() {
	if !c.lost.Load() || closeWrite(c.c) != nil {
		return
	}
	t := time.NewTimer(zkLossLinger)
	defer t.Stop()
	select {
	case <-c.readerDone:
	case <-t.C:
	case <-c.s.stop:
	}
}

// closeWrite ends the stream to the client (a TLS close_notify, a TCP FIN)
// and keeps reading possible.
func closeWrite(c net.Conn) error {
	if p, ok := c.(*perIPConn); ok {
		return closeWrite(p.Conn)
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (c *zkConn) readLoop() {
	defer c.s.wg.Done()
	// After a connection loss, what the client still sends is read and
	// dropped until it closes its end (see lingerAfterLoss). Runs last.
	var r *bufio.Reader
	defer func() {
		if c.lost.Load() && r != nil {
			c.c.SetReadDeadline(time.Now().Add(zkLossLinger))
			io.Copy(io.Discard, r)
		}
		close(c.readerDone)
	}()
	defer func() {
		c.close("connection ended")
		c.s.watches.RemoveAll(c)
		c.l.mu.Lock()
		delete(c.l.conns, c)
		if c.session != 0 && c.l.bySes[c.session] == c {
			delete(c.l.bySes, c.session)
		}
		c.l.mu.Unlock()
		if c.closeWhy != "" && c.closeWhy != "connection ended" {
			c.s.log.Debug("zk: connection closed", "remote", c.c.RemoteAddr().String(), "why", c.closeWhy)
		}
	}()
	// Small: requests are small, and a large frame is read past the buffer
	// (io.ReadFull into the frame). 64 KiB per connection, idle or not, was
	// 640 MiB of heap at the connection limit.
	r = bufio.NewReaderSize(c.c, 4<<10)
	// Four-letter words arrive instead of a length prefix.
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if head, err := r.Peek(4); err == nil && isFourLetterWord(string(head)) {
		r.Discard(4)
		c.answerFourLetterWord(string(head))
		return
	}
	pkt, err := zk.ReadFrame(r, 0)
	if err != nil {
		c.closeWhy = "bad connect packet: " + err.Error()
		return
	}
	c.countReceived()
	if !c.handshake(pkt) {
		return
	}
	c.sidForCons.Store(c.session)
	c.toForCons.Store(c.timeout.Milliseconds())
	for {
		c.c.SetReadDeadline(time.Now().Add(c.timeout))
		pkt, err := zk.ReadFrame(r, 0)
		if err != nil {
			if errors.Is(err, zk.ErrFrameTooLarge) || errors.Is(err, zk.ErrBadLength) {
				c.s.log.Warn("zk: closing connection", "remote", c.c.RemoteAddr().String(), "err", err)
			}
			return
		}
		c.countReceived()
		if !c.awaitRoom() {
			return
		}
		start := time.Now()
		c.l.stats.outstanding.Add(1)
		if c.pipeline(pkt, start) {
			continue
		}
		// Anything else waits for the pipelined writes before it: a read
		// must see them, and replies go out in request order.
		if !c.drain() {
			return
		}
		ok := c.serve(pkt)
		c.finish(requestOpcode(pkt), start)
		if !ok {
			return
		}
	}
}

// handshake opens or resumes the session named by the ConnectRequest.
func (c *zkConn) handshake(pkt []byte) bool {
	req, err := zk.DecodeConnectRequest(pkt)
	if err != nil {
		c.closeWhy = "malformed ConnectRequest"
		c.countConnect(errs.ErrMarshalling)
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.requestTimeout())
	defer cancel()
	resp := &zk.ConnectResponse{HasReadOnly: req.HasReadOnly}
	expired := func() bool {
		// ZooKeeper's answer to a dead session: timeout 0, session 0, then close.
		resp.Passwd = make([]byte, 16)
		c.countConnect(errs.ErrSessionExpired)
		c.enqueue(frameOf(resp))
		c.close("session expired or invalid")
		return false
	}
	// ZooKeeper serves no client while it is outside a quorum, so the client
	// moves on to a server that can; with read-only mode enabled, a client
	// that allows it gets a read-only session instead. It waits two election
	// timeouts for a leader: raft randomises each timeout in [1, 2) of them,
	// so an election after a lost leader normally ends within that.
	if !c.s.awaitLeader(ctx, 2*c.s.cfg.tick()*time.Duration(c.s.cfg.ElectionTicks)) {
		if !req.ReadOnly || !c.s.cfg.ReadOnlyMode {
			c.closeWhy = "not serving: no leader known"
			c.countConnect(errs.ErrUnavailable)
			return false
		}
		return c.readOnlyHandshake(req, resp)
	}
	if req.SessionID == 0 {
		c.view = newView(0)
		ns, idx, err := c.s.createSession(withView(ctx, c.view), time.Duration(req.TimeOut)*time.Millisecond)
		if err != nil {
			c.closeWhy = "create session: " + err.Error()
			c.countConnect(err)
			return false
		}
		c.session, c.timeout, c.lastZxid = ns.id, ns.timeout, int64(idx)
		c.seen.Store(c.lastZxid)
		resp.SessionID, resp.TimeOut, resp.Passwd = ns.id, int32(ns.timeout.Milliseconds()), ns.password
	} else {
		// Never serve a client older data than it has seen or been told of.
		// LastZxidSeen covers replies only: clients do not count the zxid of
		// a notification, so a client told of a change by one server could
		// resume on another that has not applied it yet and read the data
		// from before the change it was notified of. A linearizable barrier
		// (one ReadIndex round to the leader, once per reconnect) brings
		// this server up to everything committed, hence everything any
		// server has notified. A client claiming a zxid beyond that still
		// waits for it and is refused when it never comes, as ZooKeeper does.
		// What the client saw elsewhere is known only as a zxid: every
		// group must reach it (a keyspace opened later, in its first read).
		c.view = newView(req.LastZxidSeen)
		si, err := c.s.resumeSession(ctx, req.SessionID, req.Passwd, c.view, true)
		if errors.Is(err, errs.ErrSessionExpired) {
			return expired()
		}
		if err != nil {
			c.closeWhy = "cannot catch up with the client's zxid: " + err.Error()
			c.countConnect(err)
			return false
		}
		c.session, c.timeout = si.ID, time.Duration(si.TimeoutMs)*time.Millisecond
		c.lastZxid = max(req.LastZxidSeen, 0) // this server has applied it (resumeSession)
		c.seen.Store(c.lastZxid)
		resp.SessionID, resp.TimeOut, resp.Passwd = si.ID, si.TimeoutMs, req.Passwd
	}
	c.auth = c.identity()
	c.l.mu.Lock()
	if old := c.l.bySes[c.session]; old != nil && old != c {
		old.close("session moved to a new connection")
	}
	c.l.bySes[c.session] = c
	c.l.mu.Unlock()
	c.countConnect(nil)
	c.enqueue(frameOf(resp))
	return true
}

// countConnect counts the handshake (the ConnectRequest) as "zk:connect",
// with the outcome's code label; one that closes the connection as
// connection loss would is "connection_closed", as for any request.
func (c *zkConn) countConnect(err error) {
	code := codeLabel(err)
	if errs.ZKConnectionLoss(err) {
		code = "connection_closed"
	}
	c.s.metrics.requests.WithLabelValues("zk:connect", code).Inc()
}

// readOnlyHandshake admits a client to a server that has no quorum, as
// ZooKeeper's read-only mode does: the session is local to this server (not
// replicated, no ephemerals), reads come from its possibly stale state,
// writes answer ZNOTREADONLY, and the connection is closed once a leader is
// known again so the client finds a read-write server.
func (c *zkConn) readOnlyHandshake(req *zk.ConnectRequest, resp *zk.ConnectResponse) bool {
	timeout := session.Negotiate(time.Duration(req.TimeOut)*time.Millisecond, c.s.cfg.sessionTick())
	pw := make([]byte, 16)
	rand.Read(pw)
	// Local ids have the top bit clear and this server's id below it, so
	// they cannot collide with replicated sessions or another server's.
	c.session = int64(c.s.nextID() &^ (1 << 63))
	c.readOnly, c.timeout = true, timeout
	resp.SessionID, resp.TimeOut, resp.Passwd, resp.ReadOnly = c.session, int32(timeout.Milliseconds()), pw, true
	c.auth = c.identity()
	c.l.mu.Lock()
	c.l.bySes[c.session] = c
	c.l.mu.Unlock()
	c.countConnect(nil)
	c.enqueue(frameOf(resp))
	return true
}

// closeReadOnly ends read-only sessions once this server has a leader.
func (l *zkListener) closeReadOnly() {
	l.mu.Lock()
	var ro []*zkConn
	for c := range l.conns {
		if c.readOnly {
			ro = append(ro, c)
		}
	}
	l.mu.Unlock()
	for _, c := range ro {
		c.close("read-only session ended: a leader is known again")
	}
}

func frameOf(r *zk.ConnectResponse) []byte {
	b, _ := zk.AppendRecordFrame(nil, r)
	return b
}

func hostOf(a net.Addr) string {
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}
