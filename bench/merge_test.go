package bench

import (
	"slices"
	"testing"
)

// Two runs of one point by a flavor make one row: every latency counted,
// the rates and CPU averaged, the errors added; runs that do not pair up
// stay separate rows.
func TestMergeRuns(t *testing.T) {
	run := func(lat []int64, ops float64, errs int) []Result {
		h := newHist()
		for _, v := range lat {
			h.RecordValue(v)
		}
		return []Result{{Workload: "throughput-write", Flavor: "f", Clients: 32, Hist: h, Summary: summarize(h),
			OpsPerSec: ops, ServerCPUUs: ops / 100, HarnessCPUUs: ops / 200, Errors: errs}}
	}
	m := MergeRuns(run([]int64{100, 200}, 1000, 1), run([]int64{300, 400, 500}, 2000, 2))
	if len(m) != 1 {
		t.Fatalf("%d rows, want 1", len(m))
	}
	r := m[0]
	if r.Summary.Count != 5 || r.Summary.Max < 0.499 || r.Summary.Avg < 0.299 || r.Summary.Avg > 0.301 {
		t.Errorf("merged latencies: %+v", r.Summary)
	}
	if r.OpsPerSec != 1500 || r.ServerCPUUs != 15 || r.HarnessCPUUs != 7.5 || r.Errors != 3 {
		t.Errorf("merged rates: ops %v cpu %v/%v errors %d", r.OpsPerSec, r.ServerCPUUs, r.HarnessCPUUs, r.Errors)
	}
	// Three runs: each weighs a third.
	m = MergeRuns(run([]int64{100}, 1000, 0), run([]int64{200}, 2000, 0), run([]int64{600}, 6000, 1))
	if len(m) != 1 || m[0].OpsPerSec != 3000 || m[0].ServerCPUUs != 30 || m[0].Summary.Count != 3 || m[0].Errors != 1 {
		t.Errorf("three runs merged: %+v", m)
	}
	if !slices.Equal(m[0].RunOps, []float64{1000, 2000, 6000}) {
		t.Errorf("three runs merged: each run's rate %v, want 1000, 2000, 6000 in order", m[0].RunOps)
	}
	other := run([]int64{1}, 1, 0)
	other[0].Clients = 64
	if got := MergeRuns(run([]int64{1}, 1, 0), other); len(got) != 2 {
		t.Errorf("runs of different points merged: %d rows", len(got))
	}
}
