package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Options configure a Server.
type Options struct {
	// TLS secures every connection (nil: plaintext, for servers
	// configured insecure). A client certificate, when verified, reaches
	// the interceptors as credentials.TLSInfo, as on gRPC.
	TLS *tls.Config
	// Unary and Stream are the gRPC server's interceptors: every call
	// passes them, as on gRPC.
	Unary  grpc.UnaryServerInterceptor
	Stream grpc.StreamServerInterceptor
	// MaxConcurrentCalls a connection may have in flight (streams
	// included); a call beyond it is refused with ResourceExhausted.
	// Clients of this package wait instead of sending it.
	MaxConcurrentCalls int
	// IdleTimeout closes a connection with no call in flight that has
	// sent nothing for this long (0: never).
	IdleTimeout time.Duration
	// Inline names the methods whose calls are answered without waiting,
	// as a rule (reads): a call of one that arrives alone is served by the
	// goroutine that read it (see serve). A call that waits after all
	// says so (Waits), or loses the reading after inlineGrace.
	Inline func(fullMethod string) bool
	// HandshakeTimeout bounds the preface and the TLS handshake (default 10 s).
	HandshakeTimeout time.Duration
	Log              *slog.Logger
}

// frameTimeout bounds the reading of a frame once its first byte came.
const frameTimeout = 30 * time.Second

// Server serves one service description over this transport.
type Server struct {
	opts    Options
	impl    any
	methods map[string]*method // by full name

	mu     sync.Mutex
	conns  map[*serverConn]struct{}
	closed bool
	calls  sync.WaitGroup

	work    chan task // to an idle worker
	workers atomic.Int32
	quit    chan struct{} // closed by Close: workers exit
	grace   time.Duration // inlineGrace (tests lengthen it)
}

// NewServer serves impl, an implementation of desc's service.
func NewServer(desc *grpc.ServiceDesc, impl any, opts Options) *Server {
	if opts.MaxConcurrentCalls <= 0 {
		opts.MaxConcurrentCalls = 256
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	s := &Server{opts: opts, impl: impl, methods: map[string]*method{},
		conns: map[*serverConn]struct{}{}, work: make(chan task), quit: make(chan struct{}), grace: inlineGrace}
	for i := range desc.Methods {
		name := "/" + desc.ServiceName + "/" + desc.Methods[i].MethodName
		s.methods[name] = &method{name: name, unary: &desc.Methods[i], inline: opts.Inline != nil && opts.Inline(name)}
	}
	for i := range desc.Streams {
		// Only server streams (one request, many replies) are carried.
		if d := &desc.Streams[i]; d.ServerStreams && !d.ClientStreams {
			name := "/" + desc.ServiceName + "/" + d.StreamName
			s.methods[name] = &method{name: name, stream: d}
		}
	}
	return s
}

// Close closes every connection, cancelling their calls, and waits up to
// wait for the calls' handlers to return.
func (s *Server) Close(wait time.Duration) {
	s.mu.Lock()
	if !s.closed {
		close(s.quit)
	}
	s.closed = true
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close(errors.New("server closing"))
	}
	done := make(chan struct{})
	go func() { s.calls.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
	}
}

