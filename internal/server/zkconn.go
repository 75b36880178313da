package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
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
	"github.com/meridian-coord/meridian/internal/watch"
	zk "github.com/meridian-coord/meridian/internal/zkproto"
)

// The ZooKeeper-protocol listener: one goroutine reads and serves a
// connection's requests in order, so replies go out in request order
// (writes are pipelined: see zkConn.pipeline); one writes its outbound
// queue. Watch notifications enter the same queue from apply, before the
// reply of any request that could observe the change, so a client sees an
// event before data that follows it.

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

	// Pipelined writes (see pipeline): tail is closed once the reply of the
	// latest pipelined write is queued; slots bounds those in flight.
	tail  chan struct{}
	slots chan struct{}

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
		c.l.stats.outstanding.Add(-1)
		c.l.stats.observe(time.Since(start))
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
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.requestTimeout())
	defer cancel()
	resp := &zk.ConnectResponse{HasReadOnly: req.HasReadOnly}
	expired := func() bool {
		// ZooKeeper's answer to a dead session: timeout 0, session 0, then close.
		resp.Passwd = make([]byte, 16)
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
			return false
		}
		return c.readOnlyHandshake(req, resp)
	}
	if req.SessionID == 0 {
		timeout := session.Negotiate(time.Duration(req.TimeOut)*time.Millisecond, c.s.cfg.sessionTick())
		pw := make([]byte, 16)
		rand.Read(pw)
		err := c.s.admitSession()
		var res tree.Result
		var idx uint64
		if err == nil {
			res, idx, err = c.s.propose(ctx, &tree.Command{Op: tree.Op{Type: tree.OpCreateSession}, TimeoutMs: int32(timeout.Milliseconds()), Password: pw})
		}
		if err == nil {
			err = res.Err
		}
		if err != nil {
			c.closeWhy = "create session: " + err.Error()
			return false
		}
		c.session, c.timeout, c.lastZxid = res.SessionID, timeout, int64(idx)
		resp.SessionID, resp.TimeOut, resp.Passwd = res.SessionID, int32(timeout.Milliseconds()), pw
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
		err := c.s.readBarrier(ctx, true, 0)
		if err == nil {
			err = c.s.readBarrier(ctx, false, req.LastZxidSeen)
		}
		if err != nil {
			c.closeWhy = "cannot catch up with the client's zxid: " + err.Error()
			return false
		}
		c.s.mu.RLock()
		si, ok := c.s.mu.tree.Session(req.SessionID)
		c.s.mu.RUnlock()
		if !ok || subtle.ConstantTimeCompare(si.Password, req.Passwd) != 1 {
			return expired()
		}
		c.session, c.timeout = si.ID, time.Duration(si.TimeoutMs)*time.Millisecond
		resp.SessionID, resp.TimeOut, resp.Passwd = si.ID, si.TimeoutMs, req.Passwd
		c.s.touch(si.ID)
	}
	c.auth = c.identity()
	c.l.mu.Lock()
	if old := c.l.bySes[c.session]; old != nil && old != c {
		old.close("session moved to a new connection")
	}
	c.l.bySes[c.session] = c
	c.l.mu.Unlock()
	c.enqueue(frameOf(resp))
	return true
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

func toZKStat(st tree.Stat) zk.Stat {
	return zk.Stat{Czxid: st.Czxid, Mzxid: st.Mzxid, Ctime: st.Ctime, Mtime: st.Mtime, Version: st.Version,
		Cversion: st.Cversion, Aversion: st.Aversion, EphemeralOwner: st.EphemeralOwner, DataLength: st.DataLength,
		NumChildren: st.NumChildren, Pzxid: st.Pzxid}
}

func fromZKACL(in []zk.ACL) []tree.ACL {
	out := make([]tree.ACL, len(in))
	for i, a := range in {
		out[i] = tree.ACL{Perms: a.Perms, ID: tree.ID{Scheme: a.ID.Scheme, ID: a.ID.ID}}
	}
	return out
}

