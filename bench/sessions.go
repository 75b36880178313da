package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gozk "github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The sessions experiment: what many clients cost a cluster at rest and
// under load. On a fresh 3-server cluster it measures the servers' CPU and
// memory over a window with nothing connected (baseline), then opens N
// sessions spread evenly over the servers (ZooKeeper API: one go-zookeeper
// connection per session; etcd: N leases kept alive over a smaller pool of
// clientv3 clients, which multiplex them), creates M keys (/w/n000000...),
// sets M watches spread over the sessions (ZooKeeper API: getData watches,
// key j by session j mod N; etcd: one Watch per key over the pool's
// streams), measures the same window at rest, then once more while a
// writer updates watched keys at a fixed rate (each write fires one watch;
// the ZooKeeper API's one-shot watch is set again when it fires), timing
// each notification. CPU and RSS are read from /proc as the
// idle-keyspaces experiment does; the clients connect straight to the
// servers' ports (no emulated link: the loopback topology adds no delay,
// and two proxy sockets per session would load the benchmark's process).

// SessionsParams shapes the experiment.
type SessionsParams struct {
	Sessions int           // N
	Watches  int           // M: keys, and watches on them
	Window   time.Duration // each measurement
	// Settle: after the servers start and after the watches are set,
	// before measuring.
	Settle time.Duration
	Rate   int // writes a second under load
	// SessionTimeout: the ZooKeeper sessions' timeout and etcd's lease
	// TTL (go-zookeeper pings every third of it; clientv3 renews a lease
	// every third of its TTL).
	SessionTimeout time.Duration
	// EtcdClients: the clientv3 clients holding the leases and watches
	// (0: one per 100 sessions, 3 to 100).
	EtcdClients int
	Writers     int // connections the writer uses (creates and load)
}

// SessionsStep is the servers' memory at one point of the set-up: the
// mean of three samples a second apart.
type SessionsStep struct {
	Label   string
	RSSMiB  []float64
	HeapMiB []float64 `json:",omitempty"`
}

// SessionsResult is one system's run.
type SessionsResult struct {
	System   string
	Sessions int // N asked for
	Watches  int // M asked for
	// Connections: client connections holding the sessions (ZooKeeper
	// API: one a session; etcd: the pool), besides the writer's.
	Connections int
	Writers     int
	Opened      int // sessions established (etcd: leases granted and kept alive)
	Znodes      int // keys created
	WatchesSet  int
	// OpenSec, CreateSec, WatchSec: opening the sessions (each until the
	// server's answer), creating the keys, setting the watches (until
	// each was confirmed).
	OpenSec, CreateSec, WatchSec float64
	Baseline                     IdleWindow
	AfterSessions, AfterZnodes   SessionsStep
	Rest                         IdleWindow
	Load                         *IdleWindow `json:",omitempty"`
	Rate                         int
	// Under load: writes acknowledged (Writes, from two seconds before
	// the window to its end; Load.Writes: in the window) and failed;
	// Behind: writes skipped because every writer was busy.
	Writes, WriteErrors, Behind int
	// Events: written keys whose watch fired; Missing: acknowledged
	// writes whose watch did not fire within the grace period;
	// Duplicates: further events for a key written once; BeforeAck:
	// events that arrived before the write's acknowledgement.
	Events, Missing, Duplicates, BeforeAck int
	// Notification latency, ms: acknowledgement → event (0 when the
	// event came first) and write sent → event.
	AckP50Ms, AckP99Ms, SendP50Ms, SendP99Ms float64
	RearmErrors                              int `json:",omitempty"`
	// Lost: sessions that expired or lost their connection (etcd: lease
	// keep-alive channels closed) during the run.
	Lost     int
	Failures []string `json:",omitempty"`
	LoadAvg1 float64  // at the start
	Notes    string
}

// sessionsKey is the j-th key (0-based): /w/n000000...
func sessionsKey(j int) string { return fmt.Sprintf("/w/n%06d", j) }

// sessionsKeyIndex is j for sessionsKey(j) (false: another path).
func sessionsKeyIndex(path string) (int, bool) {
	rest, ok := strings.CutPrefix(path, "/w/n")
	if !ok || rest == "" {
		return 0, false
	}
	j, err := strconv.Atoi(rest)
	if err != nil || j < 0 {
		return 0, false
	}
	return j, true
}

// sessionWatches lists the keys session s of n watches among m: s, s+n,
// s+2n... (key j is watched by session j mod n).
func sessionWatches(s, n, m int) []int {
	var out []int
	for j := s; j < m; j += n {
		out = append(out, j)
	}
	return out
}

// etcdPoolSize is the clientv3 clients for n leases: asked, or one per
// 100 leases within [3, 100], never more than n.
func etcdPoolSize(asked, n int) int {
	if asked > 0 {
		return min(asked, max(1, n))
	}
	return min(max(1, n), max(3, min(100, n/100)))
}