// Conns is the number of connections being served.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// ServeConn serves one connection whose Preface has been read, until it
// closes; it does the TLS handshake itself.
func (s *Server) ServeConn(raw net.Conn) {
	conn := raw
	p := &peer.Peer{Addr: raw.RemoteAddr(), LocalAddr: raw.LocalAddr()}
	if s.opts.TLS != nil {
		tc := tls.Server(raw, s.opts.TLS)
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.HandshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			s.opts.Log.Debug("native handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
			raw.Close()
			return
		}
		p.AuthInfo = credentials.TLSInfo{State: tc.ConnectionState(),
			CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
		conn = tc
	}
	_ = raw.SetDeadline(time.Time{})
	c := &serverConn{s: s, conn: conn, w: newWriter(conn), peer: p, calls: map[uint32]*serverCall{}, ended: make(chan struct{})}
	c.r.br, c.r.names = bufio.NewReaderSize(conn, 32<<10), interner{share: true}
	c.r.grace = time.AfterFunc(time.Hour, c.letGo) // reset by each call served inline
	c.r.grace.Stop()
	c.ctx = context.WithValue(peer.NewContext(context.Background(), p), memoKey{}, &c.memo)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		conn.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	c.read()
	<-c.ended
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

type serverConn struct {
	s    *Server
	conn net.Conn
	w    *writer
	peer *peer.Peer
	ctx  context.Context // the connection's values (peer, memo); its calls' contexts end by close

	mu     sync.Mutex
	calls  map[uint32]*serverCall
	closed bool // close ended the calls: no more start
	once   sync.Once
	memo   Memo
	ended  chan struct{} // closed when the connection's reading has ended

	// r is the reading's state, used by the one goroutine reading the
	// connection at a time (read hands it on).
	r struct {
		br      *bufio.Reader
		buf     []byte
		names   interner
		idleSet time.Time   // when the idle deadline was last moved; zero while another is in place
		cleared bool        // no read deadline is in place (IdleTimeout 0)
		grace   *time.Timer // letGo after inlineGrace
	}
	// held is odd while a call served by the reading goroutine holds the
	// reading: whoever moves it to the next even value (the call when it
	// ends, Waits, the grace timer) decides who reads on.
	held atomic.Uint64
}

// inlineGrace is how long a call served by the connection's reading
// goroutine may keep the connection unread before another goroutine reads
// on: the most the connection's other calls wait behind one that blocks
// without saying so (Waits). Long enough that a read that does not wait is
// not handed on when a busy machine deschedules its thread (a goroutine for
// the timer, another for the reading: at 1 ms, 256 clients' reads cost
// 14-18% more server CPU than the port's, at 20 ms 4-6% less).
const inlineGrace = 20 * time.Millisecond

// letGo hands the reading on to a worker if a call held it.
func (c *serverConn) letGo() {
	if v := c.held.Load(); v&1 == 1 && c.held.CompareAndSwap(v, v+1) {
		c.r.grace.Stop() // set before the reading began, never again
		c.s.run(c)
	}
}

// Waits tells the transport that the call whose context ctx is (or
// derives from) is about to wait: if its goroutine was reading the
// connection, another one reads on now, so the connection's later calls
// are not held behind it. Any other context: nothing.
func Waits(ctx context.Context) {
	if call, ok := ctx.Value(callKey{}).(*serverCall); ok {
		call.c.letGo()
	}
}

// A task is what a worker runs: a call, or a connection's reading.
type task interface{ run() }

func (call *serverCall) run() { call.serve() }
func (c *serverConn) run()    { c.read() }

// errHandedOff ends serve's loop in a goroutine that handed the reading on.
var errHandedOff = errors.New("wire: reading handed on")

// read reads the connection's frames until it ends, closing it then, or
// until this goroutine serves a call and another reads on.
func (c *serverConn) read() {
	err := c.serve()
	if errors.Is(err, errHandedOff) {
		return
	}
	c.r.grace.Stop()
	c.close(err)
	close(c.ended)
}

// method is a method the server serves: unary or a server stream.
type method struct {
	name   string
	unary  *grpc.MethodDesc
	stream *grpc.StreamDesc
	inline bool // Options.Inline
}

// serverCall is a call in flight: one allocation for what a call needs
// (its context, its transport stream, its request's buffer).
type serverCall struct {
	c       *serverConn
	id      uint32
	m       *method
	ctx     serverCtx // the call's context
	ts      transportStream
	pbuf    *[]byte // holds payload; back to the pool when the call ends
	payload []byte
	// md is the call's metadata when it was decoded anew (not the last
	// call's shared): made with the call, kept by the connection's
	// interner for the next call to share (and the call with it).
	md callMD
	// A stream's send credit (bytes), and the signal that it grew.
	credit   int64
	creditCh chan struct{}
}

func (call *serverCall) cancel() { call.ctx.cancel() }

func (c *serverConn) close(err error) {
	c.once.Do(func() {
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			c.s.opts.Log.Debug("native connection closed", "remote", c.peer.Addr.String(), "err", err)
		}
		c.w.fail(net.ErrClosed)
		c.conn.Close()
		// End the calls' contexts (they hold the connection's values only).
		c.mu.Lock()
		c.closed = true
		calls := make([]*serverCall, 0, len(c.calls))
		for _, call := range c.calls {
			calls = append(calls, call)
		}
		c.mu.Unlock()
		for _, call := range calls {
			call.cancel()
		}
	})
}

func (c *serverConn) inFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

// serve reads frames until the connection fails, the client closes it, or
// it is idle past IdleTimeout. A call of an Inline method with no frame
// behind it in the buffer (a client that waits for each reply) is served
// here, not handed to a worker whose wake-up it would wait for, as the
// ZooKeeper port serves its reads; if it waits (Waits) or outlasts
// inlineGrace, a worker reads on meanwhile and serve returns errHandedOff
// when the call is done. Other calls (writes, which wait for raft) go to a
// worker at once: handing the reading on instead costs their wait as much.
func (c *serverConn) serve() error {
	br, buf := c.r.br, c.r.buf
	// The idle deadline is moved at most once a step (an eighth of
	// IdleTimeout, at most a second; a deadline is a timer to move), not
	// at every frame: a connection is closed after between IdleTimeout and
	// IdleTimeout+step without a frame.
	idle := c.s.opts.IdleTimeout
	step := min(time.Second, idle/8)
	idleSet, cleared := &c.r.idleSet, &c.r.cleared
	for {
		if idle > 0 {
			if now := time.Now(); idleSet.IsZero() || now.Sub(*idleSet) >= step {
				_ = c.conn.SetReadDeadline(now.Add(idle + step))
				*idleSet = now
			}
		} else if !*cleared {
			_ = c.conn.SetReadDeadline(time.Time{})
			*cleared = true
		}
		if _, err := br.Peek(1); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && c.inFlight() > 0 {
				*idleSet = time.Time{}
				continue // idle only without calls: a watch stream is not idle
			}
			return err
		}
		if !frameBuffered(br) {
			// Reading the rest may wait for the network: bounded.
			_ = c.conn.SetReadDeadline(time.Now().Add(frameTimeout))
			*idleSet, *cleared = time.Time{}, false
		}
		kind, id, body, b, err := readFrame(br, buf)
		if err != nil {
			return err
		}
		buf = b
		switch kind {
		case kindCall:
			call, err := c.startCall(id, body)
			if err != nil {
				return err
			}
			if call == nil {
				break // refused
			}
			if call.m.inline && !frameBuffered(br) {
				// This goroutine serves the call, and reads on after it
				// unless it waited (Waits) or took longer than
				// inlineGrace: then a worker has read on meanwhile.
				c.r.buf = buf
				v := c.held.Add(1)
				c.r.grace.Reset(c.s.grace)
				call.serve()
				if !c.held.CompareAndSwap(v, v+1) {
					return errHandedOff
				}
				c.r.grace.Stop()
				continue
			}
			c.s.run(call)
		case kindCancel:
			c.mu.Lock()
			if call := c.calls[id]; call != nil {
				call.cancel()
			}
			c.mu.Unlock()
		case kindCredit:
			d := decoder{b: body}
			n := d.u32()
			if d.err != nil {
				return d.err
			}
			c.mu.Lock()
			if call := c.calls[id]; call != nil && call.creditCh != nil {
				call.credit += int64(n)
				select {
				case call.creditCh <- struct{}{}:
				default:
				}
			}
			c.mu.Unlock()
		default:
			return errMalformed
		}
		if cap(buf) > 1<<20 {
			buf = nil // a large request's buffer is not kept
		}
	}
}

