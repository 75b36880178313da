package bench

import (
	"strings"
	"testing"
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
