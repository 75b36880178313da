package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSessionsKeys(t *testing.T) {
	if got := sessionsKey(0); got != "/w/n000000" {
		t.Errorf("key 0 %q", got)
	}
	if got := sessionsKey(99999); got != "/w/n099999" {
		t.Errorf("key 99999 %q", got)
	}
	for _, j := range []int{0, 7, 99999, 1234567} {
		if got, ok := sessionsKeyIndex(sessionsKey(j)); !ok || got != j {
			t.Errorf("index of %q: %d %v", sessionsKey(j), got, ok)
		}
	}
	for _, p := range []string{"/w", "/w/n", "/w/x1", "/w/n12a", "/ready", "/w/n-1"} {
		if _, ok := sessionsKeyIndex(p); ok {
			t.Errorf("%q taken for a key", p)
		}
	}
}

func TestSessionWatches(t *testing.T) {
	// 3 sessions, 8 keys: key j by session j mod 3.
	if got := sessionWatches(0, 3, 8); !slices.Equal(got, []int{0, 3, 6}) {
		t.Errorf("session 0: %v", got)
	}
	if got := sessionWatches(2, 3, 8); !slices.Equal(got, []int{2, 5}) {
		t.Errorf("session 2: %v", got)
	}
	// More sessions than keys: the last ones watch nothing.
	if got := sessionWatches(5, 10, 4); got != nil {
		t.Errorf("session 5 of 10, 4 keys: %v", got)
	}
	// Every key exactly once over the sessions.
	seen := map[int]int{}
	for s := 0; s < 7; s++ {
		for _, j := range sessionWatches(s, 7, 100) {
			seen[j]++
		}
	}
	if len(seen) != 100 {
		t.Errorf("%d keys covered, want 100", len(seen))
	}
	for j, n := range seen {
		if n != 1 {
			t.Errorf("key %d watched %d times", j, n)
		}
	}
}

func TestEtcdPoolSize(t *testing.T) {
	for _, c := range []struct{ asked, n, want int }{
		{0, 10000, 100}, {0, 200, 3}, {0, 5000, 50}, {0, 100000, 100}, {0, 2, 2}, {0, 1, 1},
		{16, 10000, 16}, {16, 4, 4},
	} {
		if got := etcdPoolSize(c.asked, c.n); got != c.want {
			t.Errorf("etcdPoolSize(%d, %d) = %d, want %d", c.asked, c.n, got, c.want)
		}
	}
}

func TestNotifyStats(t *testing.T) {
	ms := int64(time.Millisecond)
	sent := []int64{1 * ms, 2 * ms, 3 * ms, 4 * ms, 0}
	acked := []int64{3 * ms, 4 * ms, 0, 6 * ms, 0} // key 2's write failed
	event := []int64{5 * ms, 3 * ms, 9 * ms, 0, 0} // key 1's event before its ack; key 3's missing
	events, missing, before, fromAck, fromSend := notifyStats(sent, acked, event)
	if events != 2 || missing != 1 || before != 1 {
		t.Errorf("events %d missing %d before ack %d, want 2 1 1", events, missing, before)
	}
	if !slices.Equal(fromAck, []float64{2, 0}) || !slices.Equal(fromSend, []float64{4, 1}) {
		t.Errorf("from ack %v, from send %v", fromAck, fromSend)
	}
}

func TestPercentile(t *testing.T) {
	var xs []float64
	for i := 100; i >= 1; i-- {
		xs = append(xs, float64(i))
	}
	if p := percentile(xs, 50); p != 50 {
		t.Errorf("p50 %v", p)
	}
	if p := percentile(xs, 99); p != 99 {
		t.Errorf("p99 %v", p)
	}
	if p := percentile(xs, 100); p != 100 {
		t.Errorf("p100 %v", p)
	}
	if xs[0] != 100 {
		t.Errorf("percentile sorted its argument")
	}
	if p := percentile([]float64{7}, 99); p != 7 {
		t.Errorf("one value: %v", p)
	}
	if p := percentile(nil, 50); p != 0 {
		t.Errorf("none: %v", p)
	}
}

