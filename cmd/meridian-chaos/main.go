// Command meridian-chaos runs fault-injection scenarios against real
// meridian server processes on loopback and checks the recorded histories
// (linearizability with porcupine, lock fencing, durability, sequential
// reads). Scenario i uses seed --seed+i; a failing seed re-runs with
// --seed N --count 1 and the same --faults and --duration (the schedule and
// workload choices repeat; process timing does not).
//
// Besides the safety checks it measures availability: per fault, the time
// to the next acknowledged write, and per scenario the longest window with
// no acknowledged write. At the end it prints their distribution by fault
// kind and writes it to availability.json in --out. Shards of one run
// merge with
//
//	meridian-chaos -merge [-merged all.json] shard1/availability.json shard2/availability.json
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/meridian-coord/meridian/internal/chaos"
)

func main() {
	chaos.MaybeRunHolder()
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()%1_000_000), "seed of the first scenario")
	count := flag.Int("count", 1, "number of scenarios (seeds seed..seed+count-1)")
	duration := flag.Duration("duration", 20*time.Second, "workload-under-faults time per scenario")
	faults := flag.String("faults", "all", "comma-separated fault kinds, or all")
	binary := flag.String("binary", "", "meridian binary (default: build ./cmd/meridian without -race)")
	out := flag.String("out", filepath.Join(os.TempDir(), "meridian-chaos"), "scenario directories (kept when a scenario fails)")
	nodes := flag.Int("nodes", 3, "servers per cluster")
	keyspace := flag.String("keyspace", "", "create this regional keyspace (e.g. /eu) and run the keyspace workload; --faults keyspace (or a *-ks-leader kind) implies /eu")
	verbose := flag.Bool("v", false, "log every fault and process event")
	merge := flag.Bool("merge", false, "merge the availability.json files given as arguments, print the distribution and exit")
	merged := flag.String("merged", "", "with -merge: also write the merged JSON here")
	flag.Parse()
	if *merge {
		os.Exit(mergeStats(flag.Args(), *merged))
	}
	kinds, err := chaos.ParseFaults(*faults)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *binary == "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		*binary, err = chaos.BuildServer(ctx, *out)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	logf := func(string, ...any) {}
	if *verbose {
		logf = func(f string, a ...any) { fmt.Printf(f+"\n", a...) }
	}
	begin := time.Now()
	var failed, faultCount, violations int
	stats := chaos.NewAvailabilityStats()
	for i := 0; i < *count && ctx.Err() == nil; i++ {
		s := *seed + uint64(i)
		ks := ""
		if *keyspace != "" {
			ks = " KEYSPACE=" + *keyspace
		}
		fmt.Printf("scenario %d/%d seed %d (rerun: make chaos SEED=%d COUNT=1 DURATION=%v FAULTS=%s%s)\n", i+1, *count, s, s, *duration, *faults, ks)
		res, err := chaos.Run(ctx, chaos.Options{Seed: s, Duration: *duration, Faults: kinds, Binary: *binary, OutDir: *out, Nodes: *nodes, Keyspace: *keyspace, Logf: logf})
		if err != nil {
			fmt.Printf("  harness error: %v\n", err)
			failed++
			continue
		}
		faultCount += len(res.Faults)
		stats.Add(res)
		violations += len(res.Violations)
		fmt.Printf("  %s\n", res.Summary())
		for _, f := range res.Faults {
			fmt.Printf("    fault %s\n", f.Desc)
		}
		for _, m := range res.TickMoves {
			fmt.Printf("    tick moved: %s\n", m)
		}
		if *verbose {
			for _, n := range res.Notes {
				fmt.Printf("    note %s\n", n)
			}
		}
		if res.Failed() {
			failed++
			for _, v := range res.Violations {
				fmt.Printf("  VIOLATION: %s\n", v)
			}
			if res.Lin.Viz != "" {
				fmt.Printf("  porcupine visualization: %s\n", res.Lin.Viz)
			}
			fmt.Printf("  logs and report kept in %s\n", res.Dir)
		}
	}
	fmt.Print(stats.Table())
	statsPath := filepath.Join(*out, "availability.json")
	if err := stats.WriteFile(statsPath); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		fmt.Printf("availability figures: %s\n", statsPath)
	}
	fmt.Printf("done: %d scenarios, %d faults, %d violations, %d failed scenarios, %v\n",
		*count, faultCount, violations, failed, time.Since(begin).Round(time.Second))
	if failed > 0 {
		os.Exit(1)
	}
}

// mergeStats merges shards' availability.json files and prints the table.
func mergeStats(paths []string, out string) int {
	if len(paths) == 0 {
		fmt.Fprintln(os.Stderr, "-merge: give the availability.json files to merge")
		return 2
	}
	all := chaos.NewAvailabilityStats()
	for _, p := range paths {
		s, err := chaos.ReadAvailabilityStats(p)
		if err == nil {
			err = all.Merge(s)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", p, err)
			return 1
		}
	}
	fmt.Print(all.Table())
	if out != "" {
		if err := all.WriteFile(out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}
