package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/meridian-coord/meridian/client"
)

// The seed000-grid and seed000-contention workloads, after "The Cost of
// Consensus: Synchronization in Geo-distributed Systems" (Faisal Nawab and
// Alexander Pucher; Cost of Consensus below): lock strategies under
// wide-area latency and contention. Lock
// requests arrive at random (exponential inter-arrival times with a fixed
// mean), each holds the lock for an exponentially distributed time, and what
// is measured is the time from a request's arrival to its acquisition
// (waiting for other holders included). The four strategies the seed
// builds on ZooKeeper's API run as the seed describes them, against
// ZooKeeper and against Meridian's ZooKeeper port; Meridian's server-side
// lock runs beside them. The claim to test: the server-side lock is at
// least as fast as the best of the four everywhere in the grid.

// Seed000Params sets one run.
type Seed000Params struct {
	Interarrival time.Duration   // mean time between lock requests
	Service      []time.Duration // mean critical-section times to run (one point each)
	Duration     time.Duration   // of arrivals per strategy and point
	Sessions     int             // client sessions opened before the requests start, rounded up to a multiple of the servers (more open as needed: one per outstanding request)
	Poll         time.Duration   // period of the asynchronous strategies' requests
}

// Seed000 strategy names, in report order.
const (
	S0SyncTAS    = "sync test-and-set"
	S0AsyncTAS   = "async test-and-set"
	S0SyncQueue  = "sync queue lock"
	S0AsyncQueue = "async queue lock"
	S0Server     = "Meridian server-side lock"
)

// s0MaxSessions bounds a run's sessions (one per outstanding request): a
// request that finds every one busy past it fails, counted as an error.
const s0MaxSessions = 256

var errS0Sessions = fmt.Errorf("more than %d requests outstanding: no session left", s0MaxSessions)

// s0Arrival is one lock request: when it arrives (after the run's start)
// and how long it holds the lock.
type s0Arrival struct{ at, hold time.Duration }

// s0Schedule draws a run's arrivals (exponential inter-arrival times of
// mean p.Interarrival over p.Duration) and holds (exponential, mean svc)
// from a generator seeded by the inter-arrival mean alone, so every
// strategy and system gets the same requests (common random numbers), and
// every mean hold the same arrivals with holds in proportion: where the
// mean hold nears the inter-arrival time, one long busy period decides a
// series' average, and independent draws would compare sample paths more
// than strategies.
func s0Schedule(p Seed000Params, svc time.Duration) []s0Arrival {
	rng := mrand.New(mrand.NewPCG(uint64(p.Interarrival), 0))
	var out []s0Arrival
	var at time.Duration
	for at < p.Duration {
		out = append(out, s0Arrival{at: at, hold: time.Duration(rng.ExpFloat64() * float64(svc))})
		at += time.Duration(rng.ExpFloat64() * float64(p.Interarrival))
	}
	return out
}

// s0Pool hands each request a session no other request is using, idle ones
// first in the order they were freed (so requests keep spreading over the
// servers the sessions sit on), else a new one.
type s0Pool struct {
	open    func(i int) (s0Lock, func(), error)
	mu      sync.Mutex
	idle    []s0Lock
	n       int // sessions opened or being opened
	closers []func()
}

func (p *s0Pool) take() (s0Lock, error) {
	p.mu.Lock()
	if len(p.idle) > 0 {
		l := p.idle[0]
		p.idle = p.idle[1:]
		p.mu.Unlock()
		return l, nil
	}
	if p.n >= s0MaxSessions {
		p.mu.Unlock()
		return nil, errS0Sessions
	}
	i := p.n
	p.n++
	p.mu.Unlock()
	l, cl, err := p.open(i)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.n--
		return nil, err
	}
	p.closers = append(p.closers, cl)
	return l, nil
}

func (p *s0Pool) put(l s0Lock) {
	p.mu.Lock()
	p.idle = append(p.idle, l)
	p.mu.Unlock()
}

func (p *s0Pool) close() {
	for _, cl := range p.closers {
		cl()
	}
}

