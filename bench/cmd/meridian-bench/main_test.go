package main

import (
	"slices"
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
