package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The queue recipe's decision: the smallest sequence number holds the lock;
// anyone else watches the node just before its own.
func TestQueueDecide(t *testing.T) {
	kids := []string{"lock-0000000012", "lock-0000000010", "lock-0000000011"}
	if ok, _ := queueDecide(append([]string(nil), kids...), "lock-0000000010"); !ok {
		t.Error("smallest not acquired")
	}
	if ok, pred := queueDecide(append([]string(nil), kids...), "lock-0000000012"); ok || pred != "lock-0000000011" {
		t.Errorf("got %v, predecessor %q", ok, pred)
	}
	if ok, pred := queueDecide(append([]string(nil), kids...), "lock-0000000099"); ok || pred != "" {
		t.Errorf("absent node: %v %q", ok, pred)
	}
}

// The cell-by-cell verdict compares the server-side lock with the best
// strategy on either system.
func TestSeed000Summary(t *testing.T) {
	mk := func(flavor, series string, avg float64) Result {
		return Result{Workload: "seed000", Topology: "g", Flavor: flavor, Series: series, ServiceMs: 1, InterarrivalMs: 500,
			Summary: Summary{Count: 10, Avg: avg}}
	}
	r := &Report{Results: []Result{
		mk("Meridian (native)", S0Server, 30),
		mk("ZooKeeper 3.8", S0SyncTAS, 40), mk("ZooKeeper 3.8", S0AsyncTAS, 35),
		mk("Meridian (ZooKeeper protocol)", S0SyncQueue, 25),
	}}
	var b strings.Builder
	r.seed000Summary(&b)
	if !strings.Contains(b.String(), "35.0 (async test-and-set)") || !strings.Contains(b.String(), "no (1.20×) |") {
		t.Fatalf("summary:\n%s", b.String())
	}
}

// Where requests queued behind the server-side lock, the hand-off table
// sets its hand-offs beside the fastest strategy's; where they did not,
// there is no table.
func TestSeed000SummaryHandoffs(t *testing.T) {
	mk := func(flavor, series string, avg float64, handoffs int, ms, share float64) Result {
		return Result{Workload: "seed000", Topology: "g", Flavor: flavor, Series: series, ServiceMs: 1, InterarrivalMs: 500,
			Summary: Summary{Count: 40, Avg: avg}, Handoffs: handoffs, HandoffMs: ms, LeaderGrants: share}
	}
	r := &Report{Results: []Result{
		mk("Meridian (native)", S0Server, 4000, 30, 650, 0.33),
		mk("ZooKeeper 3.8", S0SyncTAS, 2500, 25, 480, 0.8),
		mk("ZooKeeper 3.8", S0SyncQueue, 3000, 31, 600, 0.33),
	}}
	var b strings.Builder
	r.seed000Summary(&b)
	if want := "| g | 1 | 30, 650, 33% | sync test-and-set on ZooKeeper 3.8 | 25, 480, 80% | 0 |"; !strings.Contains(b.String(), want) {
		t.Fatalf("want %q in:\n%s", want, b.String())
	}
	r.Results[0].Handoffs = 9
	b.Reset()
	r.seed000Summary(&b)
	if strings.Contains(b.String(), "hand-offs where requests queued") {
		t.Fatalf("a table with fewer than 10 hand-offs:\n%s", b.String())
	}
}

// A difference within two standard errors of the averages is marked as
// not resolved by the run; a clear one is not.
func TestSeed000SummaryNoise(t *testing.T) {
	// avg-1 ms and avg+1 ms, ten each: standard error 0.23 ms per series,
	// so two standard errors of the difference are 0.65 ms.
	spread := func(avg float64) [][2]int64 {
		us := int64(avg * 1000)
		return [][2]int64{{us - 1000, 10}, {us + 1000, 10}}
	}
	mk := func(flavor, series string, avg float64) Result {
		return Result{Workload: "seed000", Topology: "g", Flavor: flavor, Series: series, ServiceMs: 1, InterarrivalMs: 500,
			Summary: Summary{Count: 20, Avg: avg}, Raw: spread(avg)}
	}
	for _, tc := range []struct {
		server, other float64
		want          string
	}{
		{2.2, 2.0, "no (1.10×), within noise (Δ +0.20 ± 0.65 ms) |"},
		{4.0, 2.0, "no (2.00×) |"},
		{1.5, 2.0, "yes (0.75×), within noise (Δ -0.50 ± 0.65 ms) |"},
	} {
		r := &Report{Results: []Result{mk("Meridian (native)", S0Server, tc.server), mk("ZooKeeper 3.8", S0SyncTAS, tc.other)}}
		var b strings.Builder
		r.seed000Summary(&b)
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("server %v vs %v: want %q in\n%s", tc.server, tc.other, tc.want, b.String())
		}
	}
}