func TestRecorder(t *testing.T) {
	r := newNotifyRecorder(3)
	now := time.Unix(0, 100)
	r.onEvent(1, now) // not written: stray
	r.sent[1].Store(50)
	r.acked[1].Store(60)
	r.onEvent(1, now)
	r.onEvent(1, now.Add(time.Second)) // a second event for one write
	r.onEvent(7, now)                  // out of range
	if r.stray.Load() != 2 || r.dup.Load() != 1 || r.event[1].Load() != 100 {
		t.Errorf("stray %d dup %d event %d", r.stray.Load(), r.dup.Load(), r.event[1].Load())
	}
	r.sent[2].Store(70)
	r.acked[2].Store(80)
	if p := r.pending(); p != 1 {
		t.Errorf("pending %d, want 1", p)
	}
}

func TestSelectAll(t *testing.T) {
	a, b := make(chan int, 2), make(chan int, 1)
	a <- 1
	a <- 2
	b <- 3
	close(a)
	close(b)
	var got []int
	gone := 0
	selectAll([]<-chan int{a, b}, func(v any) { got = append(got, v.(int)) }, func() { gone++ })
	slices.Sort(got)
	if !slices.Equal(got, []int{1, 2, 3}) || gone != 2 {
		t.Errorf("got %v, %d closed", got, gone)
	}
}

func sessionsSample() SessionsResult {
	mib := func(xs ...float64) []float64 { return xs }
	return SessionsResult{System: "meridian", Sessions: 1024, Watches: 2048, Connections: 1024, Writers: 8,
		Opened: 1024, Znodes: 2048, WatchesSet: 2048, OpenSec: 1.5, CreateSec: 2.25, WatchSec: 0.5,
		Baseline:      IdleWindow{Label: "baseline", Sec: 10, CPUMsPerS: mib(10, 10, 10), RSSMiB: mib(30, 30, 30), HeapMiB: mib(4, 4, 4), LoadAvg1: 1.5},
		AfterSessions: SessionsStep{RSSMiB: mib(31, 31, 31), HeapMiB: mib(4.5, 4.5, 4.5)},
		AfterZnodes:   SessionsStep{RSSMiB: mib(33, 33, 33), HeapMiB: mib(5, 5, 5)},
		Rest:          IdleWindow{Label: "at rest", Sec: 10, CPUMsPerS: mib(20, 20, 20.72), RSSMiB: mib(34, 34, 34), HeapMiB: mib(6, 6, 6), LoadAvg1: 1.75},
		Load:          &IdleWindow{Label: "200 writes/s", Sec: 10, CPUMsPerS: mib(100, 80, 80.72), RSSMiB: mib(35, 35, 35), LoadAvg1: 2, Writes: 1990},
		Rate:          200, Writes: 2400, Events: 2400, BeforeAck: 1000, AckP50Ms: 0.1, AckP99Ms: 0.9, SendP50Ms: 1.25, SendP99Ms: 3.5,
		LoadAvg1: 1.25, Notes: "fsync on"}
}

func TestSessionsCost(t *testing.T) {
	c := sessionsCost(sessionsSample())
	// 3 MiB over 1024 sessions: 3 KiB each; 6 MiB over 2048 keys: 3 KiB;
	// 3 MiB over 2048 watches: 1.5 KiB.
	if !near(c.RSSPerSessionB, 3072) || !near(c.RSSPerZnodeB, 3072) || !near(c.RSSPerWatchB, 1536) {
		t.Errorf("RSS per session %v, key %v, watch %v", c.RSSPerSessionB, c.RSSPerZnodeB, c.RSSPerWatchB)
	}
	// Heap: 1.5 MiB / 1024 sessions = 1536 B; 1.5 MiB / 2048 keys = 768;
	// 3 MiB / 2048 watches = 1536.
	if !c.HasHeap || !near(c.HeapPerSessionB, 1536) || !near(c.HeapPerZnodeB, 768) || !near(c.HeapPerWatchB, 1536) {
		t.Errorf("heap %+v", c)
	}
	// CPU 30 → 60.72 ms/s over 1024 sessions: 30 µs/s each.
	if !near(c.RestCPUPerSessionUs, 30) {
		t.Errorf("CPU per session %v µs/s", c.RestCPUPerSessionUs)
	}
	if z := sessionsCost(SessionsResult{}); z.RSSPerSessionB != 0 || z.HasHeap {
		t.Errorf("an empty result costs %+v", z)
	}
}

