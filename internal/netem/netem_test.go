package netem

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer echoes every connection until it closes; it stops with the test.
func echoServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newLink(t *testing.T, cfg Config) *Link {
	t.Helper()
	l, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pingRTTs sends n one-byte pings and returns each round trip.
func pingRTTs(t *testing.T, c net.Conn, n int) []time.Duration {
	t.Helper()
	out := make([]time.Duration, 0, n)
	b := []byte{0}
	for i := 0; i < n; i++ {
		b[0] = byte(i)
		start := time.Now()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		if b[0] != byte(i) {
			t.Fatalf("ping %d echoed %d", i, b[0])
		}
		out = append(out, time.Since(start))
	}
	return out
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// A link configured for a 40 ms round trip never measures less than 40 ms,
// and its median is well below 80 ms (what a delay applied twice per
// direction would show). The benchmark report prints the exact figures.
func TestRTTMatchesConfig(t *testing.T) {
	l := newLink(t, Config{Target: echoServer(t), Delay: 20 * time.Millisecond})
	c := dial(t, l.Addr())
	rtts := pingRTTs(t, c, 30)
	med := median(rtts)
	t.Logf("configured 40ms RTT: median %v min %v max %v", med, slices.Min(rtts), slices.Max(rtts))
	if slices.Min(rtts) < 40*time.Millisecond {
		t.Errorf("a round trip took %v, below the configured 40ms", slices.Min(rtts))
	}
	if med > 60*time.Millisecond {
		t.Errorf("median RTT %v, want 40–60ms", med)
	}
	// Each one-byte ping and its echo travel as one chunk each way. (The
	// counters move just after a chunk's write, so the last echo's may
	// trail its arrival.)
	want := Stats{Accepted: 1, BytesForward: 30, BytesBackward: 30, ChunksForward: 30, ChunksBackward: 30}
	s := l.Stats()
	for deadline := time.Now().Add(time.Second); s != want && time.Now().Before(deadline); s = l.Stats() {
		time.Sleep(time.Millisecond)
	}
	if s != want {
		t.Errorf("stats %+v after 30 one-byte pings, want %+v", s, want)
	}
}

// Uniform jitter keeps every round trip within delay ± jitter per direction.
func TestJitterBounds(t *testing.T) {
	l := newLink(t, Config{Target: echoServer(t), Delay: 10 * time.Millisecond,
		Jitter: 5 * time.Millisecond, Dist: Uniform, Seed: 1})
	c := dial(t, l.Addr())
	rtts := pingRTTs(t, c, 40)
	lo, hi := slices.Min(rtts), slices.Max(rtts)
	t.Logf("RTT 20ms ± 10ms: min %v median %v max %v", lo, median(rtts), hi)
	// The upper bound has slack for a loaded machine (under -race).
	if lo < 10*time.Millisecond || hi > 30*time.Millisecond+25*time.Millisecond {
		t.Errorf("RTT range [%v, %v], want within [10ms, 55ms]", lo, hi)
	}
	if hi-lo < 2*time.Millisecond {
		t.Errorf("RTT spread %v: jitter not applied", hi-lo)
	}
}

// A large transfer with heavy jitter and a small queue arrives intact and in
// order (no overtaking, no loss at the queue limit), and its time shows the
// link is not a sleep-per-chunk pipe.
func TestOrderIntegrityAndBandwidth(t *testing.T) {
	l := newLink(t, Config{Target: echoServer(t), Delay: 25 * time.Millisecond,
		Jitter: 20 * time.Millisecond, Dist: Normal, Seed: 7, MaxQueueBytes: 256 << 10})
	c := dial(t, l.Addr())
	data := make([]byte, 8<<20)
	rand.Read(data)
	want := sha256.Sum256(data)
	start := time.Now()
	errc := make(chan error, 1)
	go func() { _, err := c.Write(data); errc <- err }()
	got := make([]byte, len(data))
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("8 MiB echoed through a 50ms-RTT link in %v", el)
	if sha256.Sum256(got) != want {
		t.Fatal("data corrupted or reordered")
	}
	// 8 MiB is at least 256 reads of 32 KiB: one delay per read would take
	// over 6 s each way, 12 s in all.
	if el > 6*time.Second {
		t.Errorf("transfer took %v: chunks are serialised behind the delay", el)
	}
}

func TestSetDelay(t *testing.T) {
	l := newLink(t, Config{Target: echoServer(t), Delay: 2 * time.Millisecond})
	c := dial(t, l.Addr())
	before := median(pingRTTs(t, c, 10))
	l.SetDelay(30*time.Millisecond, 0, Uniform)
	after := pingRTTs(t, c, 10)
	t.Logf("median RTT %v, then %v after SetDelay(30ms)", before, median(after))
	if slices.Min(after) < 60*time.Millisecond {
		t.Errorf("RTT %v after SetDelay(30ms one-way), want ≥ 60ms", slices.Min(after))
	}
	if before >= 60*time.Millisecond {
		t.Errorf("RTT %v before SetDelay, want < 60ms", before)
	}
}

func TestBlackhole(t *testing.T) {
	l := newLink(t, Config{Target: echoServer(t), Delay: time.Millisecond})
	c := dial(t, l.Addr())
	pingRTTs(t, c, 1)
	l.Block(BlockBlackhole)
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := c.Read(buf); !isTimeout(err) {
		t.Fatalf("read through a blackholed link: n=%d err=%v, want timeout", n, err)
	}
	// A new connection is accepted but nothing answers on it.
	c2 := dial(t, l.Addr())
	c2.Write([]byte("x"))
	c2.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c2.Read(buf[:1]); !isTimeout(err) {
		t.Fatalf("read on a new connection while blackholed: n=%d err=%v, want timeout", n, err)
	}
	l.Unblock()
	// Held bytes arrive after the partition heals, in order.
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after Unblock: %q, %v", buf, err)
	}
	c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c2, buf[:1]); err != nil || buf[0] != 'x' {
		t.Fatalf("held connection after Unblock: %q, %v", buf[:1], err)
	}
	pingRTTs(t, c, 3)
}