func toZKACL(in []tree.ACL) []zk.ACL {
	out := make([]zk.ACL, len(in))
	for i, a := range in {
		out[i] = zk.ACL{Perms: a.Perms, ID: zk.Id{Scheme: a.ID.Scheme, ID: a.ID.ID}}
	}
	return out
}

// reply queues the reply to request xid. Called by one goroutine at a time,
// in request order: the reader, or the pipelined write whose turn it is.
// A request that failed with connection loss gets no reply: see loseConnection.
func (c *zkConn) reply(xid int32, zxid int64, err error, body zk.Record) {
	if errs.ZKConnectionLoss(err) {
		c.loseConnection(xid, err)
		return
	}
	if zxid > c.lastZxid {
		c.lastZxid = zxid
	}
	if zxid == 0 {
		zxid = c.lastZxid
	}
	code := errs.ZKCode(err)
	if code != 0 {
		body = nil
	}
	c.enqueue(zk.EncodeReply(zk.ReplyHeader{Xid: xid, Zxid: zxid, Err: code}, body))
}

// loseConnection answers request xid, which failed with err (one of
// errs.ZKConnectionLoss: this server cannot serve it now, or cannot tell
// whether it took effect), by closing the connection, as ZooKeeper does:
// it never sends connection loss or operation timeout in a reply. Replies
// are queued in request order and the writer flushes the queue before it
// closes the socket, so every earlier request's reply still reaches the
// client; this request and every later one get none (a later pipelined
// write may still apply: the client, which sees all of them as connection
// loss, decides what to retry). The session is not closed: the client
// reconnects with its id and password within its timeout and goes on.
func (c *zkConn) loseConnection(xid int32, err error) {
	if !c.closeAs("cannot answer: "+err.Error(), true) {
		return // already closed: this reply would not have been sent either
	}
	c.s.log.Info("zk: closing connection instead of replying (connection loss)", "remote", c.c.RemoteAddr().String(),
		"session", fmt.Sprintf("0x%x", c.session), "xid", xid, "err", err)
	c.s.metrics.requests.WithLabelValues("zk", "connection_closed").Inc()
}

