package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// ClientOptions configure a ClientConn.
type ClientOptions struct {
	// TLS secures the connection (nil: plaintext). An empty ServerName
	// is the address's host, as gRPC's.
	TLS *tls.Config
	// DialTimeout bounds one connection attempt (default 10 s).
	DialTimeout time.Duration
	// MaxConcurrentCalls in flight; further calls wait (default 256, the
	// server's limit).
	MaxConcurrentCalls int
	// Unary and Stream intercept every call, as gRPC's client
	// interceptors do (their *grpc.ClientConn argument is nil).
	Unary  []grpc.UnaryClientInterceptor
	Stream []grpc.StreamClientInterceptor
}

// ClientConn is a grpc.ClientConnInterface over this transport: the
// generated client of the service works on it unchanged. It dials on first
// use and again on the first call after its connection broke; a call in
// flight when it broke fails with Unavailable.
type ClientConn struct {
	addr string
	opts ClientOptions
	sem  chan struct{}
	next []grpc.UnaryInvoker // next[i]: what opts.Unary[i] calls on

	mu     sync.Mutex
	cur    *clientConn
	closed bool
	dialMu sync.Mutex // one dial at a time
}

var _ grpc.ClientConnInterface = (*ClientConn)(nil)

// Dial returns a connection to addr; it connects on the first call.
func Dial(addr string, opts ClientOptions) *ClientConn {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 10 * time.Second
	}
	if opts.MaxConcurrentCalls <= 0 {
		opts.MaxConcurrentCalls = 256
	}
	if opts.TLS != nil {
		opts.TLS = opts.TLS.Clone()
		opts.TLS.NextProtos = nil
		if opts.TLS.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			opts.TLS.ServerName = host
		}
	}
	c := &ClientConn{addr: addr, opts: opts, sem: make(chan struct{}, opts.MaxConcurrentCalls)}
	// Each interceptor's invoker, made once rather than on every call.
	c.next = make([]grpc.UnaryInvoker, len(opts.Unary))
	for i := range c.next {
		c.next[i] = func(ctx context.Context, method string, args, reply any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
			return c.chainUnary(i+1, ctx, method, args, reply, opts)
		}
	}
	return c
}

// Close closes the connection; calls in flight fail with Canceled.
func (c *ClientConn) Close() error {
	c.mu.Lock()
	c.closed = true
	cur := c.cur
	c.cur = nil
	c.mu.Unlock()
	if cur != nil {
		cur.fail(errClosing)
	}
	return nil
}

var errClosing = status.Error(codes.Canceled, "grpc: the client connection is closing")

// conn returns the live connection, dialling when there is none; with
// wait, failed dials are retried until ctx ends.
func (c *ClientConn) conn(ctx context.Context, wait bool) (*clientConn, error) {
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		cur, closed := c.cur, c.closed
		c.mu.Unlock()
		if closed {
			return nil, errClosing
		}
		if cur != nil && !cur.broken() {
			return cur, nil
		}
		cc, err := c.dial(ctx, cur)
		if err == nil {
			return cc, nil
		}
		if !wait {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(min(50*time.Millisecond<<min(attempt, 5), time.Second)):
		}
	}
}

// dial replaces old (nil or broken) with a new connection, unless another
// caller has already.
func (c *ClientConn) dial(ctx context.Context, old *clientConn) (*clientConn, error) {
	c.dialMu.Lock()
	defer c.dialMu.Unlock()
	c.mu.Lock()
	if c.cur != old && c.cur != nil && !c.cur.broken() {
		cur := c.cur
		c.mu.Unlock()
		return cur, nil
	}
	c.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(dctx, "tcp", c.addr)
	if err != nil {
		return nil, status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: "+err.Error()+"\"")
	}
	if deadline, ok := dctx.Deadline(); ok {
		_ = raw.SetDeadline(deadline)
	}
	if _, err := io.WriteString(raw, Preface); err != nil {
		raw.Close()
		return nil, status.Error(codes.Unavailable, "connection error: desc = \"transport: "+err.Error()+"\"")
	}
	conn := raw
	if c.opts.TLS != nil {
		tc := tls.Client(raw, c.opts.TLS)
		if err := tc.HandshakeContext(dctx); err != nil {
			raw.Close()
			return nil, status.Error(codes.Unavailable, "connection error: desc = \"transport: authentication handshake failed: "+err.Error()+"\"")
		}
		conn = tc
	}
	_ = raw.SetDeadline(time.Time{})
	cc := &clientConn{conn: conn, w: newWriter(conn), pending: map[uint32]*pendingCall{}, done: make(chan struct{})}
	go cc.readLoop()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cc.fail(errClosing)
		return nil, errClosing
	}
	c.cur = cc
	c.mu.Unlock()
	return cc, nil
}