// The grid's heat map needs several client and server RTTs at one hold
// time; the contention one several hold times. Each is drawn.
func TestSeed000Heatmaps(t *testing.T) {
	mk := func(topo string, hold float64) Result {
		return Result{Workload: "seed000", Topology: topo, Flavor: "ZooKeeper 3.8", Series: S0SyncTAS, ServiceMs: hold,
			Summary: Summary{Count: 3, Avg: 10 + hold}}
	}
	grid := &Report{Results: []Result{mk("seed000-u0-s0", 1), mk("seed000-u100-s0", 1), mk("seed000-u0-s250", 1)}}
	if h := grid.seed000Heatmaps(); len(h) != 1 || h[0].file != "seed000-grid-heatmap.png" {
		t.Fatalf("grid: %+v", h)
	}
	cont := &Report{Results: []Result{mk("seed000-u0-s0", 1), mk("seed000-u0-s0", 50), mk("seed000-u100-s0", 1)}}
	if h := cont.seed000Heatmaps(); len(h) != 1 || h[0].file != "seed000-contention-heatmap.png" {
		t.Fatalf("contention: %+v", h)
	}
	if h := (&Report{Results: []Result{mk("seed000-u0-s0", 1)}}).seed000Heatmaps(); len(h) != 0 {
		t.Fatalf("one cell: %+v", h)
	}
	dir := t.TempDir()
	for _, r := range []*Report{grid, cont} {
		for _, h := range r.seed000Heatmaps() {
			if err := r.writeHeatmap(dir, h); err != nil {
				t.Fatal(err)
			}
			if st, err := os.Stat(filepath.Join(dir, h.file)); err != nil || st.Size() == 0 {
				t.Fatalf("%s not drawn: %v", h.file, err)
			}
		}
	}
}

// Cost of Consensus's line plots follow from the cells run: against the server RTT
// per client RTT (figure 11), against the client RTT without server RTT at
// each arrival rate's longest hold (15, 16), against the hold per round
// trips (13, 14); a variable with one value gets no plot.
func TestSeed000Lines(t *testing.T) {
	mk := func(topo string, hold, every float64) Result {
		return Result{Workload: "seed000", Topology: topo, Flavor: "ZooKeeper 3.8", Series: S0SyncTAS, ServiceMs: hold, InterarrivalMs: every,
			Summary: Summary{Count: 3, Avg: 10 + hold}}
	}
	grid := &Report{Results: []Result{mk("seed000-u100-s0", 1, 500), mk("seed000-u0-s0", 1, 500), mk("seed000-u0-s250", 1, 500), mk("seed000-u100-s250", 1, 500),
		mk("seed000-u250-s0", 1, 500)}}
	cont := &Report{Results: []Result{mk("seed000-u0-s0", 1, 200), mk("seed000-u0-s0", 150, 200), mk("seed000-u100-s0", 1, 200), mk("seed000-u100-s0", 150, 200)}}
	files := func(r *Report) []string {
		var out []string
		for _, l := range r.seed000Lines() {
			out = append(out, l.file)
		}
		return out
	}
	if got, want := files(grid), []string{"seed000-vs-server-rtt-u0-hold1-every500.png", "seed000-vs-server-rtt-u100-hold1-every500.png",
		"seed000-vs-client-rtt-hold1-every500.png"}; !slices.Equal(got, want) {
		t.Errorf("grid plots %q, want %q", got, want)
	}
	if got, want := files(cont), []string{"seed000-vs-client-rtt-hold150-every200.png",
		"seed000-vs-hold-u0-s0-every200.png", "seed000-vs-hold-u100-s0-every200.png"}; !slices.Equal(got, want) {
		t.Errorf("contention plots %q, want %q", got, want)
	}
	// Each plot holds exactly its cells.
	l := grid.seed000Lines()[0]
	var xs []float64
	for _, res := range grid.Results {
		if x, ok := l.x(res); ok {
			xs = append(xs, x)
		}
	}
	if !slices.Equal(xs, []float64{0, 250}) {
		t.Errorf("%s has x %v, want the server RTTs 0 and 250 at client RTT 0", l.file, xs)
	}
	if got := files(&Report{Results: []Result{mk("seed000-u0-s0", 1, 500)}}); len(got) != 0 {
		t.Errorf("one cell: %q", got)
	}
	dir := t.TempDir()
	for _, r := range []*Report{grid, cont} {
		if err := r.WritePlots(dir); err != nil {
			t.Fatal(err)
		}
		md := r.Markdown("bench")
		for _, f := range files(r) {
			if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
				t.Errorf("%s not drawn: %v", f, err)
			}
			if !strings.Contains(md, "(bench/"+f+")") {
				t.Errorf("the report does not show %s", f)
			}
		}
	}
}

