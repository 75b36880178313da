package bench

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The lock target table: p99 ratios peer/Meridian for own locks,
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
	wantAll(t, out,
		"| 1, own | p99 ms | 4.00 | 30.0 | 10.0 | ZooKeeper's is 7.5× (≥5×) | etcd's is 2.5× (≥3×) |",
		"| 5, one | hand-offs/s | 40.0 | 8.0 | not run | Meridian's is 5.0× (≥3×) | Meridian's is — |")
	if strings.Contains(out, "| 3, one |") {
		t.Errorf("a row without any peer:\n%s", out)
	}
	b.Reset()
	lockTargets(&b, group{workload: "locks", topology: "x", results: []Result{res("Meridian (native)", 1, false, 4, 0)}})
	if b.Len() != 0 {
		t.Errorf("a table without peers:\n%s", b.String())
	}
}

// Parts of one report run separately (one topology each, as make
// bench-report does) merge into the report one run would have written:
// every part's results with their histograms read back from JSON, every
// part's link checks, and each part's time and commit listed.
func TestMergeParts(t *testing.T) {
	dir := t.TempDir()
	part := func(topo, started, dur, commit string, lat int64) string {
		h := newHist()
		for i := int64(1); i <= 100; i++ {
			if err := h.RecordValue(lat * i); err != nil {
				t.Fatal(err)
			}
		}
		r := &Report{Machine: "2 vCPU test", Started: started, Duration: dur, Mode: "full", Commit: commit,
			Links:   map[string][]LinkCheck{topo: {{From: "A", To: "B", Samples: 50}}},
			Notes:   map[string]string{"meridian": "fsync on"},
			Results: []Result{{Workload: "seed004-write", Topology: topo, Flavor: "Meridian (native)", Clients: 1, Hist: h}},
		}
		path := filepath.Join(dir, topo+".json")
		if err := r.WriteJSONFile(path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var reps []*Report
	for _, p := range []string{part("1dc", "2026-11-25 10:00 UTC", "1m0s", "abc1234", 10), part("3dc", "2026-11-25 11:00 UTC", "1h0m0s", "def5678-dirty", 1000)} {
		r, err := LoadReport(p)
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, r)
	}
	m := Merge(reps...)
	if len(m.Results) != 2 || len(m.Links) != 2 || len(m.Parts) != 2 || m.Duration != "1h1m0s" {
		t.Fatalf("merged: %d results, %d link sets, %d parts, duration %s; want 2, 2, 2, 1h1m0s", len(m.Results), len(m.Links), len(m.Parts), m.Duration)
	}
	if got := m.Results[1].Hist.ValueAtQuantile(50); got < 49000 || got > 51000 {
		t.Errorf("3dc p50 read back as %d µs, want ~50000", got)
	}
	md := m.Markdown("")
	for _, want := range []string{
		"Run in 2 parts",
		"- 1dc: 2026-11-25 10:00 UTC, full mode, 1m0s, commit abc1234, on 2 vCPU test.",
		"- 3dc: 2026-11-25 11:00 UTC, full mode, 1h0m0s, commit def5678-dirty, on 2 vCPU test.",
		"topology 1dc", "topology 3dc",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("merged report lacks %q:\n%s", want, md)
		}
	}
	// A merged report merges again (a section redrawn from its results
	// JSON) without losing its parts.
	if again := Merge(m); len(again.Parts) != 2 || len(again.Results) != 2 {
		t.Errorf("merging a merged report: %d parts, %d results", len(again.Parts), len(again.Results))
	}
}

