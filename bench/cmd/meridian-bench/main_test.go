package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meridian-coord/meridian/bench"
)

// ZooKeeper's far-placed leader is for followsun only: on a topology where
// the load can move, the other workloads get a cluster whose leader the
// election chose; elsewhere, and for every other system, one cluster runs
// everything.
func TestSystemRuns(t *testing.T) {
	load := func(name string) *bench.Topology {
		topo, err := bench.LoadTopology("../../topologies/" + name + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		return topo
	}
	all := []string{"locks", "seed004", "followsun"}
	runs := systemRuns([]string{"meridian", "zookeeper"}, all, load("5region"), "")
	if len(runs) != 3 {
		t.Fatalf("5region: %+v, want meridian once and zookeeper twice", runs)
	}
	if r := runs[0]; r.sys != "meridian" || !slices.Equal(r.workloads, all) || r.zk.LeaderRegion != "" {
		t.Errorf("meridian: %+v", r)
	}
	if r := runs[1]; r.sys != "zookeeper" || !slices.Equal(r.workloads, []string{"locks", "seed004"}) || r.zk.LeaderRegion != "" {
		t.Errorf("zookeeper, election's leader: %+v", r)
	}
	if r := runs[2]; r.sys != "zookeeper" || !slices.Equal(r.workloads, []string{"followsun"}) || r.zk.LeaderRegion != bench.FollowSunZKLeader(load("5region")) || r.zk.LeaderRegion == "" {
		t.Errorf("zookeeper for followsun: %+v", r)
	}
	if runs := systemRuns([]string{"zookeeper"}, []string{"followsun"}, load("5region"), ""); len(runs) != 1 || runs[0].zk.LeaderRegion == "" {
		t.Errorf("followsun alone: %+v", runs)
	}
	if runs := systemRuns([]string{"zookeeper", "etcd"}, all, load("3dc"), ""); len(runs) != 2 || runs[0].zk.LeaderRegion != "" {
		t.Errorf("3dc, nowhere to move: %+v", runs)
	}
	// --zk-leader places ZooKeeper's leader for every workload but
	// followsun, which keeps its own placement; other systems ignore it.
	runs = systemRuns([]string{"etcd", "zookeeper"}, all, load("5region"), "OR")
	if len(runs) != 3 || runs[0].zk.LeaderRegion != "" || runs[1].zk.LeaderRegion != "OR" || !slices.Equal(runs[1].workloads, []string{"locks", "seed004"}) ||
		runs[2].zk.LeaderRegion != bench.FollowSunZKLeader(load("5region")) {
		t.Errorf("--zk-leader OR: %+v", runs)
	}
}

// A run report is a new file named by the run's first day and what it
// covers, its plots in a directory of the same name and its raw results
// compressed under --results; a second report of the same day and section
// gets a file of its own instead of replacing the first.
func TestWriteRuns(t *testing.T) {
	runs, results := filepath.Join(t.TempDir(), "runs"), filepath.Join(t.TempDir(), "results")
	rep := func() *bench.Report {
		return &bench.Report{Links: map[string][]bench.LinkCheck{}, Notes: map[string]string{}, Parts: []bench.Part{
			{Started: "2026-11-27 01:00 UTC", Duration: "1m0s", Mode: "full", Commit: "abc1234", Machine: "m", Topologies: []string{"seed002-rtt30"}},
			{Started: "2026-11-26 23:50 UTC", Duration: "1m0s", Mode: "full", Commit: "abc1234", Machine: "m", Topologies: []string{"seed002-rtt0"}},
		}}
	}
	if err := write(rep(), runs, results, "", "", "", "seed002"); err != nil {
		t.Fatal(err)
	}
	if err := write(rep(), runs, results, "", "", "", "seed002"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		filepath.Join(runs, "2026-11-26-dida-gstore.md"),
		filepath.Join(runs, "2026-11-26-dida-gstore"),
		filepath.Join(runs, "2026-11-26-dida-gstore-2.md"),
		filepath.Join(results, "2026-11-26-dida-gstore.json.gz"),
		filepath.Join(results, "2026-11-26-dida-gstore-2.json.gz"),
	} {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(runs, "2026-11-26-dida-gstore.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "# Benchmark run 2026-11-26-dida-gstore (generated)\n") || !strings.Contains(string(b), "commit abc1234") {
		t.Errorf("report:\n%s", b)
	}
	if _, err := bench.LoadReport(filepath.Join(results, "2026-11-26-dida-gstore.json.gz")); err != nil {
		t.Error(err)
	}
	if err := write(rep(), runs, "", "/tmp/out", "", "", ""); err == nil {
		t.Error("--runs with --out: no error")
	}
}