// s0MaxInflight bounds an asynchronous strategy's requests in flight (per
// lock request): past it, it waits for answers before sending more.
const s0MaxInflight = 64

var s0ACL = gozk.WorldACL(gozk.PermAll)

// s0Lock acquires the lock of one strategy; release frees it.
type s0Lock func(ctx context.Context) (release func(), err error)

// syncTAS: create the lock node until one create succeeds (the seed's busy
// loop: a failed create is answered before the next is sent).
func syncTAS(conn *gozk.Conn, path string) s0Lock {
	return func(ctx context.Context) (func(), error) {
		for ctx.Err() == nil {
			_, err := conn.Create(path, nil, gozk.FlagEphemeral, s0ACL)
			if err == nil {
				return func() { conn.Delete(path, -1) }, nil
			}
			if !errors.Is(err, gozk.ErrNodeExists) {
				return nil, err
			}
		}
		return nil, ctx.Err()
	}
}

// asyncTAS: a create every poll period without waiting for the answers,
// until one succeeds; the creates still in flight are then waited for
// (they fail: the node is ours) so none can succeed after the release.
func asyncTAS(conn *gozk.Conn, path string, poll time.Duration) s0Lock {
	return func(ctx context.Context) (func(), error) {
		results := make(chan error, s0MaxInflight)
		inflight := 0
		send := func() {
			inflight++
			go func() {
				_, err := conn.Create(path, nil, gozk.FlagEphemeral, s0ACL)
				results <- err
			}()
		}
		tick := time.NewTicker(poll)
		defer tick.Stop()
		send()
		var failed error
		won := false
		for !won && failed == nil {
			select {
			case <-ctx.Done():
				failed = ctx.Err()
			case <-tick.C:
				if inflight < s0MaxInflight {
					send()
				}
			case err := <-results:
				inflight--
				switch {
				case err == nil:
					won = true
				case !errors.Is(err, gozk.ErrNodeExists):
					failed = err
				}
			}
		}
		for ; inflight > 0; inflight-- {
			if err := <-results; err == nil {
				won = true // a late create won (only possible when we had failed)
			}
		}
		if won && failed != nil {
			conn.Delete(path, -1)
		}
		if failed != nil {
			return nil, failed
		}
		return func() { conn.Delete(path, -1) }, nil
	}
}

// seqOf returns the sequence number ZooKeeper appended to a node name.
func seqOf(name string) string { return name[strings.LastIndex(name, "-")+1:] }

// queueDecide looks at the children list for our node: acquired when it
// has the smallest sequence number, else the predecessor to watch.
func queueDecide(kids []string, me string) (acquired bool, pred string) {
	slices.SortFunc(kids, func(a, b string) int { return strings.Compare(seqOf(a), seqOf(b)) })
	for i, k := range kids {
		if k == me {
			if i == 0 {
				return true, ""
			}
			return false, kids[i-1]
		}
	}
	return false, ""
}

