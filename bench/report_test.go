package bench

import (
	"strings"
	"testing"
)

// The issue 4 target table: p99 ratios peer/Meridian for own locks,
// hand-off rate ratios Meridian/peer for one lock, "not run" for a peer
// that did not run, nothing without a peer.
func TestLockTargets(t *testing.T) {
	res := func(flavor string, clients int, same bool, p99, rate float64) Result {
		return Result{Workload: "locks", Flavor: flavor, Clients: clients, Same: same, OpsPerSec: rate,
			Summary: Summary{Count: 100, P99: p99}}
	}
	g := group{workload: "locks", topology: "3dc", results: []Result{
		res("Meridian (native)", 1, false, 4, 0),
		res("ZooKeeper 3.8", 1, false, 30, 0),
		res("etcd 3.4", 1, false, 10, 0),
		res("Meridian (native)", 5, true, 0, 40),
		res("ZooKeeper 3.8", 5, true, 0, 8),
		res("Meridian (native)", 3, true, 0, 40),
	}}
	var b strings.Builder
	lockTargets(&b, g)
	out := b.String()
	for _, want := range []string{
		"| 1, own | p99 ms | 4.00 | 30.0 | 10.0 | ZooKeeper's is 7.5× (≥5×) | etcd's is 2.5× (≥3×) |",
		"| 5, one | hand-offs/s | 40.0 | 8.0 | not run | Meridian's is 5.0× (≥3×) | Meridian's is — |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing row %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "| 3, one |") {
		t.Errorf("a row without any peer:\n%s", out)
	}
	b.Reset()
	lockTargets(&b, group{workload: "locks", topology: "x", results: []Result{res("Meridian (native)", 1, false, 4, 0)}})
	if b.Len() != 0 {
		t.Errorf("a table without peers:\n%s", b.String())
	}
}
