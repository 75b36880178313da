// Package netem emulates wide-area links between processes on one machine: a
// Link is a userspace TCP proxy that listens on a local address, forwards
// every accepted connection to a target, and delays each direction by a
// configured one-way delay plus seeded jitter.
//
// Each direction of each connection is a timestamped queue: a reader stamps
// every chunk it reads with its delivery time (now + delay + jitter) and a
// writer delivers chunks when their time comes. Reading never waits for the
// delay, so a link carries its full bandwidth however long the delay (a
// sleep-per-read proxy would cap a connection at one chunk per delay).
// Delivery times never decrease within a direction, so jitter never reorders
// bytes: a chunk whose sampled delay is shorter than its predecessor's waits
// for it (the observed mean delay is therefore slightly above the configured
// one when jitter is large compared with the gaps between chunks).
// A writer waits without holding a thread (a Go timer, then on Linux a
// timerfd in the netpoller for the last millisecond), because every link of
// a benchmark lives in one process and must not queue behind another's wait.
//
// Fault tests partition links with Block: BlockBlackhole holds traffic (no
// byte crosses; queued bytes are delivered after Unblock, as TCP retransmits
// after a partition heals) and holds new connections unconnected until
// Unblock, as a dropped SYN would; BlockReset resets every connection and
// every new one at once, as a peer that rebooted would.
//
// Limits: each direction of a connection queues at most MaxQueueBytes; at the
// limit the reader stops reading, so the sender is flow-controlled by TCP,
// as behind a full window, and no data is ever dropped. A link holds at most
// MaxConns connections; further ones are closed on accept. On Linux each
// direction of a connection holds one timerfd; where one cannot be had
// (file descriptors exhausted), that direction falls back to nanosleep.
package netem

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Jitter distributions.
type Dist int

const (
	// Uniform adds a delay drawn uniformly from [-Jitter, +Jitter].
	Uniform Dist = iota
	// Normal adds a normally distributed delay with standard deviation
	// Jitter, truncated to ±4 standard deviations.
	Normal
)

// BlockMode says how Block partitions a link.
type BlockMode int

const (
	// BlockBlackhole holds traffic and new connections until Unblock.
	BlockBlackhole BlockMode = iota + 1
	// BlockReset resets existing connections and every new one.
	BlockReset
)

func (m BlockMode) String() string {
	switch m {
	case BlockBlackhole:
		return "blackhole"
	case BlockReset:
		return "reset"
	}
	return "none"
}

// Config configures a Link.
type Config struct {
	Listen string // local address to listen on; default "127.0.0.1:0"
	Target string // address every connection is forwarded to (required)

	Delay  time.Duration // one-way delay of each direction (half the RTT)
	Jitter time.Duration // see Dist
	Dist   Dist
	Seed   uint64 // seeds the jitter; equal seeds give equal sequences per link

	MaxQueueBytes int           // per direction of each connection; default 4 MiB
	MaxConns      int           // default 1024
	DialTimeout   time.Duration // to the target; default 5 s
}

// Stats counts what a link has carried.
type Stats struct {
	Accepted      int64 // connections accepted
	Rejected      int64 // closed on accept: over MaxConns, reset mode, or target unreachable
	BytesForward  int64 // client → target, delivered
	BytesBackward int64 // target → client, delivered
	// Chunks are the writes that delivered those bytes (one per read from
	// the source): how many pieces a protocol's messages travel in.
	ChunksForward, ChunksBackward int64
}

// Link is one emulated link. Its methods are safe for concurrent use.
type Link struct {
	cfg Config
	ln  net.Listener

	mu struct {
		sync.Mutex
		delay, jitter time.Duration
		dist          Dist
		rng           *rand.Rand
		block         BlockMode
		unblocked     chan struct{} // closed by Unblock; replaced by Block
		conns         map[*conn]struct{}
		closed        bool
	}
	accepted, rejected atomic.Int64
	fwd, bwd           atomic.Int64 // bytes
	fwdN, bwdN         atomic.Int64 // chunks

	wg   sync.WaitGroup
	done chan struct{}
}