// notifyRecorder keeps, per key, when its write was sent and acknowledged
// and when its first event arrived (UnixNano; 0: not yet).
type notifyRecorder struct {
	sent, acked, event []atomic.Int64
	dup, stray         atomic.Int64
}

func newNotifyRecorder(m int) *notifyRecorder {
	return &notifyRecorder{sent: make([]atomic.Int64, m), acked: make([]atomic.Int64, m), event: make([]atomic.Int64, m)}
}

func (r *notifyRecorder) onEvent(j int, at time.Time) {
	if j < 0 || j >= len(r.event) || r.sent[j].Load() == 0 {
		r.stray.Add(1)
		return
	}
	if !r.event[j].CompareAndSwap(0, at.UnixNano()) {
		r.dup.Add(1)
	}
}

// pending counts acknowledged writes whose event has not arrived.
func (r *notifyRecorder) pending() int {
	n := 0
	for j := range r.acked {
		if r.acked[j].Load() != 0 && r.event[j].Load() == 0 {
			n++
		}
	}
	return n
}

// notifyStats reads per-key times (UnixNano, 0: none): over the keys
// whose write was acknowledged, the events that arrived, those missing,
// those that came before the acknowledgement, and the latencies in ms
// from acknowledgement (0 when the event came first) and from sending.
func notifyStats(sent, acked, event []int64) (events, missing, beforeAck int, fromAck, fromSend []float64) {
	for j := range acked {
		if acked[j] == 0 || j >= len(sent) || j >= len(event) {
			continue
		}
		if event[j] == 0 {
			missing++
			continue
		}
		events++
		d := float64(event[j]-acked[j]) / 1e6
		if d < 0 {
			beforeAck++
			d = 0
		}
		fromAck = append(fromAck, d)
		fromSend = append(fromSend, float64(event[j]-sent[j])/1e6)
	}
	return
}

// percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of xs.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// sessionsDriver holds one system's sessions and watches.
type sessionsDriver interface {
	open(n int) (int, error)
	create(m int) (int, error)
	watch(m int) (int, error)
	write(j int) error
	lost() int
	rearmErrors() int
	connections() int
	close()
}

