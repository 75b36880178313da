package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Throughput and DIDA-GSTORE get their line plots (throughput against
// clients; DIDA-GSTORE's figures 3-5) when a variable has two values, each
// under its table, and each holds exactly its own points.
func TestXYPlots(t *testing.T) {
	r := &Report{Topologies: map[string]*Topology{}}
	for _, ms := range []int{10, 30} {
		name := fmt.Sprintf("seed002-rtt%d", ms)
		r.Topologies[name] = &Topology{Name: name, SameRegionRTTms: float64(ms), Servers: []string{"a", "a", "a"}, Clients: []string{"a"}}
		r.Results = append(r.Results, Result{Workload: "seed002-same", Topology: name, Flavor: "X", Clients: 10, TotalSec: float64(ms) / 10,
			Summary: Summary{Count: 250, Avg: 3 * float64(ms)}})
	}
	for _, n := range []int{1, 8} {
		for _, w := range []string{"throughput-write", "seed002-random"} {
			topo := map[string]string{"throughput-write": "3dc", "seed002-random": "seed002-rtt30"}[w]
			r.Results = append(r.Results, Result{Workload: w, Topology: topo, Flavor: "X", Clients: n, OpsPerSec: 10 * float64(n),
				Summary: Summary{Count: 100, Avg: 5}})
		}
	}
	// One client count only: no plot.
	r.Results = append(r.Results, Result{Workload: "throughput-read", Topology: "3dc", Flavor: "X", Clients: 1, OpsPerSec: 10, Summary: Summary{Count: 100, Avg: 1}})
	var files []string
	for _, p := range r.xyPlots() {
		files = append(files, p.file)
	}
	want := []string{"seed002-latency-vs-clients-seed002-rtt30.png", "seed002-throughput-vs-clients-seed002-rtt30.png",
		"throughput-write-vs-clients-3dc.png", "seed002-completion-vs-rtt.png"}
	slices.Sort(files)
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Fatalf("plots %q, want %q", files, want)
	}
	for _, p := range r.xyPlots() {
		var pts [][2]float64
		for _, res := range r.Results {
			if x, y, ok := p.point(res); ok {
				pts = append(pts, [2]float64{x, y})
			}
		}
		var wantPts [][2]float64
		switch p.file {
		case "seed002-completion-vs-rtt.png":
			wantPts = [][2]float64{{10, 1}, {30, 3}}
		case "seed002-latency-vs-clients-seed002-rtt30.png":
			wantPts = [][2]float64{{1, 5}, {8, 5}}
		default:
			wantPts = [][2]float64{{1, 10}, {8, 80}}
		}
		if !slices.Equal(pts, wantPts) {
			t.Errorf("%s: points %v, want %v", p.file, pts, wantPts)
		}
	}
	dir := t.TempDir()
	if err := r.WritePlots(dir); err != nil {
		t.Fatal(err)
	}
	md := r.Markdown("bench")
	for _, f := range want {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not drawn: %v", f, err)
		}
		if !strings.Contains(md, "(bench/"+f+")") {
			t.Errorf("the report does not show %s", f)
		}
	}
	// Under its own table.
	if i, j := strings.Index(md, "topology 3dc"), strings.Index(md, "(bench/throughput-write-vs-clients-3dc.png)"); i < 0 || j < i {
		t.Errorf("the throughput plot is not under its table:\n%s", md)
	}
}