// pipeline starts pkt if it is a write whose commit may overlap those of
// the connection's earlier writes (create, delete, setData, setACL, multi), as
// ZooKeeper's commit pipeline overlaps them: a client that sends writes
// without waiting (an async API, Curator's background calls, the
// asynchronous lock strategies of "The Cost of Consensus: Synchronization
// in Geo-distributed Systems", Faisal Nawab and Alexander Pucher) pays one
// commit latency for the batch instead of one per write. Order is kept: writes are handed to raft in request
// order, which is the order raft logs them (a follower forwards them to the
// leader in that order), and replies are queued in request order, each
// after its predecessor's. A write whose outcome is unknown (the leader
// changed under it) closes the connection at its turn (see
// loseConnection) while later ones may still apply, as with ZooKeeper.
// False: serve it in turn.
func (c *zkConn) pipeline(pkt []byte, start time.Time) bool {
	if c.readOnly {
		return false
	}
	hdr, req, err := zk.DecodeRequest(pkt)
	if err != nil {
		return false
	}
	var cmd *tree.Command
	var body func(tree.Result) zk.Record
	// respond answers with the applied result (err: the proposal's error or
	// the result's); by default the header's error and body(res).
	respond := func(res tree.Result, idx uint64, err error) { c.reply(hdr.Xid, int64(idx), err, body(res)) }
	create := func(path string, data []byte, acl []zk.ACL, flags int32, ttl int64) {
		if hdr.Type == zk.OpCreateContainer {
			flags = int32(tree.ModeContainer)
		}
		cmd = &tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: path, Data: data, ACL: fromZKACL(acl), Mode: tree.CreateMode(flags), TTLMs: ttl}}
		if hdr.Type == zk.OpCreate {
			body = func(res tree.Result) zk.Record { return &zk.CreateResponse{Path: res.Op.Path} }
		} else {
			body = func(res tree.Result) zk.Record {
				return &zk.Create2Response{Path: res.Op.Path, Stat: toZKStat(res.Op.Stat)}
			}
		}
	}
	switch r := req.(type) {
	case *zk.CreateRequest:
		create(r.Path, r.Data, r.ACL, r.Flags, 0)
	case *zk.CreateTTLRequest:
		create(r.Path, r.Data, r.ACL, r.Flags, r.TTL)
	case *zk.DeleteRequest:
		cmd = &tree.Command{Op: tree.Op{Type: tree.OpDelete, Path: r.Path, Version: r.Version}}
		body = func(tree.Result) zk.Record { return nil }
	case *zk.SetDataRequest:
		cmd = &tree.Command{Op: tree.Op{Type: tree.OpSetData, Path: r.Path, Data: r.Data, Version: r.Version}}
		body = func(res tree.Result) zk.Record { return &zk.SetDataResponse{Stat: toZKStat(res.Op.Stat)} }
	case *zk.SetACLRequest:
		cmd = &tree.Command{Op: tree.Op{Type: tree.OpSetACL, Path: r.Path, ACL: fromZKACL(r.ACL), Version: r.Version}}
		body = func(res tree.Result) zk.Record { return &zk.SetACLResponse{Stat: toZKStat(res.Op.Stat)} }
	case *zk.MultiRequest:
		if hdr.Type != zk.OpMulti {
			return false // multiRead
		}
		var ok bool
		if cmd, ok = multiCommand(r); !ok {
			return false // served in turn, which refuses it
		}
		respond = func(res tree.Result, idx uint64, err error) {
			multiReply(r, res, int64(idx), err, func(zxid int64, err error, body zk.Record) { c.reply(hdr.Xid, zxid, err, body) })
		}
	default:
		return false
	}
	if !c.l.reservePipelined(len(pkt)) {
		return false
	}
	select {
	case c.slots <- struct{}{}:
	case <-c.done:
		c.l.pipelinedBytes.Add(-int64(len(pkt)))
		return true // closing: the next read fails
	}
	c.s.touch(c.session)
	cmd.Session, cmd.Auth = c.session, c.auth
	ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.requestTimeout())
	wait, err := c.s.submitTree(ctx, cmd)
	prev, sent := c.tail, make(chan struct{})
	c.tail = sent
	c.s.wg.Add(1) // the reader holds the group, so this cannot race Close's Wait
	go func() {
		defer c.s.wg.Done()
		defer cancel()
		var res tree.Result
		var idx uint64
		if err == nil {
			res, idx, err = wait()
			if err == nil {
				err = res.Err
			}
		}
		<-prev
		respond(res, idx, err)
		close(sent)
		<-c.slots
		c.l.pipelinedBytes.Add(-int64(len(pkt)))
		c.l.stats.outstanding.Add(-1)
		c.l.stats.observe(time.Since(start))
	}()
	return true
}

// drain waits until every pipelined write has queued its reply; false when
// the connection closed meanwhile.
func (c *zkConn) drain() bool {
	select {
	case <-c.tail:
		return true
	case <-c.done:
		return false
	}
}

// serve handles one request; false closes the connection.
// zkWatchSetHook, when set (tests only), runs after a read has set a watch
// and before its reply is sent.
var zkWatchSetHook atomic.Pointer[func(path string)]