// frameBuffered reports whether a whole frame is in br already, so that
// reading it cannot wait for the network.
func frameBuffered(br *bufio.Reader) bool {
	if br.Buffered() < 4 {
		return false
	}
	h, _ := br.Peek(4)
	return br.Buffered()-4 >= int(binary.BigEndian.Uint32(h))
}

// startCall decodes a call frame and registers the call, to be run by the
// caller; nil when it was refused (and answered). An error closes the
// connection (a malformed frame or a reused id).
func (c *serverConn) startCall(id uint32, body []byte) (*serverCall, error) {
	d := decoder{b: body}
	name := d.take(d.u16())
	timeout := time.Duration(d.u64())
	call := &serverCall{c: c, id: id}
	md := d.callMetadata(&c.r.names, &call.md)
	if d.err != nil {
		return nil, d.err
	}
	m := c.s.methods[string(name)]
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	call.m, call.ctx = m, serverCtx{parent: c.ctx, deadline: deadline} // its timer only if a handler waits
	call.ctx.call = call
	if m != nil && m.stream != nil {
		call.credit, call.creditCh = StreamWindowBytes, make(chan struct{}, 1)
	}
	c.mu.Lock()
	if _, dup := c.calls[id]; dup {
		c.mu.Unlock()
		return nil, errors.New("wire: call id in use")
	}
	refuse := error(nil)
	switch {
	case c.closed:
		c.mu.Unlock()
		return nil, net.ErrClosed
	case m == nil:
		refuse = status.Errorf(codes.Unimplemented, "unknown method %s", name)
	case len(c.calls) >= c.s.opts.MaxConcurrentCalls:
		refuse = status.Errorf(codes.ResourceExhausted, "more than %d calls in flight on one connection", c.s.opts.MaxConcurrentCalls)
	default:
		c.calls[id] = call
		// Counted under c.mu: Close marks the connection closed under it
		// before it waits, so a call is either counted before the wait or
		// refused above (an Add from zero during the Wait is a race).
		c.s.calls.Add(1)
	}
	c.mu.Unlock()
	if refuse != nil {
		c.reply(id, nil, refuse, nil)
		return nil, nil
	}
	// The request outlives the frame's buffer, which serve reuses; it
	// goes back to the pool when the call ends (unmarshal copies
	// what it keeps).
	call.pbuf = getFrame()
	*call.pbuf = append((*call.pbuf)[:0], d.b...)
	call.payload = *call.pbuf
	call.ts = transportStream{method: m.name, incoming: md}
	return call, nil
}