// clientConn is one connection and its calls in flight.
type clientConn struct {
	conn net.Conn
	w    *writer
	done chan struct{} // closed when it fails

	mu      sync.Mutex
	next    uint32
	pending map[uint32]*pendingCall
	err     error

	names interner // readLoop's only
}

// pendingCall is a call waiting for its reply (and a stream's messages).
type pendingCall struct {
	header metadata.MD // the reply's header metadata, decoded by readLoop
	reply  []byte      // the rest of the reply frame's body, once it came
	buf    *[]byte     // reply's buffer, from the frame pool
	// done is signalled once reply or err is set (finish): a unary
	// call's by a send (its call then reuses it), a stream's by close.
	done   chan struct{}
	err    error
	stream bool
	msgs   [][]byte      // a stream's messages not yet received
	queued int           // their bytes
	more   chan struct{} // signalled when msgs grows (streams)

	// A unary call waited for under a deadline (await): its connection
	// and id, and the timer that ends it at the deadline or on cancel
	// (made once, kept with p in the pool); kept: the timer fired, so p
	// may still be in use by expire and goes back to no pool.
	cc     *clientConn
	id     uint32
	expiry *time.Timer
	kept   bool
}

// finish signals that the call's reply or error is set. Caller took p
// out of pending.
func (p *pendingCall) finish() {
	if p.stream {
		close(p.done)
	} else {
		p.done <- struct{}{} // room for the one signal of each use
	}
}

// pendingPool recycles unary calls' pendingCalls, with their channels.
var pendingPool = sync.Pool{New: func() any { return &pendingCall{done: make(chan struct{}, 1)} }}

func putPending(p *pendingCall) {
	if p.kept {
		return
	}
	*p = pendingCall{done: p.done, expiry: p.expiry}
	pendingPool.Put(p)
}

// errExpired is a pendingCall's err when its deadline or cancel ended it
// (expire): the caller reports its context's error instead.
var errExpired = errors.New("wire: the call's context ended")

// expire ends p, if its call is still pending, with errExpired: the
// timer await armed fired (the deadline, or the context's cancel).
func (p *pendingCall) expire() {
	cc := p.cc
	cc.mu.Lock()
	if cc.pending[p.id] != p {
		cc.mu.Unlock()
		return // answered, or failed with the connection
	}
	delete(cc.pending, p.id)
	p.err = errExpired
	cc.mu.Unlock()
	p.finish()
}

// await waits for p's reply, or for ctx's end: nil when the reply (or the
// connection's failure, in p.err) came first, ctx's error otherwise. A
// callCtx over a parent that never ends (the client's calls without a
// deadline of their own) is waited on with p's own timer ending the call
// (cancel fires it at once), so the waiter receives on one channel
// instead of selecting on two, and makes no timer a call.
func (cc *clientConn) await(ctx context.Context, id uint32, p *pendingCall) error {
	c, ok := ctx.(*callCtx)
	if ok {
		c.mu.Lock()
		ok = c.live.Load() == nil && !c.cancelled && c.timer == nil && !c.deadline.IsZero() && c.parent.Done() == nil
		if ok {
			p.cc, p.id = cc, id
			if p.expiry == nil {
				p.expiry = time.AfterFunc(time.Until(c.deadline), p.expire)
			} else {
				p.expiry.Reset(time.Until(c.deadline))
			}
			c.timer = p.expiry
		}
		c.mu.Unlock()
	}
	if !ok {
		return wait(ctx, p.done)
	}
	<-p.done
	c.mu.Lock()
	c.timer = nil
	c.mu.Unlock()
	if !p.expiry.Stop() {
		p.kept = true // expire ran, or runs still
	}
	if p.err != errExpired {
		return nil
	}
	if err := c.Err(); err != nil {
		return err
	}
	// Only cancel or the deadline fire the timer; the deadline is past
	// now (Err says so from here on).
	return context.DeadlineExceeded
}