func (c *zkConn) serve(pkt []byte) bool {
	hdr, req, derr := zk.DecodeRequest(pkt)
	if derr != nil && !errors.Is(derr, zk.ErrUnknownOpcode) {
		return c.malformed(hdr.Type, derr)
	}
	if !c.readOnly {
		c.s.touch(c.session)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.requestTimeout())
	defer cancel()
	reply := func(zxid int64, err error, body zk.Record) { c.reply(hdr.Xid, zxid, err, body) }
	if errors.Is(derr, zk.ErrUnknownOpcode) {
		// Unknown or unsupported opcodes get ZUNIMPLEMENTED; the connection stays.
		reply(0, errs.ErrUnimplemented, nil)
		return true
	}
	if c.serveReservedRead(hdr, req, reply) {
		return true
	}
	applied := func() int64 { return int64(c.s.appliedIndex()) }
	write := func(cmd *tree.Command) (tree.Result, int64, error) {
		if c.readOnly {
			return tree.Result{}, 0, errs.ErrNotReadOnly
		}
		cmd.Session, cmd.Auth = c.session, c.auth
		res, idx, err := c.s.propose(ctx, cmd)
		if err == nil {
			err = res.Err
		}
		return res, int64(idx), err
	}
	// read runs fn under the tree's read lock and registers a watch of kind
	// k when asked (for exists even on a missing node). respond, when set,
	// sends the reply under that lock too, with the index the read saw: a
	// change applied after the read must not have its watch notification
	// queued before the reply, or the client, which sets up its watch when
	// the reply arrives (go-zookeeper does), drops the event and the watch
	// is spent. ZooKeeper replies in apply order for the same reason.
	read := func(path string, watchIt bool, k watch.Kind, rk readKind, fn func(t *tree.Tree) error, respond func(zxid int64, err error)) error {
		if err := tree.ValidatePath(path, false); err != nil {
			if respond != nil {
				respond(applied(), err)
			}
			return err
		}
		c.s.mu.RLock()
		defer c.s.mu.RUnlock()
		err := func() error {
			if err := authorizeRead(c.s.mu.tree, path, rk, c.auth); err != nil {
				return err
			}
			err := fn(c.s.mu.tree)
			if wk, ok := watchKindFor(k, err); watchIt && ok {
				if werr := c.s.watches.Add(c, path, wk); werr != nil {
					return werr
				}
				if h := zkWatchSetHook.Load(); h != nil {
					(*h)(path)
				}
			}
			return err
		}()
		if respond != nil {
			respond(int64(c.s.mu.applied), err)
		}
		return err
	}
	create := func(path string, data []byte, acl []zk.ACL, flags int32, ttl int64, op int32) {
		if op == zk.OpCreateContainer {
			flags = int32(tree.ModeContainer)
		}
		res, idx, err := write(&tree.Command{Op: tree.Op{Type: tree.OpCreate, Path: path, Data: data, ACL: fromZKACL(acl), Mode: tree.CreateMode(flags), TTLMs: ttl}})
		if op == zk.OpCreate {
			reply(idx, err, &zk.CreateResponse{Path: res.Op.Path})
		} else {
			reply(idx, err, &zk.Create2Response{Path: res.Op.Path, Stat: toZKStat(res.Op.Stat)})
		}
	}

	switch r := req.(type) {
	case *zk.CreateRequest:
		create(r.Path, r.Data, r.ACL, r.Flags, 0, hdr.Type)
	case *zk.CreateTTLRequest:
		create(r.Path, r.Data, r.ACL, r.Flags, r.TTL, hdr.Type)
	case *zk.DeleteRequest:
		_, idx, err := write(&tree.Command{Op: tree.Op{Type: tree.OpDelete, Path: r.Path, Version: r.Version}})
		reply(idx, err, nil)
	case *zk.DeleteContainerRequest:
		_, idx, err := write(&tree.Command{Op: tree.Op{Type: tree.OpDelete, Path: r.Path, Version: -1}})
		reply(idx, err, nil)
	case *zk.SetDataRequest:
		res, idx, err := write(&tree.Command{Op: tree.Op{Type: tree.OpSetData, Path: r.Path, Data: r.Data, Version: r.Version}})
		reply(idx, err, &zk.SetDataResponse{Stat: toZKStat(res.Op.Stat)})
	case *zk.SetACLRequest:
		res, idx, err := write(&tree.Command{Op: tree.Op{Type: tree.OpSetACL, Path: r.Path, ACL: fromZKACL(r.ACL), Version: r.Version}})
		reply(idx, err, &zk.SetACLResponse{Stat: toZKStat(res.Op.Stat)})
	case *zk.ExistsRequest:
		var st tree.Stat
		read(r.Path, r.Watch, watch.KindExist, readExists, func(t *tree.Tree) (err error) { st, err = t.Exists(r.Path); return },
			func(zxid int64, err error) { reply(zxid, err, &zk.ExistsResponse{Stat: toZKStat(st)}) })
	case *zk.GetDataRequest:
		var data []byte
		var st tree.Stat
		read(r.Path, r.Watch, watch.KindData, readData, func(t *tree.Tree) (err error) { data, st, err = t.Get(r.Path); return },
			func(zxid int64, err error) { reply(zxid, err, &zk.GetDataResponse{Data: data, Stat: toZKStat(st)}) })
	case *zk.GetChildrenRequest, *zk.GetChildren2Request:
		path, w := "", false
		if g, ok := r.(*zk.GetChildrenRequest); ok {
			path, w = g.Path, g.Watch
		} else {
			g := r.(*zk.GetChildren2Request)
			path, w = g.Path, g.Watch
		}
		var kids []string
		var st tree.Stat
		read(path, w, watch.KindChild, readChildren, func(t *tree.Tree) (err error) { kids, st, err = t.Children(path); return },
			func(zxid int64, err error) {
				if err == nil {
					kids = syntheticChildren(path, kids, &st)
				}
				if hdr.Type == zk.OpGetChildren2 {
					reply(zxid, err, &zk.GetChildren2Response{Children: kids, Stat: toZKStat(st)})
				} else {
					reply(zxid, err, &zk.GetChildrenResponse{Children: kids})
				}
			})
	case *zk.GetACLRequest:
		var acl []tree.ACL
		var st tree.Stat
		err := read(r.Path, false, 0, readACL, func(t *tree.Tree) (err error) {
			if acl, st, err = t.GetACL(r.Path); err == nil {
				acl = redactACL(t, r.Path, acl, c.auth)
			}
			return
		}, nil)
		reply(applied(), err, &zk.GetACLResponse{ACL: toZKACL(acl), Stat: toZKStat(st)})
	case *zk.SyncRequest:
		var err error = errs.ErrNotReadOnly
		if !c.readOnly {
			err = c.s.readBarrier(ctx, true, 0)
		}
		reply(applied(), err, &zk.SyncResponse{Path: r.Path})
	case *zk.CheckVersionRequest:
		var st tree.Stat
		err := read(r.Path, false, 0, 0, func(t *tree.Tree) (err error) {
			st, err = t.Exists(r.Path)
			if err == nil && r.Version != -1 && st.Version != r.Version {
				err = errs.ErrBadVersion
			}
			return err
		}, nil)
		reply(applied(), err, &zk.SetDataResponse{Stat: toZKStat(st)})
	case *zk.MultiRequest:
		if hdr.Type == zk.OpMultiRead {
			reply(applied(), nil, c.multiRead(r))
			return true
		}
		c.multi(r, write, reply)
	case *zk.SetWatches:
		c.setWatches(r.RelativeZxid, r.DataWatches, r.ExistWatches, r.ChildWatches, nil, nil)
	case *zk.SetWatches2:
		c.setWatches(r.RelativeZxid, r.DataWatches, r.ExistWatches, r.ChildWatches, r.PersistentWatches, r.PersistentRecursiveWatches)
	case *zk.AddWatchRequest:
		k := watch.KindPersistent
		if r.Mode == zk.AddWatchModePersistentRecursive {
			k = watch.KindPersistentRecursive
		}
		err := tree.ValidatePath(r.Path, false)
		if err == nil {
			err = c.s.watches.Add(c, r.Path, k)
		}
		reply(applied(), err, &zk.ErrorResponse{Err: 0})
	case *zk.RemoveWatchesRequest:
		reply(applied(), c.s.watches.Remove(c, r.Path, watch.KindFromWatcherType(r.Type)), nil)
	case *zk.CheckWatchesRequest:
		var err error
		if !c.s.watches.Has(c, r.Path, watch.KindFromWatcherType(r.Type)) {
			err = errs.ErrNoWatcher
		}
		reply(applied(), err, nil)
	case *zk.AuthPacket:
		return c.addAuth(hdr, r)
	case *zk.SetSASLRequest:
		return c.saslStep(hdr, r, reply)
	case *zk.GetEphemeralsRequest:
		c.s.mu.RLock()
		paths := c.s.mu.tree.Ephemerals(c.session, r.PrefixPath)
		c.s.mu.RUnlock()
		reply(applied(), nil, &zk.GetEphemeralsResponse{Ephemerals: paths})
	case *zk.GetAllChildrenNumberRequest:
		var n int
		err := read(r.Path, false, 0, readChildren, func(t *tree.Tree) (err error) { n, err = t.AllChildrenNumber(r.Path); return }, nil)
		reply(applied(), err, &zk.GetAllChildrenNumberResponse{TotalNumber: int32(n)})
	case *zk.ReconfigRequest:
		if c.readOnly {
			reply(0, errs.ErrNotReadOnly, nil)
			break
		}
		data, stat, err := c.s.zkReconfig(ctx, c.auth, r)
		reply(applied(), err, &zk.GetDataResponse{Data: data, Stat: stat})
	default:
		switch hdr.Type {
		case zk.OpPing:
			c.enqueue(zk.EncodeReply(zk.ReplyHeader{Xid: zk.XidPing, Zxid: c.lastZxid}, nil))
		case zk.OpCloseSession:
			c.closing.Store(true)
			if c.readOnly { // a local session ends with its connection
				reply(0, nil, nil)
				c.close("session closed by client")
				return false
			}
			_, idx, err := write(&tree.Command{Op: tree.Op{Type: tree.OpCloseSession}})
			reply(idx, err, nil)
			c.close("session closed by client")
			return false
		case zk.OpWhoAmI:
			var infos []zk.ClientInfo
			for _, id := range c.auth {
				infos = append(infos, zk.ClientInfo{AuthScheme: id.Scheme, User: id.ID})
			}
			reply(applied(), nil, &zk.WhoAmIResponse{ClientInfo: infos})
		default:
			// sasl and anything else decoded but not served.
			reply(0, errs.ErrUnimplemented, nil)
		}
	}
	return true
}