func TestReset(t *testing.T) {
	l := newLink(t, Config{Target: echoServer(t)})
	c := dial(t, l.Addr())
	pingRTTs(t, c, 1)
	l.Block(BlockReset)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if err == nil || isTimeout(err) {
		t.Fatalf("existing connection after BlockReset: %v, want reset/EOF", err)
	}
	// New connections are reset on accept.
	expectRejected(t, l.Addr(), "new connection while reset-blocked")
	l.Unblock()
	c3 := dial(t, l.Addr())
	pingRTTs(t, c3, 3)
	if s := l.Stats(); s.Rejected < 1 {
		t.Errorf("stats %+v: the connection refused during the block is not counted", s)
	}
}

// Half-close travels through: the target sees EOF and its reply still arrives.
func TestHalfClose(t *testing.T) {
	l := newLink(t, Config{Target: echoServer(t), Delay: 5 * time.Millisecond})
	c := dial(t, l.Addr())
	c.Write([]byte("bye"))
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, []byte("bye")) {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	l, err := Listen(Config{Target: echoServer(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, l.Addr())
	pingRTTs(t, c, 1)
	addr := l.Addr()
	l.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("connection after Close: %v", err)
	}
	if c2, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c2.Close()
		t.Fatal("a closed link still accepts")
	}
}

func TestMaxConns(t *testing.T) {
	l := newLink(t, Config{Target: echoServer(t), MaxConns: 2})
	a, b := dial(t, l.Addr()), dial(t, l.Addr())
	pingRTTs(t, a, 1)
	pingRTTs(t, b, 1)
	expectRejected(t, l.Addr(), "third connection over MaxConns=2")
}