// The mixed task's table on a setting Tail Latency in ZooKeeper published is followed by the
// seed's figures, every row as a ratio to its own run's ZooKeeper; other
// topologies get none.
func TestSeed004Published(t *testing.T) {
	res := func(flavor string, avg float64) Result {
		return Result{Workload: "seed004-mixed-op", Flavor: flavor, Summary: Summary{Count: 1000, Avg: avg, P99: 2 * avg, P999: 3 * avg}}
	}
	g := group{workload: "seed004-mixed-op", topology: "3dc", results: []Result{
		res("Meridian (native)", 13), res("ZooKeeper 3.8", 65), res("etcd 3.4", 34), {Workload: "seed004-mixed-op", Flavor: "Redis"},
	}}
	var b strings.Builder
	seed004Published(&b, g)
	out := b.String()
	wantAll(t, out,
		"3 DCs: N. California, Oregon, Virginia, client in N. California",
		"| ZooKeeper 3.4 | Tail Latency in ZooKeeper (published) | 76.9 | 93.5 | 94.7 | 1.00× |",
		"| Safari (no consensus) | Tail Latency in ZooKeeper (published) | 46.0 | 46.4 | 47.7 | 0.60× |",
		"| Meridian (native) | this run | 13.0 | 26.0 | 39.0 | 0.20× |",
		"| ZooKeeper 3.8 | this run | 65.0 | 130 | 195 | 1.00× |")
	if strings.Contains(out, "Redis") {
		t.Errorf("a series without operations is listed:\n%s", out)
	}
	b.Reset()
	seed004Published(&b, group{workload: "seed004-mixed-op", topology: "2dc", results: g.results})
	wantAll(t, b.String(), "| Safari (no consensus) | Tail Latency in ZooKeeper (published) | 0.73 | 1.05 | 1.44 | 0.005× |") // a small ratio keeps its digits
	b.Reset()
	seed004Published(&b, group{workload: "seed004-mixed-op", topology: "1dc", results: g.results})
	if b.Len() != 0 {
		t.Errorf("Tail Latency in ZooKeeper published nothing for 1dc, got:\n%s", b.String())
	}
}

// wantAll fails t for every line of want that out does not contain.
func wantAll(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q in:\n%s", w, out)
		}
	}
}

// A system's note that differs between parts (its settings follow the
// topology) is kept for each topology, not overwritten by the last part.
func TestMergeNotes(t *testing.T) {
	part := func(topo, etcd string) *Report {
		return &Report{Started: "x", Duration: "1m0s", Links: map[string][]LinkCheck{topo: nil},
			Notes: map[string]string{"meridian": "fsync on", "etcd": etcd}}
	}
	m := Merge(part("1dc", "heartbeat 100ms"), part("3dc", "heartbeat 300ms"), part("2dc", "heartbeat 100ms"))
	if got, want := m.Notes["etcd"], "on 1dc, 2dc: heartbeat 100ms; on 3dc: heartbeat 300ms"; got != want {
		t.Errorf("etcd's note %q, want %q", got, want)
	}
	if got := m.Notes["meridian"]; got != "fsync on" {
		t.Errorf("meridian's note %q, want it once", got)
	}
	if again := Merge(m); again.Notes["etcd"] != m.Notes["etcd"] {
		t.Errorf("merged again: %q", again.Notes["etcd"])
	}
}

