package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestKeyspaceIdleNamesAndHomes(t *testing.T) {
	if got := keyspaceIdleName(0); got != "/ks001" {
		t.Errorf("first keyspace %q, want /ks001", got)
	}
	if got := keyspaceIdleName(99); got != "/ks100" {
		t.Errorf("100th keyspace %q, want /ks100", got)
	}
	topo := &Topology{Servers: []string{"CA", "CA", "OR", "OR", "VA"}}
	regions := serverRegions(topo)
	if !slices.Equal(regions, []string{"CA", "OR", "VA"}) {
		t.Fatalf("server regions %v", regions)
	}
	homes := keyspaceIdleHomes(7, regions)
	if want := []string{"CA", "OR", "VA", "CA", "OR", "VA", "CA"}; !slices.Equal(homes, want) {
		t.Errorf("homes %v, want %v", homes, want)
	}
}

func TestCPUMsPerSec(t *testing.T) {
	got := cpuMsPerSec([]time.Duration{time.Second, 0}, []time.Duration{3 * time.Second, 500 * time.Millisecond}, 10)
	if want := []float64{200, 50}; !slices.Equal(got, want) {
		t.Errorf("cpuMsPerSec %v, want %v", got, want)
	}
	if got := cpuMsPerSec([]time.Duration{0}, []time.Duration{time.Second}, 0); got[0] != 0 {
		t.Errorf("a zero-length window gives %v", got)
	}
}

func TestKeyspaceLeaders(t *testing.T) {
	m := `# HELP meridian_keyspace_leader_id The leader...
# TYPE meridian_keyspace_leader_id gauge
meridian_keyspace_leader_id{keyspace="/ks001"} 2
meridian_keyspace_leader_id{keyspace="/ks002"} 0
meridian_keyspace_leader_id{keyspace="/ks003"} 8
meridian_keyspaces 3
`
	l := parseKeyspaceLeaders(m)
	if len(l) != 3 || l["/ks001"] != 2 || l["/ks002"] != 0 || l["/ks003"] != 8 {
		t.Fatalf("leaders %v", l)
	}
	if k := leadersKnown(l); k != 2 {
		t.Errorf("known %d, want 2", k)
	}
	if got := ledPerServer(l, 9); !slices.Equal(got, []int{0, 1, 0, 0, 0, 0, 0, 1, 0}) {
		t.Errorf("led %v", got)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPerKeyspace(t *testing.T) {
	before := IdleWindow{CPUMsPerS: []float64{10, 20}, RSSMiB: []float64{30, 40}, HeapMiB: []float64{5, 6}}
	after := IdleWindow{CPUMsPerS: []float64{14, 30}, RSSMiB: []float64{32, 41}, HeapMiB: []float64{6, 6}}
	d := perKeyspace(before, after, 4)
	if !slices.Equal(d.CPUMsPerS, []float64{1, 2.5}) || !near(d.TotalCPUMsPerS, 3.5) {
		t.Errorf("CPU %v total %v, want [1 2.5] 3.5", d.CPUMsPerS, d.TotalCPUMsPerS)
	}
	// 2 MiB over 4 keyspaces: 512 KiB; 1 MiB: 256 KiB.
	if !slices.Equal(d.RSSKiB, []float64{512, 256}) || !near(d.TotalRSSKiB, 768) {
		t.Errorf("RSS %v total %v, want [512 256] 768", d.RSSKiB, d.TotalRSSKiB)
	}
	if !slices.Equal(d.HeapKiB, []float64{256, 0}) {
		t.Errorf("heap %v", d.HeapKiB)
	}
	if d := perKeyspace(before, after, 0); d.CPUMsPerS != nil || d.TotalRSSKiB != 0 {
		t.Errorf("no keyspaces gives %+v", d)
	}
}

func TestKeyspacesIdleMarkdown(t *testing.T) {
	r := KeyspacesIdleResult{Topology: "3region-9", Servers: []string{"CA/a", "OR/a"}, Keyspaces: 2, Created: 2,
		Homes: []string{"CA", "OR"}, Led: []int{2, 0}, CreateSec: 0.5, LeadersSec: 1.5, SettleSec: 20, LoadAvg1: 1.25,
		Before: IdleWindow{Label: "no keyspaces", Sec: 60, CPUMsPerS: []float64{10, 12}, RSSMiB: []float64{30, 31}, HeapMiB: []float64{5, 5}, LoadAvg1: 1.5},
		After:  IdleWindow{Label: "2 idle keyspaces", Sec: 60, CPUMsPerS: []float64{11, 14}, RSSMiB: []float64{31, 32}, HeapMiB: []float64{6, 6}, LoadAvg1: 1.75},
	}
	md := KeyspacesIdleMarkdown(r)
	for _, want := range []string{
		"## Idle keyspaces on 2 servers, topology 3region-9",
		"created one after another by one admin client through server 1's region: 0.5 s (250 ms each)",
		"Load average (1 min) 1.25 at the start, 1.50, 1.75 at the end of each window",
		// CPU 10 → 11 over 2 keyspaces: 0.5 ms/s each; RSS 1 MiB: 512 KiB.
		"| 1 CA/a | 2 | 10.0 | 11.0 | 0.500 | 30.0 | 31.0 | 512.0 | 512.0 |",
		"| 2 OR/a | 0 | 12.0 | 14.0 | 1.000 | 31.0 | 32.0 | 512.0 | 512.0 |",
		"| **total** | 2 | 22.0 | 25.0 | 1.500 | 61.0 | 63.0 | 1024.0 | 1024.0 |",
		"| mean per server |  | 11.0 | 12.5 | 0.750 | 30.5 | 31.5 | 512.0 | 512.0 |",
		"a quiet keyspace costs each server 0.750 ms of CPU a second (1.50 ms/s across the 2 servers; 2 of them: 0.3% of one core for the cluster) and 512 KiB of RSS",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "1 write/s") {
		t.Errorf("report without a load window mentions one:\n%s", md)
	}
	// Every table row has as many cells as the header.
	var cells int
	for _, l := range strings.Split(md, "\n") {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		if n := strings.Count(l, "|"); cells == 0 {
			cells = n
		} else if n != cells {
			t.Errorf("row %q has %d bars, the header %d", l, n, cells)
		}
	}

	r.Load = &IdleWindow{Label: "2 keyspaces, 1 write/s each", Sec: 60, CPUMsPerS: []float64{14, 16}, RSSMiB: []float64{31, 32}, LoadAvg1: 2, Writes: 120}
	md = KeyspacesIdleMarkdown(r)
	for _, want := range []string{
		"| server | keyspaces led | CPU ms/s, no keyspaces | CPU ms/s, 2 idle keyspaces | CPU ms/s, 2 keyspaces, 1 write/s each | idle Δ CPU ms/s per keyspace | loaded Δ CPU ms/s per keyspace |",
		"| 1 CA/a | 2 | 10.0 | 11.0 | 14.0 | 0.500 | 2.000 |",
		"1.50, 1.75, 2.00 at the end of each window",
		"(120 writes in the window, 0 failed), a keyspace costs each server 2.000 ms/s (4.00 across the servers)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report with load lacks %q:\n%s", want, md)
		}
	}
}
