package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// Servers may name their zones; round trips then depend on them.
func TestTopologyZones(t *testing.T) {
	nine, err := LoadTopology("topologies/3region-9.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(nine.Servers) != 9 || !nine.HasZones() || nine.Servers[4] != "OR" || nine.Zones[4] != "b" {
		t.Fatalf("servers %v zones %v", nine.Servers, nine.Zones)
	}
	if got := nine.ServerRTT(0, 1); got != 750*time.Microsecond {
		t.Errorf("CA/a–CA/b %v, want 0.75ms", got)
	}
	if got := nine.ServerRTT(0, 0); got != 200*time.Microsecond {
		t.Errorf("CA/a–CA/a %v, want 0.2ms (same zone)", got)
	}
	if got := nine.ServerRTT(2, 3); got != 21*time.Millisecond {
		t.Errorf("CA/c–OR/a %v, want 21ms", got)
	}
	// A client sits in its region's first server's zone.
	if got, got2 := nine.ClientServerRTT("OR", 3), nine.ClientServerRTT("OR", 5); got != 200*time.Microsecond || got2 != 750*time.Microsecond {
		t.Errorf("OR client to OR/a %v, to OR/c %v", got, got2)
	}
	if nine.NearestServer("VA") != 6 || !slices.Equal(nine.RegionServers("VA"), []int{6, 7, 8}) {
		t.Errorf("VA: nearest %d, servers %v", nine.NearestServer("VA"), nine.RegionServers("VA"))
	}
	// Without zones nothing changes.
	three, _ := LoadTopology("topologies/3region.yaml")
	if three.HasZones() || three.ServerRTT(0, 1) != 21*time.Millisecond || three.ClientServerRTT("CA", 0) != 500*time.Microsecond {
		t.Errorf("3region: zones %v, CA–OR %v", three.Zones, three.ServerRTT(0, 1))
	}
	for _, bad := range []string{
		"servers: [CA/a, CA/b, OR]\nzone_rtt_ms: 1",     // some zones named
		"servers: [CA/a, CA/a, OR/a]\nzone_rtt_ms: 1",   // a zone twice
		"servers: [CA/a, CA/b, OR/a]",                   // no zone round trip
		"servers: [CA, OR, VA]\nzone_rtt_ms: 1",         // zone round trip, no zones
		"servers: [CA/a/x, CA/b, OR/a]\nzone_rtt_ms: 1", // not region/zone
		"servers: [CA/a, CA/b]\nzone_rtt_ms: 1",         // too few
	} {
		path := filepath.Join(t.TempDir(), "t.yaml")
		os.WriteFile(path, []byte("name: x\nrtt_ms: {CA: {OR: 21}}\nclients: [CA]\n"+bad+"\n"), 0o644)
		if _, err := LoadTopology(path); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// A region's keyspace floor: client↔server, two zones, one fsync.
func TestKeyspaceFloor(t *testing.T) {
	links := []LinkCheck{
		{From: "CA", To: "CA", P50: 300 * time.Microsecond},
		{From: "CA", To: "OR", P50: 21 * time.Millisecond},
		{From: "OR", To: "OR", P50: 250 * time.Microsecond},
		{From: "CA/a", To: "CA/b", P50: 800 * time.Microsecond},
	}
	got, ok := keyspaceFloor(links, "CA", 400*time.Microsecond)
	if !ok || got != 1500*time.Microsecond {
		t.Errorf("CA floor %v %v, want 1.5ms", got, ok)
	}
	if _, ok := keyspaceFloor(links, "OR", time.Millisecond); ok {
		t.Error("OR has no zone pair measured: no floor")
	}
	if _, ok := keyspaceFloor(links, "VA", time.Millisecond); ok {
		t.Error("VA measured nothing: no floor")
	}
	floor, nearest, near, ok := keyspaceRegionFloor(append(links, LinkCheck{From: "VA", To: "CA", P50: 62 * time.Millisecond}), "CA", 400*time.Microsecond)
	if !ok || nearest != "OR" || near != 21*time.Millisecond || floor != 21700*time.Microsecond {
		t.Errorf("CA region-survival floor %v via %s (%v) %v, want 21.7ms via OR", floor, nearest, near, ok)
	}
	if _, _, _, ok := keyspaceRegionFloor(links, "VA", time.Millisecond); ok {
		t.Error("VA measured nothing: no region-survival floor")
	}
	if keyspacePrefix("CA") != "/ca" {
		t.Errorf("prefix %q", keyspacePrefix("CA"))
	}
}

// Meridian's fsync histogram: parsed from /metrics text, differenced,
// and its p50 interpolated within a bucket.
func TestFsyncBuckets(t *testing.T) {
	text := func(counts ...int) string {
		var b strings.Builder
		b.WriteString("# TYPE meridian_raft_fsync_duration_seconds histogram\n")
		for i, le := range []string{"0.001", "0.002", "0.004", "+Inf"} {
			fmt.Fprintf(&b, "meridian_raft_fsync_duration_seconds_bucket{le=%q} %d\n", le, counts[i])
		}
		b.WriteString("meridian_raft_fsync_duration_seconds_sum 1.5\nmeridian_apply_duration_seconds_bucket{le=\"0.001\"} 99\n")
		return b.String()
	}
	before, err := parseFsyncBuckets(strings.NewReader(text(10, 10, 10, 10)))
	if err != nil || len(before) != 4 || before[0.001] != 10 {
		t.Fatalf("%v %v", before, err)
	}
	after, _ := parseFsyncBuckets(strings.NewReader(text(10, 30, 50, 50)))
	d := after.minus(before) // 0 below 1 ms, 20 in 1-2 ms, 20 in 2-4 ms
	if got, ok := d.quantile(0.5); !ok || got != 2*time.Millisecond {
		t.Errorf("p50 %v %v, want 2ms", got, ok)
	}
	if got, _ := d.quantile(0.25); got != 1500*time.Microsecond {
		t.Errorf("p25 %v, want 1.5ms", got)
	}
	over, _ := parseFsyncBuckets(strings.NewReader(text(0, 0, 0, 5)))
	if got, ok := over.quantile(0.5); !ok || got != 4*time.Millisecond {
		t.Errorf("all above the last bound: %v %v, want 4ms", got, ok)
	}
	if _, ok := (fsyncBuckets{}).quantile(0.5); ok {
		t.Error("no observations: no quantile")
	}
	two := fsyncBuckets{}
	two.add(before)
	two.add(before)
	if two[0.002] != 20 {
		t.Errorf("sum of two servers %v", two)
	}
}

// A three-member cluster on a zoned topology: the first server of each region.
func TestFirstOfEachRegion(t *testing.T) {
	nine, _ := LoadTopology("topologies/3region-9.yaml")
	three := firstOfEachRegion(nine)
	if !slices.Equal(three.Servers, []string{"CA", "OR", "VA"}) || !slices.Equal(three.Zones, []string{"a", "a", "a"}) || len(nine.Servers) != 9 {
		t.Errorf("servers %v zones %v (original %d)", three.Servers, three.Zones, len(nine.Servers))
	}
	if three.ServerRTT(0, 1) != 21*time.Millisecond || three.NearestServer("VA") != 2 {
		t.Errorf("CA–OR %v, nearest to VA %d", three.ServerRTT(0, 1), three.NearestServer("VA"))
	}
}

// Meridian's leader is moved to ZooKeeper's election's choice on a
// one-region topology by default, left to placement elsewhere, and the
// flag's other values pin it or leave it.
func TestMeridianStartLeader(t *testing.T) {
	loop, err := LoadTopology("topologies/loopback.yaml")
	if err != nil {
		t.Fatal(err)
	}
	three, err := LoadTopology("topologies/3dc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		topo *Topology
		flag string
		want int
	}{{loop, "", 2}, {loop, "election", -1}, {loop, "1", 0}, {three, "", -1}, {three, "2", 1}} {
		got, err := c.topo.MeridianStartLeader(c.flag)
		if err != nil || got != c.want {
			t.Errorf("%s %q: %d, %v; want %d", c.topo.Name, c.flag, got, err, c.want)
		}
	}
	for _, bad := range []string{"0", "4", "last", "-1"} {
		if _, err := loop.MeridianStartLeader(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