// serve runs the call's handler and sends its reply.
func (call *serverCall) serve() {
	c := call.c
	defer c.s.calls.Done()
	defer putFrame(call.pbuf)
	defer c.endCall(call.id)
	ctx := context.Context(&call.ctx) // its incoming metadata and transport stream too
	if md := call.m.unary; md != nil {
		dec := func(m any) error {
			if err := unmarshal(call.payload, m.(proto.Message)); err != nil {
				return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
			}
			return nil
		}
		resp, err := md.Handler(c.s.impl, ctx, dec, c.s.opts.Unary)
		c.reply(call.id, call.ts.headerMD(), err, resp)
		return
	}
	ss := &serverStream{c: c, id: call.id, call: call, ctx: ctx, ts: &call.ts, payload: call.payload}
	var err error
	if c.s.opts.Stream != nil {
		err = c.s.opts.Stream(c.s.impl, ss, &grpc.StreamServerInfo{FullMethod: call.m.name, IsServerStream: true}, call.m.stream.Handler)
	} else {
		err = call.m.stream.Handler(c.s.impl, ss)
	}
	c.reply(call.id, call.ts.headerMD(), err, nil)
}

// maxWorkers is how many goroutines wait for calls between them; a call
// that finds none idle gets a goroutine of its own. Reused goroutines keep
// the stacks the handlers grew (a new one starts small and grows by
// copying on nearly every call).
const maxWorkers = 256