// queueWait waits, ZooKeeper's recipe, until our node is the smallest:
// watch the predecessor, list again when it goes.
func queueWait(ctx context.Context, conn *gozk.Conn, dir, me string, kids []string) error {
	for {
		acquired, pred := queueDecide(kids, me)
		if acquired {
			return nil
		}
		if pred == "" {
			return fmt.Errorf("queue lock: %s not among the children", me)
		}
		ok, _, ch, err := conn.ExistsW(dir + "/" + pred)
		if err != nil {
			return err
		}
		if ok {
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if kids, _, err = conn.Children(dir); err != nil {
			return err
		}
	}
}

// syncQueue: create an ephemeral sequential node, list the children, watch
// the predecessor (two round trips when the lock is free).
func syncQueue(conn *gozk.Conn, dir string) s0Lock {
	return func(ctx context.Context) (func(), error) {
		p, err := conn.Create(dir+"/lock-", nil, gozk.FlagEphemeral|gozk.FlagSequence, s0ACL)
		if err != nil {
			return nil, err
		}
		me := p[len(dir)+1:]
		release := func() { conn.Delete(p, -1) }
		kids, _, err := conn.Children(dir)
		if err == nil {
			err = queueWait(ctx, conn, dir, me, kids)
		}
		if err != nil {
			release()
			return nil, err
		}
		return release, nil
	}
}

// asyncQueue: send the create and, without waiting for it, list the
// children every poll period; once the create has answered, the newest
// list that contains our node decides (one round trip when the lock is
// free), then the predecessor is watched as in the synchronous recipe.
func asyncQueue(conn *gozk.Conn, dir string, poll time.Duration) s0Lock {
	return func(ctx context.Context) (func(), error) {
		created := make(chan struct {
			p   string
			err error
		}, 1)
		go func() {
			p, err := conn.Create(dir+"/lock-", nil, gozk.FlagEphemeral|gozk.FlagSequence, s0ACL)
			created <- struct {
				p   string
				err error
			}{p, err}
		}()
		type list struct {
			kids []string
			err  error
		}
		lists := make(chan list, s0MaxInflight)
		stop := make(chan struct{})
		defer close(stop)
		inflight := 0
		var lmu sync.Mutex
		ask := func() {
			lmu.Lock()
			if inflight >= s0MaxInflight {
				lmu.Unlock()
				return
			}
			inflight++
			lmu.Unlock()
			go func() {
				kids, _, err := conn.Children(dir)
				lmu.Lock()
				inflight--
				lmu.Unlock()
				select {
				case lists <- list{kids, err}:
				case <-stop:
				}
			}()
		}
		tick := time.NewTicker(poll)
		defer tick.Stop()
		ask()
		me, path := "", ""
		var newest []string
		for {
			select {
			case <-ctx.Done():
				if path != "" {
					conn.Delete(path, -1)
				}
				return nil, ctx.Err()
			case <-tick.C:
				ask()
			case c := <-created:
				if c.err != nil {
					return nil, c.err
				}
				path, me = c.p, c.p[len(dir)+1:]
				if slices.Contains(newest, me) {
					goto decide
				}
				ask()
			case l := <-lists:
				if l.err != nil {
					continue
				}
				newest = l.kids
				if me != "" && slices.Contains(newest, me) {
					goto decide
				}
			}
		}
	decide:
		if err := queueWait(ctx, conn, dir, me, newest); err != nil {
			conn.Delete(path, -1)
			return nil, err
		}
		return func() { conn.Delete(path, -1) }, nil
	}
}

// s0Strategies returns the strategies a system runs, each with a function
// that opens one session's lock.
func s0Strategies(c *Cluster, f Flavor, base string, poll time.Duration) map[string]func(region string, server int) (s0Lock, func(), error) {
	zkOpen := func(mk func(conn *gozk.Conn) s0Lock) func(string, int) (s0Lock, func(), error) {
		return func(region string, server int) (s0Lock, func(), error) {
			conn, err := newZK(c, region, server)
			if err != nil {
				return nil, nil, err
			}
			return mk(conn), conn.Close, nil
		}
	}
	out := map[string]func(string, int) (s0Lock, func(), error){}
	switch f.Name {
	case "Meridian (native)":
		out[S0Server] = func(region string, server int) (s0Lock, func(), error) {
			cl, err := newNative(c, region, server)
			if err != nil {
				return nil, nil, err
			}
			name := strings.ReplaceAll(base, "/", "") + "-server"
			return func(ctx context.Context) (func(), error) {
				l, err := cl.Lock(ctx, name, client.LockOptions{})
				if err != nil {
					return nil, err
				}
				return func() { l.Unlock(context.Background()) }, nil
			}, func() { cl.Close() }, nil
		}
	case "Meridian (ZooKeeper protocol)", "ZooKeeper 3.8":
		out[S0SyncTAS] = zkOpen(func(conn *gozk.Conn) s0Lock { return syncTAS(conn, base+"-tas-sync") })
		out[S0AsyncTAS] = zkOpen(func(conn *gozk.Conn) s0Lock { return asyncTAS(conn, base+"-tas-async", poll) })
		out[S0SyncQueue] = zkOpen(func(conn *gozk.Conn) s0Lock { return syncQueue(conn, base+"-q-sync") })
		out[S0AsyncQueue] = zkOpen(func(conn *gozk.Conn) s0Lock { return asyncQueue(conn, base+"-q-async", poll) })
	}
	return out
}

// RunSeed000 runs every strategy a flavor offers at every critical-section
// mean of p on one topology.
func RunSeed000(c *Cluster, t *Topology, f Flavor, p Seed000Params, progress func(string)) []Result {
	base := fmt.Sprintf("/s0-%d", mrand.Int64())
	strategies := s0Strategies(c, f, base, p.Poll)
	if len(strategies) == 0 {
		return nil
	}
	// The queue locks' parent nodes.
	if r, s := serverFor(t, 0); f.System == "zookeeper" || f.Name == "Meridian (ZooKeeper protocol)" {
		conn, err := newZK(c, r, s)
		if err != nil {
			progress(fmt.Sprintf("seed000 %s %s: %v", t.Name, f.Name, err))
			return []Result{{Workload: "seed000", Topology: t.Name, Flavor: f.Name, Errors: 1, Hist: newHist()}}
		}
		for _, d := range []string{base + "-q-sync", base + "-q-async"} {
			conn.Create(d, nil, 0, s0ACL)
		}
		conn.Close()
	}
	var out []Result
	for _, name := range []string{S0SyncTAS, S0AsyncTAS, S0SyncQueue, S0AsyncQueue, S0Server} {
		open, ok := strategies[name]
		if !ok {
			continue
		}
		for _, svc := range p.Service {
			out = append(out, s0Run(c, t, f, name, open, p, svc, progress))
		}
	}
	return out
}

// s0Run is one strategy at one contention level: requests arrive at random
// for p.Duration (s0Schedule: the same requests for every strategy at this
// point), each on a session no other request is using (then the
// ones still waiting are let finish, bounded). Cost of Consensus models every
// request as its own client; sharing a session between outstanding
// requests would also be wrong for Meridian's server-side lock, whose
// session is the owner: a second acquire from a session that holds the
// lock is granted at once (acquires are idempotent per session) and one
// from a session already waiting is refused. The pool starts at
// p.Sessions, opened beforehand; a request that finds none idle opens one
// before its clock starts (a new client arriving ready), up to
// s0MaxSessions.
func s0Run(c *Cluster, t *Topology, f Flavor, name string, open func(string, int) (s0Lock, func(), error), p Seed000Params, svc time.Duration, progress func(string)) Result {
	res := Result{Workload: "seed000", Topology: t.Name, Flavor: f.Name, Series: name, Clients: p.Sessions, Hist: newHist(),
		Leader: leaderRegion(c, t), ServiceMs: float64(svc) / float64(time.Millisecond), InterarrivalMs: float64(p.Interarrival) / float64(time.Millisecond)}
	var mu sync.Mutex // guards res
	fail := func(err error) {
		if res.Errors == 0 {
			res.FirstError = err.Error()
		}
		res.Errors++
	}
	pool := &s0Pool{open: func(i int) (s0Lock, func(), error) {
		r, s := serverFor(t, i)
		l, cl, err := open(r, s)
		if err != nil {
			return nil, nil, err
		}
		// Tag the request's event with the server its session sits on.
		return func(ctx context.Context) (func(), error) {
			if ev, ok := ctx.Value(s0EventKey{}).(*s0Event); ok {
				ev.server = s
			}
			return l(ctx)
		}, cl, nil
	}}
	leader := -1
	if c.Leader != nil {
		leader = c.Leader()
	}
	var events []s0Event
	defer pool.close()
	var first []s0Lock
	for i := 0; i < s0InitialSessions(p, t); i++ {
		l, err := pool.take()
		if err != nil {
			fail(err)
			continue
		}
		first = append(first, l)
	}
	if len(first) == 0 {
		return res
	}
	for _, l := range first {
		pool.put(l)
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), p.Duration+2*time.Minute)
	defer cancel()
	start := time.Now()
	sched := s0Schedule(p, svc)
	res.Waits = make([]int64, len(sched))
	for i, a := range sched {
		res.Waits[i] = -1 // until granted
		time.Sleep(time.Until(start.Add(a.at)))
		hold := a.hold
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := pool.take()
			if err != nil {
				mu.Lock()
				fail(err)
				mu.Unlock()
				return
			}
			defer pool.put(l)
			t0 := time.Now()
			ev := &s0Event{wait: t0.Sub(start), server: -1}
			release, err := l(context.WithValue(ctx, s0EventKey{}, ev))
			el := time.Since(t0)
			ev.grant = ev.wait + el
			mu.Lock()
			if err != nil {
				fail(err)
			} else {
				res.Hist.RecordValue(el.Microseconds())
				res.Waits[i] = el.Microseconds()
			}
			mu.Unlock()
			if err == nil {
				time.Sleep(hold)
				ev.release = time.Since(start)
				mu.Lock()
				events = append(events, *ev)
				mu.Unlock()
				release()
			}
		}()
	}
	wg.Wait()
	res.Handoffs, res.HandoffMs, res.LeaderGrants, res.Overlaps = s0Handoffs(events, leader)
	res.Summary = summarize(res.Hist)
	progress(fmt.Sprintf("seed000 %s %s %s: service %v: %d acquires, avg %.2f ms p99 %.2f ms (%d errors); %d hand-offs, mean %.1f ms, %.0f%% of grants on the leader's server",
		t.Name, f.Name, name, svc, res.Hist.TotalCount(), res.Summary.Avg, res.Summary.P99, res.Errors, res.Handoffs, res.HandoffMs, 100*res.LeaderGrants))
	return res
}