// Every request gets a session no other outstanding request holds: idle
// ones first, in the order they were freed, else a new one, up to
// s0MaxSessions; past that a request fails instead of sharing.
func TestS0Pool(t *testing.T) {
	var mu sync.Mutex
	busy := map[int]bool{}
	p := &s0Pool{open: func(i int) (s0Lock, func(), error) {
		lock := func(context.Context) (func(), error) {
			mu.Lock()
			defer mu.Unlock()
			if busy[i] {
				return nil, fmt.Errorf("session %d handed out twice", i)
			}
			busy[i] = true
			return func() { mu.Lock(); busy[i] = false; mu.Unlock() }, nil
		}
		return lock, func() {}, nil
	}}
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for k := 0; k < 1000; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := p.take()
			if err != nil {
				errs <- err
				return
			}
			defer p.put(l)
			release, err := l(context.Background())
			if err != nil {
				errs <- err
				return
			}
			time.Sleep(time.Millisecond)
			release()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, errS0Sessions) {
			t.Fatal(err)
		}
	}
	if p.n > s0MaxSessions || p.n < 2 {
		t.Errorf("%d sessions opened for 1000 overlapping requests, want 2..%d", p.n, s0MaxSessions)
	}
	// Idle sessions go out in the order they were freed.
	q := &s0Pool{open: func(i int) (s0Lock, func(), error) {
		return func(context.Context) (func(), error) { return nil, fmt.Errorf("%d", i) }, func() {}, nil
	}}
	var ls []s0Lock
	for k := 0; k < 3; k++ {
		l, _ := q.take()
		ls = append(ls, l)
	}
	q.put(ls[1])
	q.put(ls[0])
	for _, want := range []string{"1", "0", "3"} {
		l, _ := q.take()
		if _, err := l(context.Background()); err.Error() != want {
			t.Errorf("took session %v, want %s", err, want)
		}
	}
	// At the bound, a request fails rather than share a session.
	full := &s0Pool{open: q.open, n: s0MaxSessions}
	if _, err := full.take(); !errors.Is(err, errS0Sessions) {
		t.Errorf("at the bound: %v", err)
	}
}

// Every strategy gets the same requests: the schedule depends on the point
// alone, its arrivals stay within the run at the mean rate asked, and
// another mean hold keeps the arrivals with holds in proportion.
func TestS0Schedule(t *testing.T) {
	p := Seed000Params{Interarrival: 200 * time.Millisecond, Duration: time.Hour}
	a, b := s0Schedule(p, 150*time.Millisecond), s0Schedule(p, 150*time.Millisecond)
	if !slices.Equal(a, b) {
		t.Fatal("two schedules of one point differ")
	}
	var holds time.Duration
	for i, x := range a {
		if x.at >= p.Duration || (i > 0 && x.at < a[i-1].at) {
			t.Fatalf("arrival %d at %v (previous %v, run %v)", i, x.at, a[i-1].at, p.Duration)
		}
		holds += x.hold
	}
	if mean := p.Duration / time.Duration(len(a)); mean < 190*time.Millisecond || mean > 210*time.Millisecond {
		t.Errorf("mean inter-arrival %v over %d arrivals, want about 200ms", mean, len(a))
	}
	if mean := holds / time.Duration(len(a)); mean < 142*time.Millisecond || mean > 158*time.Millisecond {
		t.Errorf("mean hold %v, want about 150ms", mean)
	}
	c := s0Schedule(p, 50*time.Millisecond)
	if len(c) != len(a) {
		t.Fatalf("%d arrivals at hold 50ms, %d at 150ms", len(c), len(a))
	}
	for i := range c {
		if c[i].at != a[i].at || (3*c[i].hold-a[i].hold).Abs() > 3 {
			t.Fatalf("request %d: %+v at hold 50ms, %+v at 150ms", i, c[i], a[i])
		}
	}
}