// run runs t on an idle worker, or on a new goroutine, which becomes a
// worker when it finishes if there are fewer than maxWorkers.
func (s *Server) run(t task) {
	select {
	case s.work <- t:
	default:
		go s.worker(t)
	}
}

func (s *Server) worker(t task) {
	t.run()
	if s.workers.Add(1) > maxWorkers {
		s.workers.Add(-1)
		return
	}
	defer s.workers.Add(-1)
	for {
		select {
		case t := <-s.work:
			t.run()
		case <-s.quit:
			return
		}
	}
}

func (c *serverConn) endCall(id uint32) {
	c.mu.Lock()
	call := c.calls[id]
	delete(c.calls, id)
	c.mu.Unlock()
	if call != nil {
		call.cancel()
	}
}

// reply ends a call: its header, status and (unary, OK) message.
func (c *serverConn) reply(id uint32, header metadata.MD, err error, resp any) {
	fb := getFrame()
	defer putFrame(fb)
	b, start := appendReply(*fb, id, header, err, resp)
	if len(b)-start > MaxFrameBytes+4 {
		b, start = appendReply(b[:start], id, nil, status.Errorf(codes.ResourceExhausted, "reply larger than %d bytes", MaxFrameBytes), nil)
	}
	*fb = b
	_ = c.w.send(b[start:])
}

// appendReply appends a reply frame and returns where it starts.
func appendReply(b []byte, id uint32, header metadata.MD, err error, resp any) ([]byte, int) {
	b, start := beginFrame(b, kindReply, id)
	b = appendMetadata(b, header, nil)
	if err == nil {
		if m, ok := resp.(proto.Message); ok && m != nil {
			at := len(b)
			b = append(b, 0, 0, 0, 0)
			var merr error
			if b, merr = marshalAppend(b, m); merr != nil {
				b = b[:at]
				err = status.Errorf(codes.Internal, "grpc: error while marshaling: %v", merr)
			}
		} else {
			b = append(b, 0, 0, 0, 0)
		}
	}
	if err != nil {
		if _, ok := status.FromError(err); !ok && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			err = status.FromContextError(err).Err() // the call's deadline, not an unknown failure
		}
		b = appendStatus(b, status.Convert(err).Proto())
	}
	return endFrame(b, start), start
}

func appendStatus(b []byte, st *spb.Status) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b, _ = (proto.MarshalOptions{}).MarshalAppend(b, st)
	n := len(b) - at - 4
	b[at], b[at+1], b[at+2], b[at+3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return b
}

// transportStream carries a call's header metadata (grpc.SetHeader), and
// its incoming metadata for IncomingMetadata and IncomingValues.
type transportStream struct {
	method   string
	incoming *callMD
	mu       sync.Mutex
	header   metadata.MD
}

// IncomingMetadata is the metadata of the call ctx belongs to, when it
// came over this transport (false otherwise), without the copy that
// metadata.ValueFromIncomingContext makes of every value it returns. Keys
// are lower case. The map and its values must not be modified.
func IncomingMetadata(ctx context.Context) (metadata.MD, bool) {
	ts, ok := grpc.ServerTransportStreamFromContext(ctx).(*transportStream)
	if !ok {
		return nil, false
	}
	return ts.incoming.MD(), true
}

// IncomingValues is IncomingMetadata(ctx)[key] (key in lower case)
// without making the map: a server's interceptors look up a few keys of
// every call. The values must not be modified.
func IncomingValues(ctx context.Context, key string) ([]string, bool) {
	ts, ok := grpc.ServerTransportStreamFromContext(ctx).(*transportStream)
	if !ok {
		return nil, false
	}
	return ts.incoming.get(key), true
}

func (t *transportStream) Method() string { return t.method }