// RaiseFDLimit raises this process's RLIMIT_NOFILE to at least want
// (the hard limit too, which needs root) and returns the soft limit now
// in force; the servers started afterwards inherit it.
func RaiseFDLimit(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	next := syscall.Rlimit{Cur: want, Max: max(lim.Max, want)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err != nil {
		// Not root: as far as the hard limit goes.
		next = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err2 := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err2 != nil {
			return lim.Cur, err
		}
		return next.Cur, err
	}
	return next.Cur, nil
}

// RunSessions runs the experiment on the running cluster c (started in
// e, with Direct addresses; for Meridian, HTTP lists its metrics).
func RunSessions(e *Env, c *Cluster, p SessionsParams, progress func(string)) (SessionsResult, error) {
	res := SessionsResult{System: c.System, Sessions: p.Sessions, Watches: p.Watches, Rate: p.Rate, LoadAvg1: loadAvg1()}
	if p.Sessions <= 0 || p.Watches <= 0 || p.Window <= 0 || p.Rate <= 0 || len(c.Direct) < 3 {
		return res, fmt.Errorf("sessions: bad parameters %+v (or no direct addresses)", p)
	}
	if p.SessionTimeout <= 0 {
		p.SessionTimeout = 30 * time.Second
	}
	p.Writers = max(p.Writers, 1)
	names, _ := scaleProcesses(e, c.System)
	if names == nil {
		return res, fmt.Errorf("sessions: system %s is not supported", c.System)
	}
	rec := newNotifyRecorder(p.Watches)
	var d sessionsDriver
	switch c.System {
	case "etcd":
		d = &etcdSessions{addrs: c.Direct[:3], ttl: p.SessionTimeout, pool: etcdPoolSize(p.EtcdClients, p.Sessions), nWriters: p.Writers, onEvent: rec.onEvent}
	default:
		d = &zkSessions{addrs: c.Direct[:3], timeout: p.SessionTimeout, nWriters: p.Writers, onEvent: rec.onEvent}
	}
	defer d.close()
	fail := func(s string) {
		res.Failures = append(res.Failures, s)
		progress(fmt.Sprintf("sessions %s: %s", c.System, s))
	}

	time.Sleep(p.Settle)
	res.Baseline = measureIdle(e, names, c.HTTP, p.Window, "baseline")
	progress(fmt.Sprintf("sessions %s: baseline CPU %s ms/s, RSS %s MiB (load average %.2f)", c.System, fmtFloats(res.Baseline.CPUMsPerS, 1), fmtMiB(res.Baseline.RSSMiB), res.Baseline.LoadAvg1))

	start := time.Now()
	opened, err := d.open(p.Sessions)
	res.OpenSec, res.Opened, res.Connections, res.Writers = time.Since(start).Seconds(), opened, d.connections(), p.Writers
	if err != nil {
		fail(fmt.Sprintf("opening sessions: %v", err))
	}
	if opened == 0 {
		return res, fmt.Errorf("sessions %s: no session opened", c.System)
	}
	res.AfterSessions = sessionsStep(e, names, c.HTTP, fmt.Sprintf("%d sessions", opened))
	progress(fmt.Sprintf("sessions %s: %d of %d sessions over %d connections in %.1f s; RSS %s MiB", c.System, opened, p.Sessions, res.Connections, res.OpenSec, fmtMiB(res.AfterSessions.RSSMiB)))

	start = time.Now()
	created, err := d.create(p.Watches)
	res.CreateSec, res.Znodes = time.Since(start).Seconds(), created
	if err != nil {
		fail(fmt.Sprintf("creating keys: %v", err))
	}
	res.AfterZnodes = sessionsStep(e, names, c.HTTP, fmt.Sprintf("and %d znodes", created))
	progress(fmt.Sprintf("sessions %s: %d keys created in %.1f s; RSS %s MiB", c.System, created, res.CreateSec, fmtMiB(res.AfterZnodes.RSSMiB)))

	start = time.Now()
	set, err := d.watch(p.Watches)
	res.WatchSec, res.WatchesSet = time.Since(start).Seconds(), set
	if err != nil {
		fail(fmt.Sprintf("setting watches: %v", err))
	}
	progress(fmt.Sprintf("sessions %s: %d watches set in %.1f s; settling %v", c.System, set, res.WatchSec, p.Settle))
	time.Sleep(p.Settle)
	res.Rest = measureIdle(e, names, c.HTTP, p.Window, "at rest")
	progress(fmt.Sprintf("sessions %s: at rest CPU %s ms/s, RSS %s MiB (load average %.2f)", c.System, fmtFloats(res.Rest.CPUMsPerS, 1), fmtMiB(res.Rest.RSSMiB), res.Rest.LoadAvg1))

	w := sessionsLoad(e, d, rec, names, c.HTTP, p, &res, progress)
	res.Load = &w
	res.Lost, res.RearmErrors = d.lost(), d.rearmErrors()
	if res.Lost > 0 {
		fail(fmt.Sprintf("%d sessions lost their connection or expired during the run", res.Lost))
	}
	progress(fmt.Sprintf("sessions %s: under load CPU %s ms/s, RSS %s MiB; %d writes (%d failed), %d events (%d missing), ack→event p50 %.2f p99 %.2f ms",
		c.System, fmtFloats(w.CPUMsPerS, 1), fmtMiB(w.RSSMiB), res.Writes, res.WriteErrors, res.Events, res.Missing, res.AckP50Ms, res.AckP99Ms))
	return res, nil
}

// sessionsStep samples the servers' memory three times a second apart.
func sessionsStep(e *Env, names, httpAddrs []string, label string) SessionsStep {
	s := SessionsStep{Label: label, RSSMiB: make([]float64, len(names))}
	for k := 0; k < 3; k++ {
		time.Sleep(time.Second)
		for i, v := range e.RSS(names) {
			s.RSSMiB[i] += v / 3
		}
	}
	if len(httpAddrs) > 0 {
		s.HeapMiB = heapMiB(httpAddrs)
	}
	return s
}

// sessionsLoad writes key 0, 1, 2... at p.Rate (each key once) from a
// pool of 32 writer goroutines, measures the window after two seconds of
// it, then waits up to five seconds for the last events.
func sessionsLoad(e *Env, d sessionsDriver, rec *notifyRecorder, names, httpAddrs []string, p SessionsParams, res *SessionsResult, progress func(string)) IdleWindow {
	jobs := make(chan int, 1024)
	var writes, failed, behind, inWindow atomic.Int64
	var measuring atomic.Bool
	var mu sync.Mutex
	firstErr := ""
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				rec.sent[j].Store(time.Now().UnixNano())
				if err := d.write(j); err != nil {
					failed.Add(1)
					mu.Lock()
					if firstErr == "" {
						firstErr = err.Error()
					}
					mu.Unlock()
					continue
				}
				rec.acked[j].Store(time.Now().UnixNano())
				writes.Add(1)
				if measuring.Load() {
					inWindow.Add(1)
				}
			}
		}()
	}
	stop := make(chan struct{})
	paced := make(chan struct{})
	go func() {
		defer close(paced)
		defer close(jobs)
		// A ticker drops ticks when this goroutine is late (a loaded
		// machine): each tick issues what is due since the start.
		tick := time.NewTicker(time.Second / time.Duration(p.Rate))
		defer tick.Stop()
		begin := time.Now()
		for j, issued := 0, 0; ; {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for due := int(time.Since(begin).Seconds() * float64(p.Rate)); issued < due && j < p.Watches; issued++ {
				// Every key is written once; a write no writer is free
				// for is skipped (and counted).
				select {
				case jobs <- j:
					j++
				default:
					behind.Add(1)
				}
			}
		}
	}()
	warm := 2 * time.Second
	progress(fmt.Sprintf("sessions: %d writes a second to watched keys; measuring after %v", p.Rate, warm))
	time.Sleep(warm)
	measuring.Store(true)
	w := measureIdle(e, names, httpAddrs, p.Window, fmt.Sprintf("%d writes/s", p.Rate))
	measuring.Store(false)
	close(stop)
	<-paced
	wg.Wait()
	for deadline := time.Now().Add(5 * time.Second); rec.pending() > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	load := func(xs []atomic.Int64) []int64 {
		out := make([]int64, len(xs))
		for i := range xs {
			out[i] = xs[i].Load()
		}
		return out
	}
	events, missing, before, fromAck, fromSend := notifyStats(load(rec.sent), load(rec.acked), load(rec.event))
	res.Writes, res.WriteErrors, res.Behind = int(writes.Load()), int(failed.Load()), int(behind.Load())
	res.Events, res.Missing, res.BeforeAck, res.Duplicates = events, missing, before, int(rec.dup.Load())
	res.AckP50Ms, res.AckP99Ms = percentile(fromAck, 50), percentile(fromAck, 99)
	res.SendP50Ms, res.SendP99Ms = percentile(fromSend, 50), percentile(fromSend, 99)
	w.Writes, w.WriteError, w.FirstError = int(inWindow.Load()), res.WriteErrors, firstErr
	return w
}

