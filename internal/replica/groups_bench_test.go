package replica

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/meridian-coord/meridian/internal/testutil"
)

// BenchmarkIdleGroups measures what idle groups cost: members (9 by
// default, MERIDIAN_BENCH_MEMBERS) in this process, each running the root
// group and groups (100 by default, MERIDIAN_BENCH_GROUPS) with three
// voters and the other members learning, at the default 100 ms tick. It
// reports the CPU the whole process spends per second per group (all
// members' replicas of it together) and the heap per group per member,
// both net of the same cluster with no groups, measured over 10 s of
// idleness after every group elected a leader. One iteration is the
// whole measurement: run it with -benchtime 1x.
func BenchmarkIdleGroups(b *testing.B) {
	members, groups := envInt("MERIDIAN_BENCH_MEMBERS", 9), envInt("MERIDIAN_BENCH_GROUPS", 100)
	for i := 0; i < b.N; i++ {
		c := newBenchCluster(b, members)
		baseCPU, baseHeap := idle(10 * time.Second)
		gs := make([]*group, groups)
		for g := range gs {
			voters := []uint64{uint64(g%members + 1), uint64((g+1)%members + 1), uint64((g+2)%members + 1)}
			var learners []uint64
			for id := uint64(1); id <= uint64(members); id++ {
				if id != voters[0] && id != voters[1] && id != voters[2] {
					learners = append(learners, id)
				}
			}
			gs[g] = c.newGroup(GroupConfig{Group: uint64(g + 1), Voters: voters, Learners: learners})
		}
		for _, g := range gs {
			g.leader()
		}
		cpu, heap := idle(10 * time.Second)
		perGroupCPU := (cpu - baseCPU) / float64(groups)
		perGroupHeap := (heap - baseHeap) / float64(groups*members)
		b.ReportMetric(perGroupCPU*1000, "cpu-ms/s/group")
		b.ReportMetric(perGroupHeap/1024, "heap-KiB/group/member")
		b.ReportMetric(baseCPU*1000, "cpu-ms/s/root-only-cluster")
		fmt.Fprintf(os.Stderr, "%d members, %d groups: idle CPU %.1f ms/s per group (%.1f%% of a core for all %d), heap %.0f KiB per group per member; root groups alone %.1f ms/s\n",
			members, groups, perGroupCPU*1000, (cpu-baseCPU)*100, groups, perGroupHeap/1024, baseCPU*1000)
		for j := range c.reps {
			c.stop(j)
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// newBenchCluster is newCluster at the default tick, with a leader.
func newBenchCluster(b *testing.B, n int) *cluster {
	c := newCluster(b, n, func(cfg *Config) { cfg.TickInterval = 100 * time.Millisecond })
	c.leader()
	return c
}

// idle returns the process's CPU seconds per second over d and the heap in
// use after it (after a GC).
func idle(d time.Duration) (cpu, heap float64) {
	before := testutil.ProcessCPU().Seconds()
	time.Sleep(d)
	cpu = (testutil.ProcessCPU().Seconds() - before) / d.Seconds()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return cpu, float64(ms.HeapAlloc)
}