// SetHeader adds md to the reply's header. The first md is kept as it is
// (the caller must not modify it after); later ones are joined into a
// new map, which never writes to the maps it joins.
func (t *transportStream) SetHeader(md metadata.MD) error {
	t.mu.Lock()
	if t.header == nil {
		t.header = md
	} else {
		t.header = metadata.Join(t.header, md)
	}
	t.mu.Unlock()
	return nil
}

func (t *transportStream) SendHeader(md metadata.MD) error { return t.SetHeader(md) }

// SetTrailer accepts trailers and drops them: no handler of the service
// sets any, and clients of this transport read none.
func (t *transportStream) SetTrailer(metadata.MD) error { return nil }

func (t *transportStream) headerMD() metadata.MD {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.header
}

// serverStream is a server stream's grpc.ServerStream.
type serverStream struct {
	c       *serverConn
	id      uint32
	call    *serverCall
	ctx     context.Context
	ts      *transportStream
	payload []byte
	read    bool
}

func (s *serverStream) SetHeader(md metadata.MD) error  { return s.ts.SetHeader(md) }
func (s *serverStream) SendHeader(md metadata.MD) error { return s.ts.SetHeader(md) }
func (s *serverStream) SetTrailer(md metadata.MD)       {}
func (s *serverStream) Context() context.Context        { return s.ctx }

// RecvMsg returns the stream's one request, then io.EOF.
func (s *serverStream) RecvMsg(m any) error {
	if s.read {
		return io.EOF
	}
	s.read = true
	if err := unmarshal(s.payload, m.(proto.Message)); err != nil {
		return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
	}
	return nil
}

// SendMsg sends one message once the client has room for it.
func (s *serverStream) SendMsg(m any) error {
	for {
		s.c.mu.Lock()
		credit := s.call.credit
		s.c.mu.Unlock()
		if credit > 0 {
			break
		}
		select {
		case <-s.call.creditCh:
		case <-s.ctx.Done():
			return status.FromContextError(s.ctx.Err()).Err()
		}
	}
	fb := getFrame()
	defer putFrame(fb)
	b, start := beginFrame(*fb, kindMessage, s.id)
	b, err := marshalAppend(b, m.(proto.Message))
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	b = endFrame(b, start)
	*fb = b
	if len(b)-start > MaxFrameBytes+4 {
		return status.Errorf(codes.ResourceExhausted, "message larger than %d bytes", MaxFrameBytes)
	}
	s.c.mu.Lock()
	s.call.credit -= int64(len(b) - start)
	s.c.mu.Unlock()
	if err := s.c.w.send(b); err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	return nil
}

// Memo holds what a server derived from a connection and a key (what a
// call carries: its credentials, its session's password): in each of
// MemoSlots slots, the last key's value, so a client that sends the same
// credentials with every call has them resolved once a connection. The
// slots are the server's to assign, one a kind of fact; a value that can
// go stale (a session that ends) carries what the server checks it by.
type Memo struct {
	mu    sync.Mutex
	slots [MemoSlots]memoSlot
}

// MemoSlots is how many values a connection's Memo keeps.
const MemoSlots = 2

type memoSlot struct {
	key string
	val any
	set bool
}

type memoKey struct{}

// MemoFrom is the memo of the connection a call came on; nil for a call
// that did not come over this transport.
func MemoFrom(ctx context.Context) *Memo {
	m, _ := ctx.Value(memoKey{}).(*Memo)
	return m
}

// Get returns the value stored in slot (0 <= slot < MemoSlots) under key.
func (m *Memo) Get(slot int, key string) (any, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := &m.slots[slot]; e.set && e.key == key {
		return e.val, true
	}
	return nil, false
}

// Put stores v in slot under key, in place of what was stored there.
func (m *Memo) Put(slot int, key string, v any) {
	m.mu.Lock()
	m.slots[slot] = memoSlot{key: key, val: v, set: true}
	m.mu.Unlock()
}