// boundedEach runs f(i) for i in [0, n) on at most k goroutines and
// returns how many calls succeeded and the first error.
func boundedEach(n, k int, f func(i int) error) (int, error) {
	var next, ok atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range min(k, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(ok.Load()), first
}

// zkSessions: one go-zookeeper connection per session, session s on
// server s mod 3; the writer's own connections likewise.
type zkSessions struct {
	addrs    []string
	timeout  time.Duration
	nWriters int
	onEvent  func(int, time.Time)

	conns   []*gozk.Conn
	writers []*gozk.Conn
	rearm   chan zkRearm
	done    chan struct{}
	closing atomic.Bool
	lostN   atomic.Int64
	rearmE  atomic.Int64
	wg      sync.WaitGroup
}

type zkRearm struct {
	s    int
	path string
}

// connect opens a session on addr and waits for the server's answer;
// watch events go to the driver (s ≥ 0: session s's).
func (d *zkSessions) connect(addr string, s int) (*gozk.Conn, error) {
	ready := make(chan struct{})
	var once sync.Once
	var had atomic.Bool
	cb := func(ev gozk.Event) {
		switch ev.Type {
		case gozk.EventSession:
			switch ev.State {
			case gozk.StateHasSession:
				had.Store(true)
				once.Do(func() { close(ready) })
			case gozk.StateExpired, gozk.StateDisconnected:
				if had.Load() && !d.closing.Load() {
					d.lostN.Add(1)
				}
			}
		case gozk.EventNodeDataChanged:
			if j, ok := sessionsKeyIndex(ev.Path); ok && s >= 0 {
				d.onEvent(j, time.Now())
				select {
				case d.rearm <- zkRearm{s, ev.Path}:
				default:
					d.rearmE.Add(1)
				}
			}
		}
	}
	// go-zookeeper gives each connection 1.5 MiB buffers to send and to
	// receive: 30 GiB for 10,000 sessions. Requests and answers here are
	// under a KiB.
	conn, _, err := gozk.Connect([]string{addr}, d.timeout, gozk.WithLogInfo(false), gozk.WithLogger(quiet{}), gozk.WithEventCallback(cb),
		gozk.WithMaxBufferSize(16<<10), gozk.WithMaxConnBufferSize(4<<10))
	if err != nil {
		return nil, err
	}
	select {
	case <-ready:
		return conn, nil
	case <-time.After(60 * time.Second):
		conn.Close()
		return nil, fmt.Errorf("no session from %s in 60 s", addr)
	}
}

func (d *zkSessions) open(n int) (int, error) {
	d.rearm, d.done = make(chan zkRearm, 1<<16), make(chan struct{})
	for i := 0; i < 16; i++ {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			for {
				select {
				case <-d.done:
					return
				case r := <-d.rearm:
					if _, _, _, err := d.conns[r.s].GetW(r.path); err != nil && !d.closing.Load() {
						d.rearmE.Add(1)
					}
				}
			}
		}()
	}
	for i := 0; i < d.nWriters; i++ {
		c, err := d.connect(d.addrs[i%len(d.addrs)], -1)
		if err != nil {
			return 0, fmt.Errorf("writer: %w", err)
		}
		d.writers = append(d.writers, c)
	}
	d.conns = make([]*gozk.Conn, n)
	return boundedEach(n, 64, func(s int) error {
		c, err := d.connect(d.addrs[s%len(d.addrs)], s)
		if err != nil {
			return err
		}
		d.conns[s] = c
		return nil
	})
}

