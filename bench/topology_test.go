package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every shipped topology loads, and its round trips are the published ones.
func TestShippedTopologies(t *testing.T) {
	files, _ := filepath.Glob("topologies/*.yaml")
	if len(files) < 5 {
		t.Fatalf("topologies: %v", files)
	}
	for _, f := range files {
		if _, err := LoadTopology(f); err != nil {
			t.Error(err)
		}
	}
	three, err := LoadTopology("topologies/3dc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := three.RTT("VA", "CA"); got != 62*time.Millisecond {
		t.Errorf("VA–CA %v, want 62ms (either order)", got)
	}
	if three.NearestServer("CA") != 0 || three.UniformServers() {
		t.Errorf("3dc: nearest to CA %d, uniform %v", three.NearestServer("CA"), three.UniformServers())
	}
	two, _ := LoadTopology("topologies/2dc.yaml")
	// The west client spreads over the two west servers, never east.
	for i := 0; i < 4; i++ {
		if _, s := serverFor(two, i); s == 2 {
			t.Errorf("2dc client %d on the east server", i)
		}
	}
}

func TestTopologyErrors(t *testing.T) {
	for name, body := range map[string]string{
		"two servers":  "name: x\nservers: [a, a]\nclients: [a]\n",
		"missing rtt":  "name: x\nservers: [a, b, a]\nclients: [a]\n",
		"unknown key":  "name: x\nserver: [a]\n",
		"no clients":   "name: x\nservers: [a, a, a]\n",
		"jitter range": "name: x\nservers: [a, a, a]\nclients: [a]\njitter_pct: 120\n",
	} {
		p := filepath.Join(t.TempDir(), "t.yaml")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := LoadTopology(p); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

// The DIDA-GSTORE topologies are uniform at their round trip; the Tail Latency in ZooKeeper ones are not.
func TestSeed002Topologies(t *testing.T) {
	for _, r := range []int{0, 10, 30, 60, 100} {
		top, err := LoadTopology(fmt.Sprintf("topologies/seed002-rtt%d.yaml", r))
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := top.UniformRTT(); !ok || d != time.Duration(r)*time.Millisecond {
			t.Errorf("seed002-rtt%d: uniform %v at %v", r, ok, d)
		}
	}
	three, _ := LoadTopology("topologies/3dc.yaml")
	if _, ok := three.UniformRTT(); ok {
		t.Error("3dc reported uniform")
	}
}

// The DIDA-GSTORE summary puts each system's completion time under its round trip.
func TestSeed002Summary(t *testing.T) {
	r := &Report{Topologies: map[string]*Topology{}}
	for _, ms := range []int{10, 30} {
		name := fmt.Sprintf("u%d", ms)
		r.Topologies[name] = &Topology{Name: name, SameRegionRTTms: float64(ms), Servers: []string{"a", "a", "a"}, Clients: []string{"a"}}
		r.Results = append(r.Results, Result{Workload: "seed002-same", Topology: name, Flavor: "X", TotalSec: float64(ms) / 10})
	}
	var b strings.Builder
	r.seed002Summary(&b)
	if !strings.Contains(b.String(), "| X | 1.00 | 3.00 |") || !strings.Contains(b.String(), "10ms | 30ms") {
		t.Fatalf("summary:\n%s", b.String())
	}
}