// multiRead answers each getData/getChildren op on its own (no atomicity, as
// in ZooKeeper), all from one consistent view of the tree.
func (c *zkConn) multiRead(r *zk.MultiRequest) *zk.MultiResponse {
	out := &zk.MultiResponse{}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	t := c.s.mu.tree
	for _, o := range r.Ops {
		var path string
		switch op := o.Op.(type) {
		case *zk.GetDataRequest:
			path = op.Path
		case *zk.GetChildrenRequest:
			path = op.Path
		}
		err := tree.ValidatePath(path, false)
		if err == nil {
			kind := readData
			if o.Type != zk.OpGetData {
				kind = readChildren
			}
			err = authorizeRead(t, path, kind, c.auth)
		}
		var res zk.OpResult
		if err == nil && o.Type == zk.OpGetData {
			var data []byte
			var st tree.Stat
			if data, st, err = t.Get(path); err == nil {
				res = zk.OpResult{Type: zk.OpGetData, Data: data, Stat: toZKStat(st)}
			}
		} else if err == nil {
			var kids []string
			if kids, _, err = t.Children(path); err == nil {
				res = zk.OpResult{Type: zk.OpGetChildren, Children: kids}
			}
		}
		if err != nil {
			res = zk.OpResult{Type: zk.OpError, Err: errs.ZKCode(err)}
		}
		out.Results = append(out.Results, res)
	}
	return out
}