// Listen starts a link.
func Listen(cfg Config) (*Link, error) {
	if cfg.Target == "" {
		return nil, errors.New("netem: Target is required")
	}
	if cfg.Delay < 0 || cfg.Jitter < 0 {
		return nil, errors.New("netem: negative delay or jitter")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.MaxQueueBytes <= 0 {
		cfg.MaxQueueBytes = 4 << 20
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 1024
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("netem: %w", err)
	}
	l := &Link{cfg: cfg, ln: ln, done: make(chan struct{})}
	l.mu.delay, l.mu.jitter, l.mu.dist = cfg.Delay, cfg.Jitter, cfg.Dist
	l.mu.rng = rand.New(rand.NewPCG(cfg.Seed, 0x6e6574656d))
	l.mu.unblocked = make(chan struct{})
	close(l.mu.unblocked)
	l.mu.conns = map[*conn]struct{}{}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Addr is the address clients dial instead of the target.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Target is where the link forwards to.
func (l *Link) Target() string { return l.cfg.Target }

// Delay returns the current one-way delay and jitter.
func (l *Link) Delay() (oneWay, jitter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.delay, l.mu.jitter
}

// SetDelay changes the one-way delay and jitter of chunks read from now on;
// chunks already queued keep their delivery times.
func (l *Link) SetDelay(oneWay, jitter time.Duration, dist Dist) {
	if oneWay < 0 {
		oneWay = 0
	}
	if jitter < 0 {
		jitter = 0
	}
	l.mu.Lock()
	l.mu.delay, l.mu.jitter, l.mu.dist = oneWay, jitter, dist
	l.mu.Unlock()
}

// Block partitions the link (see BlockMode). Blocking a blocked link changes
// its mode.
func (l *Link) Block(mode BlockMode) {
	if mode != BlockBlackhole && mode != BlockReset {
		panic("netem: unknown block mode")
	}
	l.mu.Lock()
	if l.mu.block == 0 {
		l.mu.unblocked = make(chan struct{})
	}
	l.mu.block = mode
	var victims []*conn
	if mode == BlockReset {
		for c := range l.mu.conns {
			victims = append(victims, c)
		}
	}
	l.mu.Unlock()
	for _, c := range victims {
		c.reset()
	}
}

// Unblock heals the partition: held bytes and connections proceed.
func (l *Link) Unblock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.block != 0 {
		l.mu.block = 0
		close(l.mu.unblocked)
	}
}

// Blocked returns the current block mode (0 when unblocked).
func (l *Link) Blocked() BlockMode {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.block
}

// Stats returns counters.
func (l *Link) Stats() Stats {
	return Stats{Accepted: l.accepted.Load(), Rejected: l.rejected.Load(),
		BytesForward: l.fwd.Load(), BytesBackward: l.bwd.Load(),
		ChunksForward: l.fwdN.Load(), ChunksBackward: l.bwdN.Load()}
}

// Close stops listening and closes every connection; queued bytes are lost.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return nil
	}
	l.mu.closed = true
	close(l.done)
	var all []*conn
	for c := range l.mu.conns {
		all = append(all, c)
	}
	l.mu.Unlock()
	err := l.ln.Close()
	for _, c := range all {
		c.close()
	}
	l.wg.Wait()
	return err
}

// deliverAt samples the delivery time of a chunk read now.
func (l *Link) deliverAt(now time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.mu.delay
	if j := l.mu.jitter; j > 0 {
		var x float64
		switch l.mu.dist {
		case Normal:
			x = math.Max(-4, math.Min(4, l.mu.rng.NormFloat64()))
		default:
			x = 2*l.mu.rng.Float64() - 1
		}
		d += time.Duration(x * float64(j))
	}
	if d < 0 {
		d = 0
	}
	return now.Add(d)
}

// gate returns nil when traffic may flow, or a channel closed at Unblock.
func (l *Link) gate() (BlockMode, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.block == 0 {
		return 0, nil
	}
	return l.mu.block, l.mu.unblocked
}

func (l *Link) acceptLoop() {
	defer l.wg.Done()
	for {
		in, err := l.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		l.accepted.Add(1)
		c := &conn{l: l, in: in.(*net.TCPConn), done: make(chan struct{})}
		l.mu.Lock()
		if l.mu.closed || len(l.mu.conns) >= l.cfg.MaxConns || l.mu.block == BlockReset {
			l.mu.Unlock()
			l.rejected.Add(1)
			resetTCP(c.in)
			continue
		}
		l.mu.conns[c] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go c.run()
	}
}