func (d *zkSessions) create(m int) (int, error) {
	acl := gozk.WorldACL(gozk.PermAll)
	if _, err := d.writers[0].Create("/w", nil, 0, acl); err != nil && !errors.Is(err, gozk.ErrNodeExists) {
		return 0, err
	}
	val := []byte("0123456789abcdef")
	return boundedEach(m, 64, func(j int) error {
		_, err := d.writers[j%len(d.writers)].Create(sessionsKey(j), val, 0, acl)
		if errors.Is(err, gozk.ErrNodeExists) {
			err = nil
		}
		return err
	})
}

func (d *zkSessions) watch(m int) (int, error) {
	var set atomic.Int64
	_, err := boundedEach(len(d.conns), 128, func(s int) error {
		c := d.conns[s]
		if c == nil {
			return nil
		}
		var first error
		for _, j := range sessionWatches(s, len(d.conns), m) {
			if _, _, _, err := c.GetW(sessionsKey(j)); err != nil {
				if first == nil {
					first = err
				}
				continue
			}
			set.Add(1)
		}
		return first
	})
	return int(set.Load()), err
}

func (d *zkSessions) write(j int) error {
	_, err := d.writers[j%len(d.writers)].Set(sessionsKey(j), []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), -1)
	return err
}

func (d *zkSessions) lost() int        { return int(d.lostN.Load()) }
func (d *zkSessions) rearmErrors() int { return int(d.rearmE.Load()) }
func (d *zkSessions) connections() int {
	n := 0
	for _, c := range d.conns {
		if c != nil {
			n++
		}
	}
	return n
}

func (d *zkSessions) close() {
	d.closing.Store(true)
	if d.done != nil {
		close(d.done)
		d.wg.Wait()
	}
	var wg sync.WaitGroup
	for _, c := range append(slices.Clone(d.conns), d.writers...) {
		if c != nil {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
	}
	wg.Wait()
}

// etcdSessions: N leases kept alive over a pool of clientv3 clients
// (client k on server k mod 3), lease i on client i mod pool; watch j on
// client j mod pool, all of a client's watches on its one watch stream.
type etcdSessions struct {
	addrs    []string
	ttl      time.Duration
	pool     int
	nWriters int
	onEvent  func(int, time.Time)

	clients []*clientv3.Client
	writers []*clientv3.Client
	ctx     context.Context
	cancel  context.CancelFunc
	closing atomic.Bool
	lostN   atomic.Int64
	wg      sync.WaitGroup
}

func (d *etcdSessions) dial(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
}

func (d *etcdSessions) open(n int) (int, error) {
	d.ctx, d.cancel = context.WithCancel(context.Background())
	for i := 0; i < d.nWriters; i++ {
		c, err := d.dial(d.addrs[i%len(d.addrs)])
		if err != nil {
			return 0, fmt.Errorf("writer: %w", err)
		}
		d.writers = append(d.writers, c)
	}
	for k := 0; k < d.pool; k++ {
		c, err := d.dial(d.addrs[k%len(d.addrs)])
		if err != nil {
			return 0, err
		}
		d.clients = append(d.clients, c)
	}
	chans := make([]<-chan *clientv3.LeaseKeepAliveResponse, n)
	ttl := int64(max(d.ttl/time.Second, 5))
	ok, err := boundedEach(n, 64, func(i int) error {
		c := d.clients[i%len(d.clients)]
		ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
		g, err := c.Grant(ctx, ttl)
		cancel()
		if err != nil {
			return err
		}
		ch, err := c.KeepAlive(d.ctx, g.ID)
		if err != nil {
			return err
		}
		chans[i] = ch
		return nil
	})
	// Drain the keep-alive answers, 64 channels a goroutine; a channel
	// closes when its lease is gone.
	live := slices.DeleteFunc(chans, func(ch <-chan *clientv3.LeaseKeepAliveResponse) bool { return ch == nil })
	for g := range slices.Chunk(live, 64) {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			selectAll(g, func(any) {}, func() {
				if !d.closing.Load() {
					d.lostN.Add(1)
				}
			})
		}()
	}
	return ok, err
}

// selectAll receives from every channel of chans until all are closed,
// calling got for each value and gone for each channel that closes.
func selectAll[T any](chans []<-chan T, got func(any), gone func()) {
	cases := make([]reflect.SelectCase, len(chans))
	for i, ch := range chans {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
	}
	for len(cases) > 0 {
		i, v, ok := reflect.Select(cases)
		if !ok {
			gone()
			cases[i] = cases[len(cases)-1]
			cases = cases[:len(cases)-1]
			continue
		}
		got(v.Interface())
	}
}