// A rerun of one system replaces that system's results and only those: the
// other systems' results and the system's results of workloads not rerun
// stay, its note says which settings each came from, and the rerun is
// listed as a part of its own.
func TestReplace(t *testing.T) {
	res := func(workload, flavor string, clients int, avg float64) Result {
		return Result{Workload: workload, Topology: "5region", Flavor: flavor, Clients: clients, Summary: Summary{Count: 10, Avg: avg}}
	}
	base := &Report{Started: "2026-11-25 15:44 UTC", Duration: "1h34m0s", Mode: "full", Commit: "cda44ba", Machine: "m",
		Links: map[string][]LinkCheck{"5region": nil},
		Notes: map[string]string{"meridian": "fsync on", "zookeeper": "forceSync; leader placed in IR"},
		Results: []Result{
			res("locks", "Meridian (native)", 1, 10),
			res("locks", "ZooKeeper 3.8", 1, 300),
			res("locks", "ZooKeeper 3.8", 3, 900),
			res("followsun", "ZooKeeper 3.8, phase 1, load in OR: lock acquire", 1, 400),
		}}
	over := &Report{Started: "2026-11-25 19:03 UTC", Duration: "25m0s", Mode: "full", Commit: "060871a", Machine: "m",
		Links: map[string][]LinkCheck{"5region": nil},
		Notes: map[string]string{"zookeeper": "forceSync"},
		Results: []Result{
			res("locks", "ZooKeeper 3.8", 1, 200),
			res("locks", "ZooKeeper 3.8", 3, 600),
		}}
	path := filepath.Join(t.TempDir(), "replaced.json")
	if err := Replace(base, over).WriteJSONFile(path); err != nil {
		t.Fatal(err)
	}
	m, err := LoadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, r := range m.Results {
		got[fmt.Sprintf("%s/%s/%d", r.Workload, r.Flavor, r.Clients)] = r.Summary.Avg
	}
	want := map[string]float64{
		"locks/Meridian (native)/1": 10,
		"locks/ZooKeeper 3.8/1":     200,
		"locks/ZooKeeper 3.8/3":     600,
		"followsun/ZooKeeper 3.8, phase 1, load in OR: lock acquire/1": 400,
	}
	if len(m.Results) != len(want) || !maps.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
	if got, want := m.Notes["zookeeper"], "forceSync; followsun from the run of 2026-11-25 15:44 UTC: forceSync; leader placed in IR"; got != want {
		t.Errorf("zookeeper's note %q, want %q", got, want)
	}
	if m.Notes["meridian"] != "fsync on" {
		t.Errorf("meridian's note %q, want base's", m.Notes["meridian"])
	}
	if len(m.Parts) != 2 || m.Parts[1].Rerun != "zookeeper: locks" || m.Duration != "1h59m0s" {
		t.Fatalf("parts %+v, duration %s; want base and the rerun of zookeeper: locks, 1h59m0s", m.Parts, m.Duration)
	}
	if md := m.Markdown(""); !strings.Contains(md, "- 5region (rerun of zookeeper: locks): 2026-11-25 19:03 UTC, full mode, 25m0s, commit 060871a, on m.") {
		t.Errorf("report does not list the rerun:\n%s", md)
	}
	// Merged with other topologies' parts, the rerun stays listed.
	if again := Merge(m, &Report{Started: "x", Duration: "1m0s", Links: map[string][]LinkCheck{"1dc": nil}}); len(again.Parts) != 3 || again.Parts[1].Rerun == "" {
		t.Errorf("merged again: parts %+v", again.Parts)
	}
}

// A throughput table shows CPU per operation where the run measured it,
// and keeps its old columns where it did not.
func TestThroughputCPUColumns(t *testing.T) {
	mk := func(cpu float64) Result {
		return Result{Workload: "throughput-read", Topology: "1dc", Flavor: "ZooKeeper 3.8", Clients: 256, OpsPerSec: 5000,
			Summary: Summary{Count: 50000, Avg: 50}, ServerCPUUs: cpu, HarnessCPUUs: cpu * 2}
	}
	md := (&Report{Results: []Result{mk(0)}}).Markdown("")
	if strings.Contains(md, "CPU µs/op") {
		t.Errorf("CPU columns without a measurement:\n%s", md)
	}
	md = (&Report{Results: []Result{mk(123.4), mk(0)}}).Markdown("")
	for _, want := range []string{"| leader | server CPU µs/op | harness CPU µs/op |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
		"| 123 | 247 |\n", "| — | — |\n"} {
		if !strings.Contains(md, want) {
			t.Errorf("want %q in:\n%s", want, md)
		}
	}
}

// Raw results kept in bench/results/ are gzip-compressed: a .gz path is
// written compressed and read back the same as plain JSON.
func TestJSONGzipRoundTrip(t *testing.T) {
	r := &Report{Started: "2026-11-26 06:07 UTC", Duration: "1m0s", Mode: "quick",
		Results: []Result{{Workload: "locks", Topology: "loopback", Flavor: "Meridian (native)", Clients: 1, Hist: newHist()}}}
	if err := r.Results[0].Hist.RecordValue(1500); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "run.json.gz")
	if err := r.WriteJSONFile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("%s is not gzip-compressed", path)
	}
	got, err := LoadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Started != r.Started || len(got.Results) != 1 || got.Results[0].Hist.TotalCount() != 1 {
		t.Errorf("read back %+v", got)
	}
}