// resetTCP closes with SO_LINGER 0, so the peer sees a reset, not an EOF.
func resetTCP(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

type conn struct {
	l       *Link
	in, out *net.TCPConn

	once    sync.Once
	done    chan struct{}
	isReset atomic.Bool
	qs      [2]*queue // forward, backward; shut by close (set with out)
}

func (c *conn) run() {
	defer c.l.wg.Done()
	defer func() {
		c.close()
		c.l.mu.Lock()
		delete(c.l.mu.conns, c)
		c.l.mu.Unlock()
	}()
	// A blackholed link holds a new connection before dialing the target:
	// to the client it is a connection on which nothing ever answers.
	if mode, ch := c.l.gate(); mode == BlockBlackhole {
		select {
		case <-ch:
		case <-c.done:
			return
		}
	}
	d := net.Dialer{Timeout: c.l.cfg.DialTimeout}
	out, err := d.Dial("tcp", c.l.cfg.Target)
	if err != nil {
		c.l.rejected.Add(1)
		resetTCP(c.in)
		return
	}
	fwd, bwd := c.newQueue(), c.newQueue()
	c.l.mu.Lock()
	c.out = out.(*net.TCPConn)
	c.qs = [2]*queue{fwd, bwd}
	c.l.mu.Unlock()
	select {
	case <-c.done: // reset or closed while dialing
		c.close()
		return
	default:
	}
	c.in.SetNoDelay(true)
	c.out.SetNoDelay(true)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.pipe(c.in, c.out, fwd, &c.l.fwd, &c.l.fwdN) }()
	go func() { defer wg.Done(); c.pipe(c.out, c.in, bwd, &c.l.bwd, &c.l.bwdN) }()
	wg.Wait()
}

// reset makes both ends see a connection reset.
func (c *conn) reset() {
	c.isReset.Store(true)
	c.close()
}

func (c *conn) close() {
	c.once.Do(func() {
		close(c.done)
		c.l.mu.Lock()
		out, qs := c.out, c.qs
		c.l.mu.Unlock()
		for _, q := range qs {
			if q != nil {
				q.shut()
			}
		}
		if c.isReset.Load() {
			resetTCP(c.in)
			if out != nil {
				resetTCP(out)
			}
			return
		}
		c.in.Close()
		if out != nil {
			out.Close()
		}
	})
}

type chunk struct {
	b  []byte // nil: EOF from the source
	at time.Time
}

// queue is one direction's timestamped queue, bounded in bytes. It keeps
// the buffers of up to maxFree delivered chunks for the next ones read: a
// proxy that allocated every chunk afresh made the benchmark process
// collect its own garbage as often as the client library it measures.
type queue struct {
	mu     sync.Mutex
	cond   sync.Cond
	q      []chunk // from head on: the chunks not yet popped
	head   int
	bytes  int
	max    int
	closed bool
	free   [][]byte // delivered chunks' buffers, each at most maxPooled
}

// maxFree bounds the buffers a direction keeps between chunks: with no
// added delay one chunk is in flight at a time; with a delay the chunks
// beyond these are allocated and collected.
const maxFree = 2

// maxPooled is the largest buffer a direction keeps: a read's, so every
// chunk's buffer can be kept (with a 16 KiB bound, the servers' batched
// messages to each other under load were allocated afresh chunk by chunk:
// more than half the benchmark process's garbage). minChunk is the
// smallest buffer it allocates (so a buffer fits the next small message
// too).
const (
	maxPooled = readSize
	minChunk  = 4 << 10
)

