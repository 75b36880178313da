package bench

import (
	"os"
	"path/filepath"
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
