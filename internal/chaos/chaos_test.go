package chaos

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	MaybeRunHolder() // the GC-pause fault re-executes this binary as a lock holder
	os.Exit(m.Run())
}

// batterySeed is the first seed of the CI battery; MERIDIAN_CHAOS_SEED
// overrides it.
func batterySeed(t *testing.T) uint64 {
	if s := os.Getenv("MERIDIAN_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("MERIDIAN_CHAOS_SEED: %v", err)
		}
		return v
	}
	return 1000
}

// TestChaosBattery runs two short scenarios per fault kind (28 in all)
// against real server processes and fails on any violation or on a
// linearizability verdict other than Ok. Each prints the command that
// re-runs it.
func TestChaosBattery(t *testing.T) {
	bin, out := chaosSetup(t)
	base := batterySeed(t)
	const perKind = 2
	const dur = 5 * time.Second
	begin := time.Now()
	var faults, violations int
	stats := NewAvailabilityStats()
	for i := 0; i < perKind*len(AllFaults); i++ {
		kind := AllFaults[i%len(AllFaults)]
		seed := base + uint64(i)
		t.Run(fmt.Sprintf("%s/seed=%d", kind, seed), func(t *testing.T) {
			if kind == DiskFull && os.Geteuid() != 0 {
				t.Skip("disk-full mounts a tmpfs per node: needs root (CI runs as root)")
			}
			t.Logf("rerun: make chaos SEED=%d COUNT=1 DURATION=%v FAULTS=%s", seed, dur, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			res, err := Run(ctx, Options{Seed: seed, Duration: dur, Faults: []string{kind}, Binary: bin,
				OutDir: out, CheckTimeout: 30 * time.Second, KVWorkers: 3, LockWorkers: 2, Logf: t.Logf})
			if err != nil {
				t.Fatalf("harness: %v", err)
			}
			t.Log(res.Summary())
			stats.Add(res)
			for _, f := range res.Faults {
				t.Logf("fault %s", f.Desc)
			}
			faults += len(res.Faults)
			violations += len(res.Violations)
			if len(res.Faults) == 0 {
				t.Errorf("no fault was injected")
			}
			if res.Failed() {
				for _, v := range res.Violations {
					t.Errorf("VIOLATION: %s", v)
				}
				if res.Lin.Viz != "" {
					t.Errorf("not linearizable; porcupine visualization: %s", res.Lin.Viz)
				} else if res.Lin.Result != "Ok" {
					t.Errorf("linearizability check inconclusive (%s)", res.Lin.Result)
				}
				if os.Getenv("MERIDIAN_CHAOS_OUT") == "" {
					t.Errorf("set MERIDIAN_CHAOS_OUT=dir to keep the logs, or rerun with make chaos")
				} else {
					t.Errorf("logs and report: %s", res.Dir)
				}
			}
		})
	}
	t.Log("\n" + stats.Table())
	t.Logf("battery: %d scenarios, %d faults, %d violations, %v", perKind*len(AllFaults), faults, violations, time.Since(begin).Round(time.Second))
}

// TestChaosKeyspaces runs one short scenario with a regional keyspace (a
// second raft group): the register and lock workloads over both groups,
// write then flag across them, ephemerals of closed sessions in both, and
// faults on the root's leader, a follower and the keyspace group's leader.
func TestChaosKeyspaces(t *testing.T) {
	bin, out := chaosSetup(t)
	seed := batterySeed(t) + 500
	kinds := append([]string{KillLeader, PartitionFollower}, KeyspaceFaults...)
	const dur = 6 * time.Second
	t.Logf("rerun: make chaos SEED=%d COUNT=1 DURATION=%v FAULTS=%s KEYSPACE=%s", seed, dur, strings.Join(kinds, ","), DefaultKeyspace)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Seed: seed, Duration: dur, Faults: kinds, Binary: bin, Keyspace: DefaultKeyspace,
		OutDir: out, CheckTimeout: 30 * time.Second, KVWorkers: 3, LockWorkers: 4, Logf: t.Logf})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Log(res.Summary())
	for _, f := range res.Faults {
		t.Logf("fault %s: %s", f.Kind, f.Desc)
	}
	if len(res.Faults) == 0 {
		t.Errorf("no fault was injected")
	}
	if res.KeyspaceWrites == 0 || res.FlagReads == 0 || res.Ephemerals == 0 {
		t.Errorf("keyspace workload idle: %d keyspace writes, %d flag reads, %d ephemerals", res.KeyspaceWrites, res.FlagReads, res.Ephemerals)
	}
	if res.Failed() {
		for _, v := range res.Violations {
			t.Errorf("VIOLATION: %s", v)
		}
		if res.Lin.Result != "Ok" {
			t.Errorf("linearizability %s; %s", res.Lin.Result, res.Lin.Viz)
		}
		t.Errorf("logs and report: %s (kept with MERIDIAN_CHAOS_OUT)", res.Dir)
	}
}

// chaosSetup skips in -short (real processes) and otherwise builds the
// server binary and picks the output directory (MERIDIAN_CHAOS_OUT keeps
// the scenarios' logs and data).
func chaosSetup(t *testing.T) (bin, out string) {
	if testing.Short() {
		t.Skip("real-process chaos scenarios; not in -short")
	}
	bin, err := BuildServer(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out = t.TempDir()
	if keep := os.Getenv("MERIDIAN_CHAOS_OUT"); keep != "" {
		out = keep
	}
	return bin, out
}