// expectRejected dials addr and expects the link to reset or close the
// connection; the reset can arrive before the dialer has finished
// connecting, so a failed dial counts as rejected.
func expectRejected(t *testing.T, addr, what string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("%s: %v, want reset/EOF", what, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// BenchmarkOverhead measures the proxy's own cost: a one-byte round trip
// through a zero-delay link vs direct loopback.
func BenchmarkOverhead(b *testing.B) {
	echo := echoServer(b)
	for _, via := range []string{"direct", "link"} {
		b.Run(via, func(b *testing.B) {
			addr := echo
			if via == "link" {
				l, err := Listen(Config{Target: addr})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				addr = l.Addr()
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := []byte{0}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.Write(buf)
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Many busy connections keep their configured delay: delivery must not hold
// the process's threads for the whole delay (a goroutine asleep in a
// syscall keeps its P until the runtime takes it back, and the links'
// goroutines then wait their turn on top of the emulated delay). The
// benchmark runs every link of a cluster in one process, so this is the
// emulation's accuracy under load, not a speed target.
func TestManyConnectionsKeepTheirDelay(t *testing.T) {
	l := newLink(t, Config{Target: echoServer(t), Delay: 15 * time.Millisecond})
	const conns, pings = 64, 30
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		c := dial(t, l.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := []byte{0}
			for j := 0; j < pings; j++ {
				start := time.Now()
				if _, err := c.Write(b); err != nil {
					t.Error(err)
					return
				}
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(c, b); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				all = append(all, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(all) == 0 {
		t.Fatal("no round trip completed")
	}
	med := median(all)
	slices.Sort(all)
	t.Logf("%d connections, configured 30ms RTT: median %v p90 %v max %v", conns, med, all[len(all)*9/10], slices.Max(all))
	// Delivery that held a thread for the whole delay gave p90s of 30 to
	// 130 ms here (above 45 ms in half the runs); timer-then-nanosleep
	// delivery stays within a few ms, under -race and a loaded machine too.
	if p90 := all[len(all)*9/10]; p90 > 45*time.Millisecond {
		t.Errorf("p90 round trip %v with %d busy connections, want 30–45ms", p90, conns)
	}
}

// BenchmarkClosedLoop runs 32 connections through one link of 0.1 ms each
// way (1dc's same-zone round trip, 0.2 ms), each sending 1000 B and waiting
// for the echo, as the throughput workload's clients do. It reports round
// trips per second and the median round trip: with sub-millisecond delays
// every delivery's wait is the precise last stretch, so this measures what
// that wait costs the process that hosts the links.
func BenchmarkClosedLoop(b *testing.B) {
	l, err := Listen(Config{Target: echoServer(b), Delay: 100 * time.Microsecond})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	const conns = 32
	cs := make([]net.Conn, conns)
	for i := range cs {
		if cs[i], err = net.Dial("tcp", l.Addr()); err != nil {
			b.Fatal(err)
		}
		defer cs[i].Close()
	}
	var next atomic.Int64
	rtts := make([][]time.Duration, conns)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := make([]byte, 1000)
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if _, err := c.Write(msg); err != nil {
					b.Error(err)
					return
				}
				if _, err := io.ReadFull(c, msg); err != nil {
					b.Error(err)
					return
				}
				rtts[i] = append(rtts[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	var all []time.Duration
	for _, r := range rtts {
		all = append(all, r...)
	}
	if len(all) > 0 {
		b.ReportMetric(float64(len(all))/el.Seconds(), "rt/s")
		b.ReportMetric(float64(median(all).Microseconds()), "p50-µs")
	}
}

// A direction in steady state (a message out, delivered, the next) makes
// no garbage: the reader copies into the buffer the writer delivered, and
// the queue's slice does not creep through its array.
func TestQueueReusesDeliveredBuffers(t *testing.T) {
	q := &queue{max: 1 << 20}
	q.cond.L = &q.mu
	msg := make([]byte, 1000)
	big := make([]byte, readSize) // as large as a read: a leader's appends under load
	var done []byte
	i := byte(0)
	// cycle sends m through the queue as the link does: pushed, popped
	// and its buffer handed back with the next pop.
	cycle := func(m []byte) {
		i++
		m[0] = i
		q.push(m, time.Time{})
		ch, ok := q.pop(done)
		if !ok || !bytes.Equal(ch.b, m) {
			t.Fatalf("popped %v, %d bytes; want a %d-byte chunk starting %d", ok, len(ch.b), len(m), i)
		}
		done = ch.b
	}
	if allocs := testing.AllocsPerRun(1000, func() { cycle(msg) }); allocs != 0 {
		t.Errorf("%.1f allocations a chunk in steady state, want 0", allocs)
	}
	if allocs := testing.AllocsPerRun(1000, func() { cycle(big) }); allocs != 0 {
		t.Errorf("%.1f allocations a %d-byte chunk in steady state, want 0", allocs, readSize)
	}
	// Small and large chunks in turn: the small ones' buffers must not
	// crowd out the one the next large chunk fits in.
	if allocs := testing.AllocsPerRun(1000, func() { cycle(msg); cycle(big) }); allocs != 0 {
		t.Errorf("%.1f allocations a pair of a small and a large chunk in steady state, want 0", allocs)
	}
	// Two in flight, one in one out: chunks keep their order and contents,
	// each its own buffer, and the slice stays its size.
	q.push([]byte("a"), time.Time{})
	prev := "a"
	for n := range 10000 {
		next := []byte{byte('b' + n%20)}
		q.push(next, time.Time{})
		ch, _ := q.pop(done)
		if string(ch.b) != prev {
			t.Fatalf("chunk %d: got %q, want %q", n, ch.b, prev)
		}
		done, prev = ch.b, string(next)
	}
	if cap(q.q) > 4 || len(q.free) > maxFree {
		t.Errorf("after 10,000 chunks: queue capacity %d, %d free buffers (want <= 4, <= %d)", cap(q.q), len(q.free), maxFree)
	}
}