func (cc *clientConn) broken() bool {
	select {
	case <-cc.done:
		return true
	default:
		return false
	}
}

// fail ends the connection and every call in flight with err.
func (cc *clientConn) fail(err error) {
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return
	}
	cc.err = err
	pending := cc.pending
	cc.pending = map[uint32]*pendingCall{}
	close(cc.done)
	cc.mu.Unlock()
	cc.w.fail(err)
	cc.conn.Close()
	for _, p := range pending {
		p.err = err
		p.finish()
	}
}

func (cc *clientConn) readLoop() {
	br := bufio.NewReaderSize(cc.conn, 32<<10)
	for {
		// A reply's buffer goes back to the pool once the call decoded it
		// (invoke); a stream's messages keep theirs.
		fb := getFrame()
		kind, id, body, b, err := readFrame(br, *fb)
		*fb = b
		if err != nil {
			cc.fail(status.Error(codes.Unavailable, "error reading from server: "+err.Error()))
			return
		}
		cc.mu.Lock()
		p := cc.pending[id]
		switch {
		case p == nil:
			// A call that was cancelled or timed out: drop its frames.
			putFrame(fb)
		case kind == kindReply:
			// The header is decoded here, where the connection's
			// repeated keys and values are kept (the interner is this
			// goroutine's).
			d := decoder{b: body}
			header := d.metadata(&cc.names)
			if d.err != nil {
				cc.mu.Unlock()
				cc.fail(status.Error(codes.Unavailable, d.err.Error()))
				return
			}
			delete(cc.pending, id)
			p.header, p.reply, p.buf = header, d.b, fb
			p.finish()
		case kind == kindMessage && p.stream:
			if p.queued+len(body) > 2*StreamWindowBytes+MaxFrameBytes {
				cc.mu.Unlock()
				cc.fail(status.Error(codes.Unavailable, "server overran a stream's window"))
				return
			}
			p.msgs = append(p.msgs, body)
			p.queued += len(body)
			select {
			case p.more <- struct{}{}:
			default:
			}
		default:
			cc.mu.Unlock()
			cc.fail(status.Error(codes.Unavailable, fmt.Sprintf("unexpected frame kind %d from server", kind)))
			return
		}
		cc.mu.Unlock()
	}
}