func (c *zkConn) setWatches(rel int64, data, exist, child, pers, rec []string) {
	c.s.mu.RLock()
	err := c.s.watches.SetWatches(c, rel, treeReader{c.s.mu.tree, int64(c.s.mu.applied)}, data, exist, child, pers, rec)
	c.s.mu.RUnlock()
	if errs.ZKConnectionLoss(err) {
		c.loseConnection(zk.XidSetWatches, err)
		return
	}
	c.enqueue(zk.EncodeReply(zk.ReplyHeader{Xid: zk.XidSetWatches, Zxid: int64(c.s.appliedIndex()), Err: errs.ZKCode(err)}, nil))
}

// multi serves a multi: all ops in one command; on failure ZooKeeper's
// error results (0 before the failing op, its code, -2 after) with a reply
// header error of 0.
func (c *zkConn) multi(r *zk.MultiRequest, write func(*tree.Command) (tree.Result, int64, error), reply func(int64, error, zk.Record)) {
	cmd, ok := multiCommand(r)
	if !ok {
		reply(0, errs.ErrBadArguments, nil)
		return
	}
	res, idx, err := write(cmd)
	multiReply(r, res, idx, err, reply)
}

// multiCommand is the tree command of a multi's ops; false if one is not a
// write a multi may hold.
func multiCommand(r *zk.MultiRequest) (*tree.Command, bool) {
	cmd := &tree.Command{Op: tree.Op{Type: tree.OpMulti}}
	for _, o := range r.Ops {
		switch op := o.Op.(type) {
		case *zk.CreateRequest:
			mode := tree.CreateMode(op.Flags)
			if o.Type == zk.OpCreateContainer {
				mode = tree.ModeContainer
			}
			cmd.Ops = append(cmd.Ops, tree.Op{Type: tree.OpCreate, Path: op.Path, Data: op.Data, ACL: fromZKACL(op.ACL), Mode: mode})
		case *zk.CreateTTLRequest:
			cmd.Ops = append(cmd.Ops, tree.Op{Type: tree.OpCreate, Path: op.Path, Data: op.Data, ACL: fromZKACL(op.ACL), Mode: tree.CreateMode(op.Flags), TTLMs: op.TTL})
		case *zk.DeleteRequest:
			cmd.Ops = append(cmd.Ops, tree.Op{Type: tree.OpDelete, Path: op.Path, Version: op.Version})
		case *zk.SetDataRequest:
			cmd.Ops = append(cmd.Ops, tree.Op{Type: tree.OpSetData, Path: op.Path, Data: op.Data, Version: op.Version})
		case *zk.CheckVersionRequest:
			cmd.Ops = append(cmd.Ops, tree.Op{Type: tree.OpCheck, Path: op.Path, Version: op.Version})
		default:
			return nil, false
		}
	}
	return cmd, true
}