// push queues a copy of data to be delivered at at; nil data is the EOF.
// False once the queue is shut.
func (q *queue) push(data []byte, at time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	// An empty queue always takes a chunk, so a chunk larger than max passes.
	for !q.closed && q.bytes > 0 && q.bytes+len(data) > q.max {
		q.cond.Wait()
	}
	if q.closed {
		return false
	}
	var b []byte
	if data != nil {
		b = q.buffer(len(data))
		copy(b, data)
	}
	if q.head > 0 && len(q.q) == cap(q.q) {
		n := copy(q.q, q.q[q.head:])
		clear(q.q[n:])
		q.q, q.head = q.q[:n], 0
	}
	q.q = append(q.q, chunk{b: b, at: at})
	q.bytes += len(b)
	q.cond.Broadcast()
	return true
}

// buffer is n bytes for a chunk: the smallest kept buffer large enough,
// when there is one.
// Caller holds q.mu.
func (q *queue) buffer(n int) []byte {
	best := -1 // the smallest kept buffer n fits in
	for i, b := range q.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(q.free[best])) {
			best = i
		}
	}
	if best < 0 {
		return make([]byte, n, max(n, minChunk))
	}
	b, last := q.free[best], len(q.free)-1
	q.free[best], q.free[last] = q.free[last], nil
	q.free = q.free[:last]
	return b[:n]
}

// keep keeps a delivered chunk's buffer for a later chunk: with maxFree
// kept already, in place of the smallest if it is larger (small buffers
// would otherwise crowd out the one the next large chunk fits in).
func (q *queue) keep(b []byte) {
	if b == nil || cap(b) > maxPooled {
		return
	}
	if len(q.free) < maxFree {
		q.free = append(q.free, b)
		return
	}
	small := 0
	for i := range q.free {
		if cap(q.free[i]) < cap(q.free[small]) {
			small = i
		}
	}
	if cap(q.free[small]) < cap(b) {
		q.free[small] = b
	}
}

// pop waits for the next chunk; done is the previous chunk's buffer, now
// delivered, kept for a later chunk (nil: none). False once shut.
func (q *queue) pop(done []byte) (chunk, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.keep(done)
	for !q.closed && q.head == len(q.q) {
		q.cond.Wait()
	}
	if q.closed {
		return chunk{}, false
	}
	ch := q.q[q.head]
	q.q[q.head] = chunk{}
	q.head++
	if q.head == len(q.q) {
		q.q, q.head = q.q[:0], 0
	}
	q.bytes -= len(ch.b)
	q.cond.Broadcast()
	return ch, true
}

func (q *queue) shut() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

const readSize = 32 << 10

func (c *conn) newQueue() *queue {
	q := &queue{max: c.l.cfg.MaxQueueBytes}
	q.cond.L = &q.mu
	return q
}

// pipe forwards src to dst through q, one of c's queues (close shuts it).
func (c *conn) pipe(src, dst *net.TCPConn, q *queue, bytes, chunks *atomic.Int64) {
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		var last time.Time
		// One read buffer per direction; each chunk is copied out at its
		// own size (into a delivered chunk's buffer when the queue keeps
		// one). A fresh 32 KiB buffer per read, held until delivery,
		// made the benchmark process allocate 32 KiB per small message
		// and spend its CPU collecting them.
		buf := make([]byte, readSize)
		for {
			n, err := src.Read(buf)
			now := time.Now()
			if n > 0 {
				at := c.l.deliverAt(now)
				if at.Before(last) {
					at = last // never overtake an earlier chunk
				}
				last = at
				if !q.push(buf[:n], at) {
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					at := c.l.deliverAt(now)
					if at.Before(last) {
						at = last
					}
					q.push(nil, at) // half-close travels with the same delay
					return
				}
				// Reset (or our own close): the other end sees a reset too.
				c.reset()
				return
			}
		}
	}()

	defer func() { q.shut(); <-readerDone }()
	sl := newSleeper()
	defer sl.close()
	var delivered []byte
	for {
		ch, ok := q.pop(delivered)
		if !ok {
			return
		}
		if !sl.until(ch.at, c.done) {
			return
		}
		for {
			mode, gate := c.l.gate()
			if mode == 0 {
				break
			}
			select {
			case <-gate:
			case <-c.done:
				return
			}
		}
		if ch.b == nil {
			dst.CloseWrite()
			return
		}
		if _, err := dst.Write(ch.b); err != nil {
			c.close()
			return
		}
		bytes.Add(int64(len(ch.b)))
		chunks.Add(1)
		delivered = ch.b
	}
}
