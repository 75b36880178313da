package sim

import (
	"os"
	"strconv"
	"testing"
)

// seeds is how many seeds a simulation test runs (MERIDIAN_SIM_SEEDS,
// default def, from MERIDIAN_SIM_FIRST, default 1); MERIDIAN_SIM_SEED
// runs one seed alone, to replay a failure.
func seeds(t *testing.T, def uint64) (first, n uint64) {
	if v := os.Getenv("MERIDIAN_SIM_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return s, 1
	}
	n = def
	if v := os.Getenv("MERIDIAN_SIM_SEEDS"); v != "" {
		c, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		n = c
	}
	first = 1
	if v := os.Getenv("MERIDIAN_SIM_FIRST"); v != "" {
		f, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		first = f
	}
	return first, n
}

// run runs seeds first..first+n-1 with config and returns their summed
// stats; it fails the test at the first violation.
func run(t *testing.T, name string, first, n uint64, config func(seed uint64) Config) Stats {
	var total Stats
	for seed := first; seed < first+n; seed++ {
		s := New(config(seed))
		if err := s.Run(); err != nil {
			t.Fatalf("%v (replay: MERIDIAN_SIM_SEED=%d go test ./internal/sim -run %s)", err, seed, name)
		}
		total.add(s.Stats)
	}
	return total
}

func (t *Stats) add(s Stats) {
	t.Proposals += s.Proposals
	t.Applied += s.Applied
	t.Elections += s.Elections
	t.Crashes += s.Crashes
	t.Partitions += s.Partitions
	t.Dropped += s.Dropped
	t.MidWriteCrashes += s.MidWriteCrashes
	t.FollowerWriteCrashes += s.FollowerWriteCrashes
	t.Restores += s.Restores
	t.MaxIndex = max(t.MaxIndex, s.MaxIndex)
	t.KeyspaceApplied += s.KeyspaceApplied
	t.WrongGroup += s.WrongGroup
	t.CrossKeyspace += s.CrossKeyspace
	t.FlagsChecked += s.FlagsChecked
	t.SessionEnds += s.SessionEnds
	t.ClockJumps += s.ClockJumps
	t.LossyGroups += s.LossyGroups
	t.GroupRestores += s.GroupRestores
	t.TombstoneFloors += s.TombstoneFloors
	t.SessionsBack += s.SessionsBack
	t.KeyspacesCreated += s.KeyspacesCreated
	t.LearnerSyncs += s.LearnerSyncs
	t.UnsyncedLost += s.UnsyncedLost
}

// TestSimulation runs many seeded runs of one group of 3 and 5 members
// under message loss, duplication, reordering, crashes and (one-way)
// partitions, checking one leader per term, committed entries never
// changing, identical state and zxid at equal index (a restored snapshot
// included), no acknowledgement or vote sent before the sender's disk
// synced it, monotonic fencing tokens, lock exclusion and no lock held by
// or waited for by an ended session throughout, and convergence once the
// faults stop.
func TestSimulation(t *testing.T) {
	first, n := seeds(t, 40)
	total := run(t, "TestSimulation", first, n, func(seed uint64) Config {
		cfg := DefaultConfig(seed)
		if seed%4 == 0 {
			cfg.Members = 5
		}
		return cfg
	})
	// Faults may stall a run for a while (a majority down), but not all runs.
	if total.Applied < 100*n {
		t.Fatalf("%d entries applied in %d seeds: the runs made almost no progress", total.Applied, n)
	}
	if n >= 20 && total.MidWriteCrashes == 0 {
		t.Fatalf("%d seeds and no leader crashed between its early send and its write", n)
	}
	if n >= 20 && total.Restores == 0 {
		t.Fatalf("%d seeds and no member restored a snapshot", n)
	}
	t.Logf("%d seeds: %+v", n, total)
}

// TestKeyspaces runs seeded runs of a root group and two keyspaces'
// groups on 3 members (all voters) or 5 (three voters per keyspace, two
// learners), the same faults per member (and lossy groups, wall clocks
// jumping back), and besides TestSimulation's checks, per group: zxids
// strictly increasing on every member and the same on every member at an
// index; a flag written after a write in another group with the session's
// seen zxid ordered after it; nothing applied outside the group's prefix
// (refused with ErrWrongGroup or ErrCrossKeyspace, the same everywhere);
// a session ended in a keyspace group only after the root ended it, never
// taking part again, and at the end none that the root ended. Learners
// defer their syncs, and some crash with entries unsynced.
//
// 24 seeds: every check below is exercised by some of them (with 12, which
// of the rarer cases show up, a learner crashing with entries unsynced,
// depends on how raft's messages happen to be batched).
func TestKeyspaces(t *testing.T) {
	first, n := seeds(t, 24)
	total := run(t, "TestKeyspaces", first, n, func(seed uint64) Config {
		cfg := KeyspacesConfig(seed)
		if seed%2 == 0 {
			cfg.Members = 5
		}
		return cfg
	})
	if total.KeyspacesCreated < 2*n || total.KeyspaceApplied < 100*n {
		t.Fatalf("%d seeds: %d keyspaces, %d keyspace entries applied: the runs made almost no progress", n, total.KeyspacesCreated, total.KeyspaceApplied)
	}
	if n >= 8 && (total.GroupRestores == 0 || total.WrongGroup == 0 || total.CrossKeyspace == 0 || total.FlagsChecked == 0 || total.SessionEnds == 0 ||
		total.LearnerSyncs == 0 || total.UnsyncedLost == 0) {
		t.Fatalf("%d seeds and a check never exercised: %+v", n, total)
	}
	t.Logf("%d seeds: %+v", n, total)
}

// A seed replays exactly: two runs of one seed end in the same state.
func TestSimulationReplays(t *testing.T) {
	for _, cfg := range []Config{DefaultConfig(7), KeyspacesConfig(7)} {
		run := func() (Stats, [][32]byte) {
			s := New(cfg)
			if err := s.Run(); err != nil {
				t.Fatal(err)
			}
			var hashes [][32]byte
			for _, n := range s.members[0].nodes {
				hashes = append(hashes, stateHash(n.fsm))
			}
			return s.Stats, hashes
		}
		a, ha := run()
		b, hb := run()
		if a != b || len(ha) != len(hb) {
			t.Fatalf("seed 7 (%d keyspaces) ran differently twice: %+v vs %+v", cfg.Keyspaces, a, b)
		}
		for i := range ha {
			if ha[i] != hb[i] {
				t.Fatalf("seed 7 (%d keyspaces) ended in different states twice", cfg.Keyspaces)
			}
		}
	}
}