// multiReply answers a multi with its applied result: err is the proposal's
// error, or the result's own.
func multiReply(r *zk.MultiRequest, res tree.Result, idx int64, err error, reply func(int64, error, zk.Record)) {
	if err != nil && len(res.Multi) == 0 {
		reply(idx, err, nil)
		return
	}
	if res.Err != nil {
		failed := 0
		for i, o := range res.Multi {
			if o.Err != nil && !errors.Is(o.Err, errs.ErrRuntimeInconsistency) {
				failed = i
				break
			}
		}
		reply(idx, nil, zk.MultiFailure(len(res.Multi), failed, errs.ZKCode(res.Err)))
		return
	}
	out := &zk.MultiResponse{}
	for i, o := range res.Multi {
		switch r.Ops[i].Type {
		case zk.OpCreate:
			out.Results = append(out.Results, zk.OpResult{Type: zk.OpCreate, Path: o.Path})
		case zk.OpCreate2, zk.OpCreateContainer, zk.OpCreateTTL:
			out.Results = append(out.Results, zk.OpResult{Type: zk.OpCreate2, Path: o.Path, Stat: toZKStat(o.Stat)})
		case zk.OpSetData:
			out.Results = append(out.Results, zk.OpResult{Type: zk.OpSetData, Stat: toZKStat(o.Stat)})
		case zk.OpDelete:
			out.Results = append(out.Results, zk.OpResult{Type: zk.OpDelete})
		case zk.OpCheck:
			out.Results = append(out.Results, zk.OpResult{Type: zk.OpCheck})
		}
	}
	reply(idx, nil, out)
}

func (c *zkConn) malformed(op int32, err error) bool {
	c.closeWhy = fmt.Sprintf("malformed request (%s): %v", zk.OpName(op), err)
	c.s.log.Warn("zk: closing connection", "remote", c.c.RemoteAddr().String(), "why", c.closeWhy)
	return false
}

func hostOf(a net.Addr) string {
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}
