// Command meridian-chaos runs fault-injection scenarios against real
// meridian server processes on loopback and checks the recorded histories
// (linearizability with porcupine, lock fencing, durability, sequential
// reads). Scenario i uses seed --seed+i; a failing seed re-runs with
// --seed N --count 1 and the same --faults and --duration (the schedule and
// workload choices repeat; process timing does not).
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
	verbose := flag.Bool("v", false, "log every fault and process event")
	flag.Parse()
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
	for i := 0; i < *count && ctx.Err() == nil; i++ {
		s := *seed + uint64(i)
		fmt.Printf("scenario %d/%d seed %d (rerun: make chaos SEED=%d COUNT=1 DURATION=%v FAULTS=%s)\n", i+1, *count, s, s, *duration, *faults)
		res, err := chaos.Run(ctx, chaos.Options{Seed: s, Duration: *duration, Faults: kinds, Binary: *binary, OutDir: *out, Nodes: *nodes, Logf: logf})
		if err != nil {
			fmt.Printf("  harness error: %v\n", err)
			failed++
			continue
		}
		faultCount += len(res.Faults)
		violations += len(res.Violations)
		fmt.Printf("  %s\n", res.Summary())
		for _, f := range res.Faults {
			fmt.Printf("    fault %s\n", f.Desc)
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
	fmt.Printf("done: %d scenarios, %d faults, %d violations, %d failed scenarios, %v\n",
		*count, faultCount, violations, failed, time.Since(begin).Round(time.Second))
	if failed > 0 {
		os.Exit(1)
	}
}