// start registers a call and sends its frame, with the context's outgoing
// metadata, out's pairs and more's.
func (cc *clientConn) start(ctx context.Context, method string, req any, stream bool, out []string, more Pairs) (uint32, *pendingCall, error) {
	var p *pendingCall
	if stream {
		p = &pendingCall{done: make(chan struct{}), stream: true, more: make(chan struct{}, 1)}
	} else {
		p = pendingPool.Get().(*pendingCall)
	}
	cc.mu.Lock()
	if cc.err != nil {
		err := cc.err
		cc.mu.Unlock()
		return 0, nil, err
	}
	cc.next++
	id := cc.next
	cc.pending[id] = p
	cc.mu.Unlock()

	fb := getFrame()
	defer putFrame(fb)
	b, start := beginFrame(*fb, kindCall, id)
	b = append(b, byte(len(method)>>8), byte(len(method)))
	b = append(b, method...)
	var timeout uint64
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		if left <= 0 {
			cc.forget(id)
			return 0, nil, status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
		timeout = uint64(left)
	}
	b = append(b, byte(timeout>>56), byte(timeout>>48), byte(timeout>>40), byte(timeout>>32),
		byte(timeout>>24), byte(timeout>>16), byte(timeout>>8), byte(timeout))
	md, _ := metadata.FromOutgoingContext(ctx)
	b = appendPairs(b, md, out, more)
	b, err := marshalAppend(b, req.(proto.Message))
	if err != nil {
		cc.forget(id)
		return 0, nil, status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	b = endFrame(b, start)
	*fb = b
	if len(b)-start-4 > MaxFrameBytes {
		cc.forget(id)
		return 0, nil, status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", len(b), MaxFrameBytes)
	}
	if err := cc.w.send(b); err != nil {
		cc.forget(id)
		return 0, nil, status.Error(codes.Unavailable, "connection error: "+err.Error())
	}
	return id, p, nil
}

func (cc *clientConn) forget(id uint32) {
	cc.mu.Lock()
	delete(cc.pending, id)
	cc.mu.Unlock()
}

// cancel tells the server a call is abandoned and forgets it.
func (cc *clientConn) cancel(id uint32) {
	cc.forget(id)
	fb := getFrame()
	defer putFrame(fb)
	b, start := beginFrame(*fb, kindCancel, id)
	*fb = endFrame(b, start)
	_ = cc.w.send(*fb)
}

// CallMetadata is this transport's own call option: metadata sent with
// the call without going through the context (Out: key, value, key,
// value…, keys in lower case), and where to store the reply's header
// metadata (Header, nil: not wanted). It spares a caller that adds the
// same few keys to every call the context and map copies of
// metadata.AppendToOutgoingContext. gRPC ignores it (it embeds
// grpc.EmptyCallOption): a caller that may run on gRPC too must use the
// context there.
type CallMetadata struct {
	grpc.EmptyCallOption
	Out    []string
	Header *metadata.MD
}

// callOptions are the grpc.CallOptions this transport honours.
type callOptions struct {
	wait    bool
	header  *metadata.MD
	trailer *metadata.MD
	peer    *peer.Peer
	maxRecv int
	out     []string // CallMetadata's
}

func parseOptions(opts []grpc.CallOption) (callOptions, error) {
	co := callOptions{maxRecv: MaxFrameBytes}
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.StaticMethodCallOption:
		case grpc.FailFastCallOption:
			co.wait = !o.FailFast
		case grpc.HeaderCallOption:
			co.header = o.HeaderAddr
		case grpc.TrailerCallOption:
			co.trailer = o.TrailerAddr
		case grpc.PeerCallOption:
			co.peer = o.PeerAddr
		case grpc.MaxRecvMsgSizeCallOption:
			co.maxRecv = min(co.maxRecv, o.MaxRecvMsgSize)
		case grpc.MaxSendMsgSizeCallOption:
			// Sends are bounded by MaxFrameBytes.
		case *CallMetadata:
			if len(o.Out)%2 == 1 {
				return co, status.Error(codes.Internal, "wire: CallMetadata.Out has a key without a value")
			}
			if co.out == nil {
				co.out = o.Out[:len(o.Out):len(o.Out)] // appended to: copied
			} else {
				co.out = append(co.out, o.Out...)
			}
			if o.Header != nil {
				co.header = o.Header
			}
		default:
			return co, status.Errorf(codes.Internal, "wire: call option %T is not supported", o)
		}
	}
	return co, nil
}

// Invoke runs a unary call through the interceptors.
func (c *ClientConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.chainUnary(0, ctx, method, args, reply, opts)
}

func (c *ClientConn) chainUnary(i int, ctx context.Context, method string, args, reply any, opts []grpc.CallOption) error {
	if i == len(c.opts.Unary) {
		return c.invoke(ctx, method, args, reply, opts)
	}
	return c.opts.Unary[i](ctx, method, args, reply, nil, c.next[i], opts...)
}

func (c *ClientConn) acquire(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	default: // full: wait (ctx.Done makes a callCtx's timer)
	}
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

func (c *ClientConn) release() { <-c.sem }

func (c *ClientConn) invoke(ctx context.Context, method string, args, reply any, opts []grpc.CallOption) error {
	co, err := parseOptions(opts)
	if err != nil {
		return err
	}
	return c.invokeWith(ctx, method, args, reply, &co, nil)
}

