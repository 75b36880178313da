package sim

import (
	"os"
	"strconv"
	"testing"
)

// seeds is how many seeds TestSimulation runs (MERIDIAN_SIM_SEEDS, default 40,
// from MERIDIAN_SIM_FIRST, default 1); MERIDIAN_SIM_SEED runs one seed
// alone, to replay a failure.
func seeds(t *testing.T) (first, n uint64) {
	if v := os.Getenv("MERIDIAN_SIM_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return s, 1
	}
	n = 40
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

// TestSimulation runs many seeded runs of 3 and 5 nodes under message loss,
// duplication, reordering, crashes and (one-way) partitions, checking one
// leader per term, committed entries never changing, identical state at
// equal index (a restored snapshot included), no acknowledgement or vote
// sent before the sender's disk synced it, monotonic fencing tokens, lock
// exclusion and no lock held by or waited for by an ended session
// throughout, and convergence once the faults stop.
func TestSimulation(t *testing.T) {
	first, n := seeds(t)
	var total Stats
	for seed := first; seed < first+n; seed++ {
		cfg := DefaultConfig(seed)
		if seed%4 == 0 {
			cfg.Nodes = 5
		}
		s := New(cfg)
		if err := s.Run(); err != nil {
			t.Fatalf("%v (replay: MERIDIAN_SIM_SEED=%d go test ./internal/sim -run TestSimulation)", err, seed)
		}
		total.Proposals += s.Stats.Proposals
		total.Applied += s.Stats.Applied
		total.Elections += s.Stats.Elections
		total.Crashes += s.Stats.Crashes
		total.Partitions += s.Stats.Partitions
		total.Dropped += s.Stats.Dropped
		total.MidWriteCrashes += s.Stats.MidWriteCrashes
		total.FollowerWriteCrashes += s.Stats.FollowerWriteCrashes
		total.Restores += s.Stats.Restores
		total.MaxIndex = max(total.MaxIndex, s.Stats.MaxIndex)
	}
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

// A seed replays exactly: two runs of one seed end in the same state.
func TestSimulationReplays(t *testing.T) {
	run := func() (Stats, [32]byte) {
		s := New(DefaultConfig(7))
		if err := s.Run(); err != nil {
			t.Fatal(err)
		}
		return s.Stats, s.stateHash(s.nodes[0])
	}
	a, ha := run()
	b, hb := run()
	if a != b || ha != hb {
		t.Fatalf("seed 7 ran differently twice: %+v vs %+v", a, b)
	}
}