// The keyspaces floors: each region's parts and each variant's p50 ratio,
// for writes and lock acquires only.
func TestKeyspaceFloors(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	r := &Report{Fsync: ms(0.5), Links: map[string][]LinkCheck{"3region-9": {
		{From: "CA", To: "CA", P50: ms(0.25)}, {From: "CA/a", To: "CA/b", P50: ms(0.75)},
		{From: "CA", To: "OR", P50: ms(21)}, {From: "CA", To: "VA", P50: ms(62)}}}}
	res := func(variant, series string, p50 float64) Result {
		return Result{Workload: "keyspaces", Flavor: variant + ", client in CA, " + series, Region: "CA", Series: series,
			FloorMs: 1.5, Summary: Summary{Count: 10, P50: p50}}
	}
	g := group{workload: "keyspaces", topology: "3region-9", results: []Result{
		res("Meridian, keyspaces", "write", 1.8), res("Meridian, keyspaces", "lock acquire", 3),
		res("Meridian, keyspaces", "read /or/w-OR", 0.5), res("Meridian, one group", "write", 30),
		res("Meridian, keyspaces, region survival", "write", 23.1),
	}}
	var b strings.Builder
	r.keyspaceFloors(&b, g)
	wantAll(t, b.String(), "CA floor 1.50 ms = client↔server 0.25 + two zones 0.75 + fsync 0.50",
		"Meridian, keyspaces write 1.20×;", "Meridian, keyspaces lock acquire 2.00×;", "Meridian, one group write 20.00×;",
		"CA region-survival floor 21.8 ms = client↔server 0.25 + nearest other region (OR) 21.0 + fsync 0.50",
		"Meridian, keyspaces, region survival write 1.06×; target: within 1.1× at p50.")
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "- CA floor") && strings.Contains(line, "region survival") {
			t.Errorf("the region-survival write against the zone floor:\n%s", line)
		}
	}
	if strings.Contains(b.String(), "read") {
		t.Errorf("a read against the floor:\n%s", b.String())
	}
}

// A throughput point both of Meridian's flavors ran several times gets the
// ratio of their paired runs with its interval: tight when the runs agree
// pair by pair even though the rate drifts over the run, wide when the
// pairs disagree; nothing for a point run once.
func TestFlavorRatios(t *testing.T) {
	row := func(flavor string, clients int, runs ...float64) Result {
		return Result{Workload: "throughput-write", Topology: "loopback", Flavor: flavor, Clients: clients,
			OpsPerSec: runs[0], RunOps: runs, Summary: Summary{Count: 1000, Avg: 5}}
	}
	native, port := Flavors[0].Name, Flavors[1].Name
	md := (&Report{Results: []Result{
		// Each pair 10% apart, the runs from 5,000 to 9,000 a second.
		row(native, 32, 5500, 7700, 9900, 6600), row(port, 32, 5000, 7000, 9000, 6000),
		// Pairs that disagree: 1.2x, 0.8x, 1.2x, 0.8x.
		row(native, 64, 1200, 800, 1200, 800), row(port, 64, 1000, 1000, 1000, 1000),
		row(native, 256, 1000), row(port, 256, 900),
	}}).Markdown("")
	want := native + " against " + port + ", run by run (the geometric mean of the paired runs' ratios of ops/s, with its 95% interval): " +
		"32 clients 1.10× (1.10–1.10, 4 pairs); 64 clients 0.98× (0.68–1.42, 4 pairs).\n" // 256: run once
	if !strings.Contains(md, want) {
		t.Errorf("want %q in:\n%s", want, md)
	}
}