// Call runs a unary call as Invoke does, without the interceptors or call
// options: pairs (nil: none) append the metadata sent with it besides the
// context's, and header, if not nil, receives the reply's header metadata.
// For a caller that is its own interceptor (the client's credentials, zxid
// and view), spared the chain, the options and the strings of its pairs.
func (c *ClientConn) Call(ctx context.Context, method string, args, reply any, pairs Pairs, header *metadata.MD) error {
	co := callOptions{maxRecv: MaxFrameBytes, header: header}
	return c.invokeWith(ctx, method, args, reply, &co, pairs)
}

// invokeWith runs a unary call under co, with pairs' metadata. pairs is a
// parameter of its own, not a field of co: it is passed to an interface
// method, so it escapes, and as a field it would take co's header (Call's
// caller's variable) to the heap with it.
func (c *ClientConn) invokeWith(ctx context.Context, method string, args, reply any, co *callOptions, pairs Pairs) error {
	if err := c.acquire(ctx); err != nil {
		return err
	}
	defer c.release()
	cc, err := c.conn(ctx, co.wait)
	if err != nil {
		return err
	}
	id, p, err := cc.start(ctx, method, args, false, co.out, pairs)
	if err != nil {
		return err
	}
	if err := cc.await(ctx, id, p); err != nil {
		cc.cancel(id)
		return status.FromContextError(err).Err()
	}
	// Signalled: nothing else holds p (readLoop and fail took it out of
	// pending before signalling).
	defer putPending(p)
	if p.err != nil {
		return p.err
	}
	if co.peer != nil {
		co.peer.Addr, co.peer.LocalAddr = cc.conn.RemoteAddr(), cc.conn.LocalAddr()
	}
	defer putFrame(p.buf) // decodeStatus and Unmarshal copy what they keep
	st, payload, err := decodeStatus(p.reply)
	if err != nil {
		cc.fail(status.Error(codes.Unavailable, err.Error()))
		return status.Error(codes.Unavailable, err.Error())
	}
	if co.header != nil {
		*co.header = p.header
	}
	if co.trailer != nil {
		*co.trailer = metadata.MD{}
	}
	if st != nil {
		return status.FromProto(st).Err()
	}
	if len(payload) > co.maxRecv {
		return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", len(payload), co.maxRecv)
	}
	if err := unmarshal(payload, reply.(proto.Message)); err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	return nil
}

// decodeStatus splits what follows a reply's header: its status (nil when
// the call succeeded) and message.
func decodeStatus(b []byte) (*spb.Status, []byte, error) {
	d := decoder{b: b}
	n := d.u32()
	raw := d.take(int(n))
	if d.err != nil {
		return nil, nil, d.err
	}
	if n == 0 {
		return nil, d.b, nil
	}
	st := &spb.Status{}
	if err := proto.Unmarshal(raw, st); err != nil {
		return nil, nil, errMalformed
	}
	if st.GetCode() == int32(codes.OK) {
		st.Code = int32(codes.Unknown) // an error reply must not read as success
	}
	return st, nil, nil
}

// NewStream opens a server stream (one request, many replies): the only
// kind the service has.
func (c *ClientConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.chainStream(0, ctx, desc, method, opts)
}

func (c *ClientConn) chainStream(i int, ctx context.Context, desc *grpc.StreamDesc, method string, opts []grpc.CallOption) (grpc.ClientStream, error) {
	if i == len(c.opts.Stream) {
		return c.newStream(ctx, desc, method, opts)
	}
	return c.opts.Stream[i](ctx, desc, nil, method, func(ctx context.Context, desc *grpc.StreamDesc, _ *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return c.chainStream(i+1, ctx, desc, method, opts)
	}, opts...)
}

func (c *ClientConn) newStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts []grpc.CallOption) (grpc.ClientStream, error) {
	if desc.ClientStreams || !desc.ServerStreams {
		return nil, status.Errorf(codes.Unimplemented, "wire: %s: only server streams are carried", method)
	}
	co, err := parseOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	cc, err := c.conn(ctx, co.wait)
	if err != nil {
		c.release()
		return nil, err
	}
	return &clientStream{c: c, cc: cc, ctx: ctx, method: method, opts: co}, nil
}