// A hand-off is a grant to a request already waiting when the previous
// holder began to release, measured from that release; a request that
// arrives to a free lock is not one, and a grant before the previous
// holder's release is an overlap.
func TestS0Handoffs(t *testing.T) {
	ms := func(x int) time.Duration { return time.Duration(x) * time.Millisecond }
	ev := []s0Event{
		{wait: ms(50), grant: ms(400), release: ms(420), server: 1},  // waited for the first: hand-off 300
		{wait: ms(0), grant: ms(10), release: ms(100), server: 0},    // free lock: not a hand-off
		{wait: ms(500), grant: ms(510), release: ms(600), server: 0}, // arrived after the release: not one
		{wait: ms(550), grant: ms(700), release: ms(710), server: 2}, // hand-off 100
	}
	n, mean, share, overlaps := s0Handoffs(ev, 0)
	if n != 2 || mean != 200 || share != 0.5 || overlaps != 0 {
		t.Errorf("got %d hand-offs, mean %v ms, leader share %v, %d overlaps; want 2, 200, 0.5, 0", n, mean, share, overlaps)
	}
	// Granted while the holder had not begun to release.
	ev = append(ev, s0Event{wait: ms(560), grant: ms(705), release: ms(800), server: 1})
	if _, _, _, overlaps = s0Handoffs(ev, 0); overlaps != 1 {
		t.Errorf("%d overlaps, want 1", overlaps)
	}
	if _, _, share, _ = s0Handoffs(ev, -1); share != 0 {
		t.Errorf("leader unknown: share %v, want 0", share)
	}
}

// The sessions opened first spread evenly over the servers.
func TestS0InitialSessions(t *testing.T) {
	three := &Topology{Servers: []string{"A", "B", "C"}}
	for _, tc := range []struct{ asked, want int }{{5, 6}, {6, 6}, {1, 3}, {7, 9}} {
		if got := s0InitialSessions(Seed000Params{Sessions: tc.asked}, three); got != tc.want {
			t.Errorf("%d sessions asked: %d opened, want %d", tc.asked, got, tc.want)
		}
	}
}

// Two series on the same requests are compared request by request: a lock
// 1 ms faster on every one of widely spread waits is clearly faster, which
// the independent test could not resolve.
func TestSeed000SummaryPaired(t *testing.T) {
	var fast, slow []int64
	var rawF, rawS [][2]int64
	for i := int64(0); i < 20; i++ {
		w := 10_000 + 5_000*i // 10 to 105 ms
		fast, slow = append(fast, w), append(slow, w+1000)
		rawF, rawS = append(rawF, [2]int64{w, 1}), append(rawS, [2]int64{w + 1000, 1})
	}
	slow[3], fast[7] = -1, -1 // not granted: left out of the pairs
	mk := func(flavor, series string, waits []int64, raw [][2]int64) Result {
		var sum int64
		for _, r := range raw {
			sum += r[0]
		}
		return Result{Workload: "seed000", Topology: "g", Flavor: flavor, Series: series, ServiceMs: 1, InterarrivalMs: 500,
			Summary: Summary{Count: int64(len(raw)), Avg: float64(sum) / float64(len(raw)) / 1000}, Raw: raw, Waits: waits}
	}
	server, recipe := mk("Meridian (native)", S0Server, fast, rawF), mk("ZooKeeper 3.8", S0SyncTAS, slow, rawS)
	var b strings.Builder
	(&Report{Results: []Result{server, recipe}}).seed000Summary(&b)
	if !strings.Contains(b.String(), "yes (0.98×) |") || !strings.Contains(b.String(), "paired differences") {
		t.Errorf("paired: want a clear yes in\n%s", b.String())
	}
	server.Waits, recipe.Waits = nil, nil
	b.Reset()
	(&Report{Results: []Result{server, recipe}}).seed000Summary(&b)
	if !strings.Contains(b.String(), "yes (0.98×), within noise") {
		t.Errorf("independent: want within noise in\n%s", b.String())
	}
	if m, se, ok := pairedDiff(fast, slow); !ok || m != -1 || se != 0 {
		t.Errorf("pairedDiff = %v, %v, %v; want -1, 0, true", m, se, ok)
	}
	if _, _, ok := pairedDiff(fast, slow[:5]); ok {
		t.Error("pairedDiff of different schedules: ok")
	}
}