// s0InitialSessions is p.Sessions rounded up to a multiple of the servers,
// so that every server holds as many of the sessions opened first (they go
// round-robin). Under contention the lock's hand-offs favour waiters whose
// session sits on the leader, and with 5 sessions over 3 servers the third
// held 1 in 5: about 20% of ZooKeeper's grants went to sessions on its
// leader (its election puts it on the third), against 40% of Meridian's.
func s0InitialSessions(p Seed000Params, t *Topology) int {
	n, k := p.Sessions, len(t.Servers)
	if k > 0 && n%k != 0 {
		n += k - n%k
	}
	return n
}

// s0Event is one granted request, in times after the run's start as the
// clients saw them (one process, one clock): when it began to wait, when it
// was granted, when its holder began to release, and the index of the
// server its session sits on.
type s0Event struct {
	wait, grant, release time.Duration
	server               int
}

type s0EventKey struct{}

// s0Handoffs measures how a lock passes from holder to holder, the figure
// that decides a strategy's average once requests queue: a hand-off is a
// grant to a request that was already waiting when the previous holder
// began to release, and its length is the time from that release to the
// grant (the lock's dead time: release, commit, notice, acquire). It
// returns the number of hand-offs, their mean in ms, the share of all
// grants made to sessions on the leader's server (leader < 0: unknown, 0),
// and overlaps: grants seen before the previous holder began to release,
// which a correct lock never shows.
func s0Handoffs(events []s0Event, leader int) (n int, meanMs, leaderShare float64, overlaps int) {
	ev := slices.Clone(events)
	slices.SortFunc(ev, func(a, b s0Event) int { return cmp.Compare(a.grant, b.grant) })
	var sum time.Duration
	onLeader := 0
	for i, e := range ev {
		if leader >= 0 && e.server == leader {
			onLeader++
		}
		if i == 0 {
			continue
		}
		prev := ev[i-1]
		switch {
		case e.grant < prev.release:
			overlaps++
		case e.wait < prev.release:
			n++
			sum += e.grant - prev.release
		}
	}
	if n > 0 {
		meanMs = float64(sum) / float64(n) / float64(time.Millisecond)
	}
	if len(ev) > 0 && leader >= 0 {
		leaderShare = float64(onLeader) / float64(len(ev))
	}
	return n, meanMs, leaderShare, overlaps
}