// clientStream is a server stream's grpc.ClientStream. The request goes
// out with SendMsg; RecvMsg returns the messages, then io.EOF or the
// call's error.
type clientStream struct {
	c      *ClientConn
	cc     *clientConn
	ctx    context.Context
	method string
	opts   callOptions

	id       uint32
	p        *pendingCall
	sent     bool
	ended    bool
	err      error
	header   metadata.MD
	consumed int // bytes received and not yet returned as credit
	stop     chan struct{}
	slot     sync.Once // releases the call's slot
}

func (s *clientStream) Header() (metadata.MD, error) { return s.header, nil }
func (s *clientStream) Trailer() metadata.MD         { return nil }
func (s *clientStream) CloseSend() error             { return nil }
func (s *clientStream) Context() context.Context     { return s.ctx }

func (s *clientStream) SendMsg(m any) error {
	if s.sent {
		return status.Error(codes.Internal, "wire: a server stream takes one request")
	}
	s.sent = true
	id, p, err := s.cc.start(s.ctx, s.method, m, true, s.opts.out, nil)
	if err != nil {
		s.finish(err)
		return err
	}
	s.id, s.p, s.stop = id, p, make(chan struct{})
	go func() {
		select {
		case <-s.ctx.Done():
			s.cc.cancel(id)
			s.slot.Do(s.c.release)
		case <-p.done:
		case <-s.stop:
		}
	}()
	return nil
}

// finish ends the stream once: its slot is released.
func (s *clientStream) finish(err error) error {
	if !s.ended {
		s.ended, s.err = true, err
		if s.stop != nil {
			close(s.stop)
		}
		s.slot.Do(s.c.release)
	}
	return s.err
}

func (s *clientStream) RecvMsg(m any) error {
	if s.ended {
		return s.err
	}
	if !s.sent {
		return status.Error(codes.Internal, "wire: RecvMsg before SendMsg")
	}
	p := s.p
	for {
		s.cc.mu.Lock()
		if len(p.msgs) > 0 {
			msg := p.msgs[0]
			p.msgs[0] = nil
			p.msgs = p.msgs[1:]
			p.queued -= len(msg)
			s.cc.mu.Unlock()
			s.credit(len(msg) + headerBytes)
			if err := unmarshal(msg, m.(proto.Message)); err != nil {
				s.cc.cancel(s.id)
				return s.finish(status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err))
			}
			return nil
		}
		s.cc.mu.Unlock()
		select {
		case <-p.more:
			continue
		case <-p.done:
		case <-s.ctx.Done():
			s.cc.cancel(s.id)
			return s.finish(status.FromContextError(s.ctx.Err()).Err())
		}
		// The reply came (or the connection failed): messages that came
		// before it are still delivered first.
		s.cc.mu.Lock()
		more := len(p.msgs) > 0
		s.cc.mu.Unlock()
		if more {
			continue
		}
		if p.err != nil {
			return s.finish(p.err)
		}
		st, _, err := decodeStatus(p.reply)
		if err != nil {
			s.cc.fail(status.Error(codes.Unavailable, err.Error()))
			return s.finish(status.Error(codes.Unavailable, err.Error()))
		}
		s.header = p.header
		if st != nil {
			return s.finish(status.FromProto(st).Err())
		}
		return s.finish(io.EOF)
	}
}

// credit returns consumed bytes to the server in halves of its window.
func (s *clientStream) credit(n int) {
	s.consumed += n
	if s.consumed < StreamWindowBytes/2 {
		return
	}
	fb := getFrame()
	defer putFrame(fb)
	b, start := beginFrame(*fb, kindCredit, s.id)
	b = append(b, byte(s.consumed>>24), byte(s.consumed>>16), byte(s.consumed>>8), byte(s.consumed))
	*fb = endFrame(b, start)
	s.consumed = 0
	_ = s.cc.w.send(*fb)
}