func TestSessionsMarkdown(t *testing.T) {
	r := sessionsSample()
	zk := sessionsSample()
	zk.System, zk.Baseline.HeapMiB, zk.AfterSessions.HeapMiB, zk.AfterZnodes.HeapMiB, zk.Rest.HeapMiB = "zookeeper", nil, nil, nil, nil
	zk.Missing, zk.Lost, zk.Failures = 3, 1, []string{"1 sessions lost their connection or expired during the run"}
	p := SessionsParams{Sessions: 1024, Watches: 2048, Window: 10 * time.Second, Settle: 5 * time.Second, Rate: 200, SessionTimeout: 30 * time.Second, Writers: 8}
	md := SessionsMarkdown([]SessionsResult{r, zk}, "loopback", p)
	for _, want := range []string{
		"## 1024 sessions and 2048 watches on 3 servers, topology loopback",
		"| meridian | 1024 of 1024 (1024) | 1.5 | 2048 (2.2) | 2048 (0.5) | 30.0 / 60.7 / 260.7 | 90 / 93 / 99 / 102 / 105 |",
		"| meridian | 3072 | 3072 | 1536 | 1536 / 768 / 1536 | 30.00 | 200.0 (1000 µs) |",
		"| zookeeper | 3072 | 3072 | 1536 | — | 30.00 |",
		"| meridian | 2400 (0; 0) | 199 | 2400 / 2400 | 0 | 0 | 1000 | 0.10 / 0.90 | 1.25 / 3.50 | 0 | 0 |",
		"| meridian | 1 | 10.0 / 20.0 / 100.0 | 30.0 / 31.0 / 33.0 / 34.0 / 35.0 | 4.0 / 6.0 |",
		"| zookeeper | 3 | 10.0 / 20.7 / 80.7 | 30.0 / 31.0 / 33.0 / 34.0 / 35.0 | — |",
		"meridian 1.25, 1.50, 1.75, 2.00;",
		"meridian: a session adds 3.0 KiB of RSS across the three servers and 30.00 µs/s of their CPU at rest, a key 3072 B, a watch 1536 B; at 200 writes/s the servers use 261 ms/s of CPU (61 at rest) and a watch fires 1.25 ms after its write was sent at p50, 3.50 at p99 (2400 of 2400 events).",
		"- meridian: fsync on",
		"Failures:",
		"- zookeeper: 1 sessions lost",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "No failures") {
		t.Errorf("a run with failures says none")
	}
	// Every table's rows have as many cells as its header.
	cells := 0
	for _, l := range strings.Split(md, "\n") {
		if !strings.HasPrefix(l, "|") {
			cells = 0
			continue
		}
		if n := strings.Count(l, "|"); cells == 0 {
			cells = n
		} else if n != cells {
			t.Errorf("row %q has %d bars, its header %d", l, n, cells)
		}
	}
	if md := SessionsMarkdown([]SessionsResult{r}, "loopback", p); !strings.Contains(md, "No failures") {
		t.Errorf("a clean run does not say so:\n%s", md)
	}
	// Missing events alone are a failure too.
	zk.Failures, zk.Lost = nil, 0
	if md := SessionsMarkdown([]SessionsResult{zk}, "loopback", p); !strings.Contains(md, "- zookeeper: 1024 of 1024 sessions, 2048 of 2048 watches, 0 writes failed, 3 events missing") {
		t.Errorf("missing events not reported:\n%s", md)
	}
}