func (d *etcdSessions) create(m int) (int, error) {
	val := "0123456789abcdef"
	return boundedEach(m, 64, func(j int) error {
		ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
		defer cancel()
		_, err := d.writers[j%len(d.writers)].Put(ctx, sessionsKey(j), val)
		return err
	})
}

func (d *etcdSessions) watch(m int) (int, error) {
	// clientv3 sends a stream's next watch request once the last one is
	// confirmed: one goroutine per client, its keys in order.
	per := make([][]clientv3.WatchChan, len(d.clients))
	var wg sync.WaitGroup
	for k := range d.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, j := range sessionWatches(k, len(d.clients), m) {
				per[k] = append(per[k], d.clients[k].Watch(d.ctx, sessionsKey(j), clientv3.WithCreatedNotify()))
			}
		}()
	}
	wg.Wait()
	var created atomic.Int64
	for _, chans := range per {
		for g := range slices.Chunk(chans, 64) {
			rg := make([]<-chan clientv3.WatchResponse, len(g))
			for i, ch := range g {
				rg[i] = ch
			}
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				selectAll(rg, func(v any) {
					r := v.(clientv3.WatchResponse)
					if r.Created {
						created.Add(1)
					}
					now := time.Now()
					for _, ev := range r.Events {
						if ev.Type != clientv3.EventTypePut {
							continue
						}
						if j, ok := sessionsKeyIndex(string(ev.Kv.Key)); ok {
							d.onEvent(j, now)
						}
					}
				}, func() {})
			}()
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for created.Load() < int64(m) {
		if time.Now().After(deadline) {
			return int(created.Load()), fmt.Errorf("%d of %d watches confirmed after 5 min", created.Load(), m)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m, nil
}

func (d *etcdSessions) write(j int) error {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	_, err := d.writers[j%len(d.writers)].Put(ctx, sessionsKey(j), strconv.FormatInt(time.Now().UnixNano(), 10))
	return err
}

func (d *etcdSessions) lost() int        { return int(d.lostN.Load()) }
func (d *etcdSessions) rearmErrors() int { return 0 }
func (d *etcdSessions) connections() int { return len(d.clients) }

func (d *etcdSessions) close() {
	d.closing.Store(true)
	if d.cancel != nil {
		d.cancel()
	}
	for _, c := range append(slices.Clone(d.clients), d.writers...) {
		c.Close()
	}
	d.wg.Wait()
}

// SessionsCost is what the set-up added, across the three servers: RSS
// bytes per session (sessions open − baseline), per key (keys created −
// sessions open) and per watch (at rest − keys created); CPU at rest
// over baseline in µs/s per session; Go heap alike where measured.
type SessionsCost struct {
	RSSPerSessionB, RSSPerZnodeB, RSSPerWatchB    float64
	HeapPerSessionB, HeapPerZnodeB, HeapPerWatchB float64
	RestCPUPerSessionUs                           float64
	HasHeap                                       bool
}

func sessionsCost(r SessionsResult) SessionsCost {
	var c SessionsCost
	per := func(a, b []float64, n int) float64 {
		if n <= 0 || len(a) == 0 || len(b) == 0 {
			return 0
		}
		return (sumFloats(b) - sumFloats(a)) * (1 << 20) / float64(n)
	}
	c.RSSPerSessionB = per(r.Baseline.RSSMiB, r.AfterSessions.RSSMiB, r.Opened)
	c.RSSPerZnodeB = per(r.AfterSessions.RSSMiB, r.AfterZnodes.RSSMiB, r.Znodes)
	c.RSSPerWatchB = per(r.AfterZnodes.RSSMiB, r.Rest.RSSMiB, r.WatchesSet)
	if len(r.Baseline.HeapMiB) > 0 && len(r.Rest.HeapMiB) > 0 {
		c.HasHeap = true
		c.HeapPerSessionB = per(r.Baseline.HeapMiB, r.AfterSessions.HeapMiB, r.Opened)
		c.HeapPerZnodeB = per(r.AfterSessions.HeapMiB, r.AfterZnodes.HeapMiB, r.Znodes)
		c.HeapPerWatchB = per(r.AfterZnodes.HeapMiB, r.Rest.HeapMiB, r.WatchesSet)
	}
	if r.Opened > 0 {
		c.RestCPUPerSessionUs = (sumFloats(r.Rest.CPUMsPerS) - sumFloats(r.Baseline.CPUMsPerS)) * 1000 / float64(r.Opened)
	}
	return c
}

func loadCPU(r SessionsResult) []float64 {
	if r.Load == nil {
		return nil
	}
	return r.Load.CPUMsPerS
}

func loadRSS(r SessionsResult) []float64 {
	if r.Load == nil {
		return nil
	}
	return r.Load.RSSMiB
}

// SessionsMarkdown is the results as a Markdown section.
func SessionsMarkdown(results []SessionsResult, topology string, p SessionsParams) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %d sessions and %d watches on 3 servers, topology %s\n\n", p.Sessions, p.Watches, topology)
	fmt.Fprintf(&b, "Each system: a fresh 3-server cluster (real processes on this machine); its servers measured over a %.0f s window with nothing connected (baseline); then %d sessions opened, spread evenly over the three servers (ZooKeeper API, Meridian and ZooKeeper: one go-zookeeper connection per session, session timeout %v; etcd: %d leases of TTL %v kept alive by clientv3 over a pool of clients, which multiplexes every lease of a client on one keep-alive stream, so etcd holds far fewer connections), %d keys /w/n000000... of 16 B created by the writer's %d connections, and %d watches set (ZooKeeper API: getData watches, key j by session j mod %d; etcd: one Watch per key over the pool's watch streams, key j on client j mod pool size); %.0f s to settle, the same window at rest; then %d writes a second, each to a watched key not written before (one event each; the ZooKeeper API's one-shot watch set again when it fires), two seconds before and through the window, and up to 5 s after it for the last events. Clients connect straight to the servers' client ports (no emulated link). Load average (1 min) at the start of each system's run and at the end of each window is given below.\n\n",
		p.Window.Seconds(), p.Sessions, p.SessionTimeout, p.Sessions, p.SessionTimeout, p.Watches, p.Writers, p.Watches, p.Sessions, p.Settle.Seconds(), p.Rate)
	b.WriteString("CPU: utime+stime of each server process over the window, in ms of CPU per second (1000 = one core), summed over the three servers. RSS: VmRSS, the mean of one sample a second over a window (after the sessions and after the keys: three samples a second apart), summed over the three servers. What is attributed to what: per session = (RSS with the sessions open − baseline) / sessions; per key = (RSS after the keys − with the sessions) / keys; per watch = (RSS at rest, watches set − after the keys) / watches; each across the three servers (a session lives on every server of ZooKeeper and Meridian, in the leader's lessor of etcd; a watch only on the server its connection reaches). A JVM's RSS grows with its heap as the collector sizes it and seldom shrinks, and a Go server's follows its garbage collector: the per-item figures are what the set-up added, not a data structure's size.\n\n")

	b.WriteString("| system | sessions opened (connections) | open s | keys (create s) | watches set (s) | CPU ms/s baseline / at rest / under load | RSS MiB baseline / sessions open / keys created / at rest / under load |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %d of %d (%d) | %.1f | %d (%.1f) | %d (%.1f) | %.1f / %.1f / %.1f | %.0f / %.0f / %.0f / %.0f / %.0f |\n",
			r.System, r.Opened, r.Sessions, r.Connections, r.OpenSec, r.Znodes, r.CreateSec, r.WatchesSet, r.WatchSec,
			sumFloats(r.Baseline.CPUMsPerS), sumFloats(r.Rest.CPUMsPerS), sumFloats(loadCPU(r)),
			sumFloats(r.Baseline.RSSMiB), sumFloats(r.AfterSessions.RSSMiB), sumFloats(r.AfterZnodes.RSSMiB), sumFloats(r.Rest.RSSMiB), sumFloats(loadRSS(r)))
	}

	b.WriteString("\nWhat the set-up added, across the three servers:\n\n| system | RSS per session B | RSS per key B | RSS per watch B | Go heap per session / key / watch B | CPU at rest over baseline, µs/s per session | CPU under load over at rest, ms/s (per write) |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		c := sessionsCost(r)
		heap := "—"
		if c.HasHeap {
			heap = fmt.Sprintf("%.0f / %.0f / %.0f", c.HeapPerSessionB, c.HeapPerZnodeB, c.HeapPerWatchB)
		}
		dl := sumFloats(loadCPU(r)) - sumFloats(r.Rest.CPUMsPerS)
		perWrite := "—"
		if r.Load != nil && r.Load.Sec > 0 && r.Writes > 0 {
			perWrite = fmt.Sprintf("%.1f (%.0f µs)", dl, dl*1000/float64(r.Rate))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %s | %.2f | %s |\n", r.System, c.RSSPerSessionB, c.RSSPerZnodeB, c.RSSPerWatchB, heap, c.RestCPUPerSessionUs, perWrite)
	}

	b.WriteString("\nNotifications under load (events: written keys whose watch fired; expected: acknowledged writes):\n\n| system | writes acked (failed; skipped) | writes/s in the window | events / expected | missing | duplicates | event before ack | ack → event p50 / p99 ms | sent → event p50 / p99 ms | watches re-set failed | sessions lost |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		rate := 0.0
		if r.Load != nil && r.Load.Sec > 0 {
			rate = float64(r.Load.Writes) / r.Load.Sec
		}
		fmt.Fprintf(&b, "| %s | %d (%d; %d) | %.0f | %d / %d | %d | %d | %d | %.2f / %.2f | %.2f / %.2f | %d | %d |\n",
			r.System, r.Writes, r.WriteErrors, r.Behind, rate, r.Events, r.Writes, r.Missing, r.Duplicates, r.BeforeAck,
			r.AckP50Ms, r.AckP99Ms, r.SendP50Ms, r.SendP99Ms, r.RearmErrors, r.Lost)
	}

	b.WriteString("\nPer server:\n\n| system | server | CPU ms/s baseline / at rest / under load | RSS MiB baseline / sessions / keys / at rest / under load | Go heap MiB baseline / at rest |\n|---|---|---:|---:|---:|\n")
	for _, r := range results {
		for i := range r.Baseline.CPUMsPerS {
			heap := "—"
			if len(r.Baseline.HeapMiB) > i && len(r.Rest.HeapMiB) > i {
				heap = fmt.Sprintf("%.1f / %.1f", r.Baseline.HeapMiB[i], r.Rest.HeapMiB[i])
			}
			fmt.Fprintf(&b, "| %s | %d | %.1f / %.1f / %.1f | %.1f / %.1f / %.1f / %.1f / %.1f | %s |\n", r.System, i+1,
				at(r.Baseline.CPUMsPerS, i), at(r.Rest.CPUMsPerS, i), at(loadCPU(r), i),
				at(r.Baseline.RSSMiB, i), at(r.AfterSessions.RSSMiB, i), at(r.AfterZnodes.RSSMiB, i), at(r.Rest.RSSMiB, i), at(loadRSS(r), i), heap)
		}
	}

	b.WriteString("\nIn short:")
	for _, r := range results {
		c := sessionsCost(r)
		fmt.Fprintf(&b, " %s: a session adds %.1f KiB of RSS across the three servers and %.2f µs/s of their CPU at rest, a key %.0f B, a watch %.0f B; at %d writes/s the servers use %.0f ms/s of CPU (%.0f at rest) and a watch fires %.2f ms after its write was sent at p50, %.2f at p99 (%d of %d events).",
			r.System, c.RSSPerSessionB/1024, c.RestCPUPerSessionUs, c.RSSPerZnodeB, c.RSSPerWatchB, r.Rate, sumFloats(loadCPU(r)), sumFloats(r.Rest.CPUMsPerS), r.SendP50Ms, r.SendP99Ms, r.Events, r.Writes)
	}
	b.WriteString("\n")

	b.WriteString("\nLoad average (1 min) at the start, then at the end of the baseline, at-rest and load windows:")
	for _, r := range results {
		fmt.Fprintf(&b, " %s %.2f, %.2f, %.2f", r.System, r.LoadAvg1, r.Baseline.LoadAvg1, r.Rest.LoadAvg1)
		if r.Load != nil {
			fmt.Fprintf(&b, ", %.2f", r.Load.LoadAvg1)
		}
		b.WriteString(";")
	}
	b.WriteString("\n")
	var notes, failures []string
	for _, r := range results {
		if r.Notes != "" {
			notes = append(notes, fmt.Sprintf("- %s: %s", r.System, r.Notes))
		}
		for _, f := range r.Failures {
			failures = append(failures, fmt.Sprintf("- %s: %s", r.System, f))
		}
		if r.Load != nil && r.Load.FirstError != "" {
			failures = append(failures, fmt.Sprintf("- %s: first write error: %s", r.System, r.Load.FirstError))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\nSettings:\n\n" + strings.Join(notes, "\n") + "\n")
	}
	clean := len(failures) == 0
	for _, r := range results {
		if !sessionsNoFailure(r) {
			clean = false
			if len(r.Failures) == 0 {
				failures = append(failures, fmt.Sprintf("- %s: %d of %d sessions, %d of %d watches, %d writes failed, %d events missing", r.System, r.Opened, r.Sessions, r.WatchesSet, r.Watches, r.WriteErrors, r.Missing))
			}
		}
	}
	if !clean {
		b.WriteString("\nFailures:\n\n" + strings.Join(failures, "\n") + "\n")
	} else {
		b.WriteString("\nNo failures: every session opened and stayed open, every key and watch was set, every acknowledged write's event arrived.\n")
	}
	return b.String()
}

// sessionsNoFailure reports whether r had no failure at all (for the
// summary line of the run).
func sessionsNoFailure(r SessionsResult) bool {
	return len(r.Failures) == 0 && r.Missing == 0 && r.WriteErrors == 0 && r.Opened == r.Sessions && r.WatchesSet == r.Watches
}
