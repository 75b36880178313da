// Command meridian-bench runs the side-by-side benchmark suite (package
// bench): real clusters of Meridian, ZooKeeper, etcd and Redis behind
// emulated wide-area links, the source documents' workloads, a Markdown
// report with plots and raw JSON. `make bench-report` runs it.
package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-coord/meridian/bench"
)

func main() {
	workloads := flag.String("workloads", "locks,seed004,throughput,georead,localfirst,followsun", "comma-separated: locks (Key-value stores for locking), seed004, seed000-grid (the lock strategies at low contention; run on the seed000-u*-s* topologies), seed000-contention (inter-arrival 200 ms, holds 1-150 ms), seed002 (uniform-RTT topologies: 10 clients x 25 writes to one object; random objects with 1-50 clients at 30 ms), throughput, georead (Meridian: far-region reads via a local learner, hedged reads), localfirst (Meridian: local-first lock hand-off vs FIFO), followsun (Meridian: the leader follows the write load; ZooKeeper with its leader in the farthest region for comparison), keyspaces (on a topology whose servers name zones: Meridian with a keyspace per region against one raft group, ZooKeeper with a voter a region; not in the default list)")
	systems := flag.String("systems", "meridian,zookeeper,etcd,redis", "comma-separated systems to run")
	topos := flag.String("topologies", "topologies/1dc.yaml", "comma-separated topology files")
	quick := flag.Bool("quick", false, "every workload in small form (a smoke run, not figures)")
	out := flag.String("out", "", "directory for results.json and the plots (default: none)")
	report := flag.String("report", "", "write the Markdown report here (default: stdout)")
	runs := flag.String("runs", "", "write the Markdown report as a new file DIR/DATE-NAME.md and its plots into DIR/DATE-NAME/ (DATE: the run's first day; NAME: main, or the paper-named --section; an existing report is never overwritten), instead of -out and -report")
	results := flag.String("results", "", "with --runs: write the raw results as DIR/DATE-NAME.json.gz")
	section := flag.String("section", "", "with --report: replace only the part of the file between the markers of this name (<!-- meridian-bench:NAME:begin/end -->; default: meridian-bench:begin/end); with --runs: what the report covers, in its file name (seed000-grid, seed000-contention, seed002)")
	plotRef := flag.String("plot-ref", "", "path of the plots as the report should link them (default: -out)")
	bin := flag.String("meridian-bin", "", "meridian binary (default: built from -meridian-src)")
	src := flag.String("meridian-src", "..", "the Meridian checkout to build the binary from")
	keep := flag.Bool("keep", false, "keep run directories (logs, data)")
	ops := flag.Int("ops", 0, "seed004 operations per task (Tail Latency in ZooKeeper's tasks) (default 1000; quick 40)")
	lockIters := flag.Int("lock-iters", 0, "lock acquires per client (default 50; quick 8)")
	warmup := flag.Duration("warmup", 10*time.Second, "writes from every client region before measuring each system")
	replot := flag.String("replot", "", "redraw the plots of a results.json into -out, and stop")
	part := flag.String("part", "", "write this run's raw results to this JSON file only (no plots, no report), for --merge")
	merge := flag.String("merge", "", "comma-separated results JSON files of separate runs (--part): write their combined plots, results JSON and report as one run's, and stop")
	replace := flag.String("replace", "", "BASE,RERUN: with --part, write BASE's results with RERUN's in place of the same workload, topology and flavor (a rerun of some systems of a part), and stop")
	zkLeader := flag.String("zk-leader", "", "place ZooKeeper's first leader in this server region for every workload but followsun (default: where its election puts it; ZooKeeper's best case for a client region is its nearest server)")
	alternations := flag.Int("alternations", 1, "throughput, seed004 and locks: run a system's flavors A B B A this many times at each point, every run merged (Meridian's native API and its ZooKeeper port)")
	mLeader := flag.String("meridian-leader", "", "move Meridian's leader to server N before the workloads (\"election\": leave it where its election put it; default: on a topology whose servers share one region, the last server, where ZooKeeper's election puts its own; elsewhere where placement puts it)")
	pprof := flag.Bool("meridian-pprof", false, "serve Go's profiles on each Meridian server's HTTP port (printed), to profile it under a workload")
	tpClients := flag.String("throughput-clients", "", "comma-separated client counts of the throughput workload (default 1,8,32,128,256; quick 1,8)")
	ksRegions := flag.String("keyspaces-regions", "", "keyspaces: comma-separated client regions that run (default: every one; one alone shows its latency without the others' load)")
	ksVariants := flag.String("keyspaces-variants", "", "keyspaces: comma-separated variants to run: keyspaces, one-group, region (Meridian: a keyspace per region with zone survival, one group, a keyspace per region with region survival), zookeeper (a voter a region, observers elsewhere), etcd (a member a region) (default: those of --systems)")
	ksPhase := flag.Duration("keyspaces-phase", 0, "keyspaces: length of the write-and-lock phase and of the read phase (default 20s; quick 3s)")
	policy := flag.String("placement-policy", "", "Meridian's placement_policy: center-of-gravity (default), majority or ema")
	scale := flag.Int("scale", 0, "instead of the workloads: the scale experiment, filling each of --systems (meridian, zookeeper, etcd) on the first --topologies file with this many znodes of 100 B (etcd: keys) from --scale-clients clients; fill rate per slice, memory, disk, snapshots, restart time and one follower's catch-up from an empty data directory are reported (-out: scale.json, scale-fill-rate.png, Meridian's heap profiles)")
	scaleClients := flag.Int("scale-clients", 64, "scale: concurrent ZooKeeper clients")
	scaleCatchup := flag.Bool("scale-catchup", true, "scale: after the restart, time one follower's catch-up from an empty data directory")
	scaleSlice := flag.Int("scale-slice", 0, "scale: znodes per measured slice (default a tenth of --scale)")
	ksIdle := flag.Int("keyspaces-idle", 0, "instead of the workloads: the idle-keyspaces experiment on the first --topologies file (its servers must name zones, e.g. 3region-9): Meridian's servers' CPU (ms/s) and RSS over a window with no keyspaces, then with this many idle keyspaces (zone survival, homes round-robin over the regions), then with one write a second to each; the report goes where --runs, --report or stdout say (--section keyspaces-idle names the run file)")
	ksIdleWindow := flag.Duration("keyspaces-idle-window", 0, "keyspaces-idle: length of each measurement (default 60s; quick 10s)")
	ksIdleLoad := flag.Bool("keyspaces-idle-load", true, "keyspaces-idle: also measure at one write a second to each keyspace")
	sessions := flag.Int("sessions", 0, "instead of the workloads: the sessions experiment on the first --topologies file (default topologies/loopback.yaml), for each of --systems (meridian, zookeeper, etcd; default all three): the servers' CPU (ms/s) and RSS with nothing connected, with this many sessions (10000 for the full experiment) and --sessions-watches watches at rest, and under --sessions-rate writes a second to watched keys, with the notification latency; the report goes where --runs, --report or stdout say (--section sessions names the run file)")
	sessionsWatches := flag.Int("sessions-watches", 0, "sessions: keys and watches on them (default 100000; quick 2000)")
	sessionsWindow := flag.Duration("sessions-window", 0, "sessions: length of each measurement (default 30s; quick 5s)")
	sessionsRate := flag.Int("sessions-rate", 200, "sessions: writes a second to watched keys under load")
	flag.Parse()
	if *replot != "" {
		rep, err := bench.LoadReport(*replot)
		if err == nil {
			err = rep.WritePlots(*out)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "meridian-bench:", err)
			os.Exit(1)
		}
		return
	}

	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "meridian-bench:", err)
		os.Exit(1)
	}
	if *replace != "" {
		paths := strings.Split(*replace, ",")
		if len(paths) != 2 || *part == "" {
			fail(fmt.Errorf("--replace takes BASE,RERUN and needs --part"))
		}
		reps, err := loadReports(paths)
		if err != nil {
			fail(err)
		}
		if err := bench.Replace(reps[0], reps[1]).WriteJSONFile(*part); err != nil {
			fail(err)
		}
		return
	}
	if *merge != "" {
		reps, err := loadReports(strings.Split(*merge, ","))
		if err != nil {
			fail(err)
		}
		rep := bench.Merge(reps...)
		if err := write(rep, *runs, *results, *out, *plotRef, *report, *section); err != nil {
			fail(err)
		}
		if len(rep.Failures) > 0 {
			fmt.Fprintln(os.Stderr, "meridian-bench: some systems or workloads could not run (see the report)")
			os.Exit(2)
		}
		return
	}
	tmp, err := os.MkdirTemp("", "meridian-bench-")
	if err != nil {
		fail(err)
	}
	if !*keep {
		defer os.RemoveAll(tmp)
	}
	want := strings.Split(*systems, ",")
	if *bin == "" && (slices.Contains(want, "meridian") || *ksIdle > 0 || (*sessions > 0 && !isSet("systems"))) {
		*bin = filepath.Join(tmp, "meridian")
		cmd := exec.Command("go", "build", "-o", *bin, "./cmd/meridian")
		cmd.Dir = *src
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fail(fmt.Errorf("building meridian: %w", err))
		}
	}
	if *sessions > 0 {
		p := bench.SessionsParams{Sessions: *sessions, Watches: 100_000, Window: 30 * time.Second, Settle: 5 * time.Second,
			Rate: *sessionsRate, SessionTimeout: 30 * time.Second, Writers: 8}
		if *quick {
			p.Watches, p.Window, p.Settle = 2000, 5*time.Second, 2*time.Second
		}
		if *sessionsWatches > 0 {
			p.Watches = *sessionsWatches
		}
		if *sessionsWindow > 0 {
			p.Window = *sessionsWindow
		}
		topo := strings.Split(*topos, ",")[0]
		if !isSet("topologies") {
			topo = "topologies/loopback.yaml"
		}
		sys := want
		if !isSet("systems") {
			sys = []string{"meridian", "zookeeper", "etcd"}
		}
		if err := runSessions(sys, topo, tmp, *bin, *src, *keep, *quick, p, *runs, *results, *report, *section); err != nil {
			fail(err)
		}
		return
	}
	if *ksIdle > 0 {
		p := bench.KeyspacesIdleParams{Keyspaces: *ksIdle, Window: 60 * time.Second, Settle: 20 * time.Second, Load: *ksIdleLoad, Keep: *keep, Pprof: *pprof}
		if *quick {
			p.Window, p.Settle = 10*time.Second, 5*time.Second
		}
		if *ksIdleWindow > 0 {
			p.Window = *ksIdleWindow
		}
		if err := runKeyspacesIdle(strings.Split(*topos, ",")[0], tmp, *bin, *src, *quick, p, *runs, *results, *report, *section); err != nil {
			fail(err)
		}
		return
	}
	if *scale > 0 {
		if err := runScale(want, strings.Split(*topos, ",")[0], tmp, *bin, *out, *plotRef, *keep,
			bench.ScaleParams{Znodes: *scale, Clients: *scaleClients, Value: 100, Slice: *scaleSlice, Catchup: *scaleCatchup}); err != nil {
			fail(err)
		}
		return
	}
	lockP := bench.LockParams{Clients: []int{1, 3, 5}, Iters: 50, Hold: 2 * time.Millisecond}
	s4 := bench.Seed004Params{Ops: 1000, MixedClients: 6}
	tp := bench.ThroughputParams{Clients: []int{1, 8, 32, 128, 256}, Duration: 10 * time.Second}
	gr := bench.GeoReadParams{Reads: 500}
	lf := bench.LocalFirstParams{PerRegion: 2, Iters: 30, Hold: 2 * time.Millisecond, K: []int{0, 3}}
	fs := bench.FollowSunParams{Phase: 30 * time.Second, Writers: 2}
	ks := bench.KeyspacesParams{Phase: 20 * time.Second, Warmup: 5 * time.Second, Value: 100, Pprof: *pprof}
	s0grid := bench.Seed000Params{Interarrival: 500 * time.Millisecond, Service: []time.Duration{time.Millisecond}, Duration: 20 * time.Second, Sessions: 6, Poll: 5 * time.Millisecond}
	s0cont := bench.Seed000Params{Interarrival: 200 * time.Millisecond, Service: []time.Duration{time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond}, Duration: 20 * time.Second, Sessions: 6, Poll: 5 * time.Millisecond}
	s2 := bench.Seed002Params{Same: 10, Writes: 25, Clients: []int{1, 5, 10, 20, 30, 50}, Total: 1000, RandomAtRTT: 30 * time.Millisecond}
	samples := 50
	mode := "full"
	if *quick {
		lockP = bench.LockParams{Clients: []int{1, 5}, Iters: 8, Hold: 2 * time.Millisecond}
		s4.Ops = 40
		samples = 10
		tp = bench.ThroughputParams{Clients: []int{1, 8}, Duration: 2 * time.Second}
		gr.Reads = 20
		lf.Iters = 3
		fs.Phase = 10 * time.Second
		ks.Phase, ks.Warmup = 3*time.Second, 2*time.Second
		s2 = bench.Seed002Params{Same: 10, Writes: 3, Clients: []int{1, 10}, Total: 40, RandomAtRTT: 30 * time.Millisecond}
		s0grid.Duration, s0cont.Duration = 3*time.Second, 3*time.Second
		s0cont.Service = []time.Duration{time.Millisecond, 150 * time.Millisecond}
		mode = "quick"
	}
	if *ops > 0 {
		s4.Ops = *ops
	}
	ks.Keep = *keep
	if *ksPhase > 0 {
		ks.Phase = *ksPhase
	}
	if *ksRegions != "" {
		ks.Regions = strings.Split(*ksRegions, ",")
	}
	for _, v := range strings.Split(*ksVariants, ",") {
		switch v {
		case "":
		case "keyspaces":
			ks.Variants = append(ks.Variants, bench.KeyspacesVariants[0])
		case "one-group":
			ks.Variants = append(ks.Variants, bench.KeyspacesVariants[1])
		case "zookeeper":
			ks.Variants = append(ks.Variants, bench.KeyspacesVariants[2])
		case "etcd":
			ks.Variants = append(ks.Variants, bench.KeyspacesVariants[3])
		case "region":
			ks.Variants = append(ks.Variants, bench.KeyspacesVariants[4])
		default:
			fail(fmt.Errorf("--keyspaces-variants: %q is not keyspaces, one-group, zookeeper, etcd or region", v))
		}
	}
	if ks.Variants == nil { // by --systems
		if slices.Contains(want, "meridian") {
			ks.Variants = append(ks.Variants, bench.KeyspacesVariants[:2]...)
			ks.Variants = append(ks.Variants, bench.KeyspacesVariants[4])
		}
		if slices.Contains(want, "zookeeper") {
			ks.Variants = append(ks.Variants, bench.KeyspacesVariants[2])
		}
		if slices.Contains(want, "etcd") {
			ks.Variants = append(ks.Variants, bench.KeyspacesVariants[3])
		}
	}
	if *alternations < 1 || *alternations > 10 {
		fail(fmt.Errorf("--alternations %d: from 1 to 10", *alternations))
	}
	if *tpClients != "" {
		tp.Clients = nil
		for _, f := range strings.Split(*tpClients, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 4096 {
				fail(fmt.Errorf("--throughput-clients: %q is not a client count (1..4096)", f))
			}
			tp.Clients = append(tp.Clients, n)
		}
	}
	if *lockIters > 0 {
		lockP.Iters = *lockIters
	}
	if *ops > 0 || *lockIters > 0 {
		mode += fmt.Sprintf(" (%d seed004 operations per task, %d lock acquires per client)", s4.Ops, lockP.Iters)
	}
	if *tpClients != "" {
		mode += fmt.Sprintf(" (throughput at %v clients)", tp.Clients)
	}
	start := time.Now()
	rep := &bench.Report{Machine: machine(), Commit: commit(*src), Started: start.UTC().Format("2006-01-02 15:04 UTC"), Mode: mode,
		Links: map[string][]bench.LinkCheck{}, Notes: map[string]string{}, Topologies: map[string]*bench.Topology{}, Probes: map[string][]bench.ProbeRow{}}
	if rep.Fsync, err = bench.MeasureFsync(tmp, 50); err != nil {
		fail(fmt.Errorf("measuring fsync: %w", err))
	}
	step := 0
	progress := func(s string) {
		step++
		fmt.Fprintf(os.Stderr, "[%s %3d] %s\n", time.Since(start).Round(time.Second), step, s)
	}
	for _, path := range strings.Split(*topos, ",") {
		topo, err := bench.LoadTopology(path)
		if err != nil {
			fail(err)
		}
		startLeader, err := topo.MeridianStartLeader(*mLeader)
		if err != nil {
			fail(err)
		}
		checks, err := bench.VerifyLinks(topo, samples)
		if err != nil {
			fail(fmt.Errorf("verifying links: %w", err))
		}
		rep.Links[topo.Name] = checks
		rep.Topologies[topo.Name] = topo
		progress(fmt.Sprintf("topology %s: %d region pairs verified", topo.Name, len(checks)))
		if slices.Contains(want, "meridian") && slices.Contains(strings.Split(*workloads, ","), "georead") && bench.FarRegion(topo) != "" {
			env, err := bench.NewEnv(topo, tmp, uint64(len(rep.Results)+1))
			if err != nil {
				fail(err)
			}
			res, err := bench.RunGeoRead(env, *bin, gr, progress)
			if err != nil {
				rep.Failures = append(rep.Failures, fmt.Sprintf("georead on %s: %v", topo.Name, err))
			}
			rep.Results = append(rep.Results, res...)
			if f := env.Finish(*keep, "georead on "+topo.Name); f != "" {
				rep.Failures = append(rep.Failures, f)
			}
		}
		if len(ks.Variants) > 0 && slices.Contains(strings.Split(*workloads, ","), "keyspaces") {
			if !topo.HasZones() {
				rep.Failures = append(rep.Failures, fmt.Sprintf("keyspaces on %s: the topology's servers name no zones", topo.Name))
			} else {
				newEnv := func() (*bench.Env, error) { return bench.NewEnv(topo, tmp, uint64(len(rep.Results)+1)) }
				note := func(variant, notes string) { rep.Notes["keyspaces: "+variant] = notes }
				res, failures := bench.RunKeyspaces(newEnv, *bin, ks, checks, rep.Fsync, progress, note)
				rep.Results = append(rep.Results, res...)
				rep.Failures = append(rep.Failures, failures...)
				rep.Notes["keyspaces"] = fmt.Sprintf("%d servers (%s); Meridian with keyspaces: one per region, zone survival, created by the super digest (the region-survival variant: the same with --survive region, five voters in three regions, the leader kept home); Meridian with one group: the same servers, placement: auto; every variant: %v warm-up, %v of writes and locks, %v of reads",
					len(topo.Servers), strings.Join(serverNames(topo), ", "), ks.Warmup, ks.Phase, ks.Phase)
				if slices.Contains(ks.Variants, bench.KeyspacesVariants[2]) {
					rep.Notes["zookeeper (keyspaces)"] = "the same servers; the first of each region votes, the others observe; fsync on; locks: go-zookeeper's lock recipe"
				}
				if slices.Contains(ks.Variants, bench.KeyspacesVariants[3]) {
					rep.Notes["etcd (keyspaces)"] = "three members, the first server of each region (etcd 3.4 allows one learner); fsync on; reads linearizable (etcd's default, through the leader); locks: clientv3's concurrency mutex"
				}
				if ks.Regions != nil {
					rep.Notes["keyspaces"] += "; clients only in " + strings.Join(ks.Regions, ", ")
				}
			}
		}
		if rest := slices.DeleteFunc(strings.Split(*workloads, ","), func(w string) bool { return w == "georead" || w == "keyspaces" }); len(rest) == 0 {
			continue // georead and keyspaces have their own clusters (above)
		}
		for _, run := range systemRuns(want, strings.Split(*workloads, ","), topo, *zkLeader) {
			sys := run.sys
			env, err := bench.NewEnv(topo, tmp, uint64(len(rep.Results)+1))
			if err != nil {
				fail(err)
			}
			var c *bench.Cluster
			switch sys {
			case "meridian":
				c, err = bench.StartMeridianWith(env, *bin, bench.MeridianOptions{PlacementPolicy: *policy, Pprof: *pprof, SuperDigest: bench.AdminSuperDigest()})
				if err == nil && *pprof {
					progress(fmt.Sprintf("meridian on %s: profiles at http://%s/debug/pprof/", topo.Name, strings.Join(c.HTTP, "/debug/pprof/, http://")))
				}
			case "zookeeper":
				c, err = bench.StartZooKeeperWith(env, run.zk)
			case "etcd":
				c, err = bench.StartEtcd(env)
			case "redis":
				c, err = bench.StartRedis(env)
			default:
				err = fmt.Errorf("unknown system %q", sys)
			}
			if err != nil {
				rep.Failures = append(rep.Failures, fmt.Sprintf("%s on %s: %v", sys, topo.Name, err))
				progress(fmt.Sprintf("%s on %s: could not start: %v", sys, topo.Name, err))
				env.Close(*keep)
				continue
			}
			c.CPU = env.CPU
			if want := startLeader; sys == "meridian" && want >= 0 {
				if err := bench.MoveLeader(c, want, 30*time.Second); err != nil {
					rep.Failures = append(rep.Failures, fmt.Sprintf("%s on %s: could not move the leader to server %d: %v", sys, topo.Name, want+1, err))
				} else {
					c.Notes += fmt.Sprintf("; leader moved to server %d before the workloads and kept there (--meridian-leader; on one region by default the server ZooKeeper's election chooses there)", want+1)
				}
			}
			if *alternations > 1 && sys == "meridian" {
				c.Notes += fmt.Sprintf("; throughput, seed004 and locks: the two flavors run A B B A %d times at each point, merged", *alternations)
			}
			if prev, ok := rep.Notes[sys]; ok && prev != c.Notes {
				rep.Notes[sys] = prev + "; followsun on a cluster of its own: " + strings.TrimPrefix(strings.TrimPrefix(c.Notes, prev), "; ")
			} else {
				rep.Notes[sys] = c.Notes
			}
			for _, f := range bench.Flavors {
				if f.System == sys && f.CanKV() {
					if err := bench.Warmup(c, topo, f, *warmup); err != nil {
						rep.Failures = append(rep.Failures, fmt.Sprintf("%s on %s: warm-up: %v", sys, topo.Name, err))
					}
					break
				}
			}
			progress(fmt.Sprintf("%s on %s: started, leader %s", sys, topo.Name, leader(c, topo)))
			first := -1 // the leader Meridian's first flavor started with
			if sys == "meridian" {
				first = startLeader // pinned: held even if warm-up's placement moved it
			}
			// leaderBack gives every Meridian flavor the leader the first
			// one started with: an election during one (load can cause
			// one) must not hand the next a shorter path to the leader.
			leaderBack := func(f bench.Flavor) {
				if sys != "meridian" || c.Leader == nil {
					return
				}
				if first < 0 {
					first = c.Leader()
				} else if l := c.Leader(); first >= 0 && l != first {
					// Not a failure of the run when it cannot: each row
					// names the leader it started with.
					if err := bench.MoveLeader(c, first, 30*time.Second); err != nil {
						progress(fmt.Sprintf("%s on %s: could not move the leader back to server %d before %s: %v", sys, topo.Name, first+1, f.Name, err))
					} else {
						progress(fmt.Sprintf("%s on %s: leader moved back from server %d to server %d before %s", sys, topo.Name, l+1, first+1, f.Name))
					}
				}
			}
			// runWorkload runs workload w with flavor f (throughput: at the
			// client counts clients).
			runWorkload := func(w string, f bench.Flavor, clients []int) []bench.Result {
				switch w {
				case "locks":
					if f.CanLock() {
						return bench.RunLocks(c, topo, f, lockP, progress)
					}
				case "seed004":
					if f.CanKV() {
						return bench.RunSeed004(c, topo, f, s4, progress)
					}
				case "seed000-grid":
					return bench.RunSeed000(c, topo, f, s0grid, progress)
				case "seed000-contention":
					return bench.RunSeed000(c, topo, f, s0cont, progress)
				case "seed002":
					if f.CanKV() {
						return bench.RunSeed002(c, topo, f, s2, progress)
					}
				case "throughput":
					if f.CanKV() {
						p := tp
						p.Clients = clients
						return bench.RunThroughput(c, topo, f, p, progress)
					}
				case "georead", "keyspaces": // their own clusters, above
				case "followsun":
					if f.Name == "Meridian (native)" || f.System == "zookeeper" {
						res := bench.RunFollowSun(c, topo, f, fs, progress)
						if sys == "meridian" {
							if rows, err := bench.CheckProbes(c, topo); err != nil {
								rep.Failures = append(rep.Failures, fmt.Sprintf("probe matrix on %s: %v", topo.Name, err))
							} else {
								rep.Probes[topo.Name] = rows
							}
						}
						return res
					}
				case "localfirst":
					if f.Name == "Meridian (native)" {
						return bench.RunLocalFirst(c, topo, lf, progress)
					}
				default:
					fail(fmt.Errorf("unknown workload %q", w))
				}
				return nil
			}
			var flavors []bench.Flavor // the system's, in report order
			for _, f := range bench.Flavors {
				if f.System == sys {
					flavors = append(flavors, f)
				}
			}
			// Each workload (each client count of throughput) runs every
			// flavor of the system back to back, the first one alternating
			// from one to the next: a cluster gets slower as a run writes
			// to it (its log and store grow), and a flavor that ran all its
			// workloads first was measured on a faster cluster than the
			// next (5-10% on Meridian's two flavors, run V). Throughput,
			// seed004 and locks then run again in the other order, each
			// flavor's two runs merged (MergeRuns): A B B A, so that neither
			// flavor is always the one that goes second; --alternations N
			// repeats that N times (A B B A A B B A ...), for a comparison
			// of the two closer than a point's spread between runs.
			n0, unit := len(rep.Results), 0
			for _, w := range run.workloads {
				points := [][]int{nil}
				if w == "throughput" {
					points = points[:0]
					for _, n := range tp.Clients {
						points = append(points, []int{n})
					}
				}
				abba := len(flavors) > 1 && (w == "throughput" || w == "seed004" || w == "locks")
				for _, pt := range points {
					order := slices.Clone(flavors)
					if unit%2 == 1 {
						slices.Reverse(order)
					}
					unit++
					if abba {
						order = append(order, order...)
						slices.Reverse(order[len(flavors):])
						for range *alternations - 1 {
							order = append(order, order[:2*len(flavors)]...)
						}
					}
					got := map[string][][]bench.Result{}
					for _, f := range order {
						leaderBack(f)
						got[f.Name] = append(got[f.Name], runWorkload(w, f, pt))
					}
					for _, f := range flavors {
						rep.Results = append(rep.Results, bench.MergeRuns(got[f.Name]...)...)
					}
				}
			}
			// Rows in flavor order, whatever order they ran in.
			flavorIndex := func(name string) int {
				return slices.IndexFunc(bench.Flavors, func(f bench.Flavor) bool { return f.Name == name })
			}
			slices.SortStableFunc(rep.Results[n0:], func(a, b bench.Result) int { return flavorIndex(a.Flavor) - flavorIndex(b.Flavor) })
			if f := env.Finish(*keep, sys+" on "+topo.Name); f != "" {
				rep.Failures = append(rep.Failures, f)
			}
		}
	}
	rep.Duration = time.Since(start).Round(time.Second).String()
	if *part != "" {
		err = rep.WriteJSONFile(*part)
	} else {
		err = write(rep, *runs, *results, *out, *plotRef, *report, *section)
	}
	if err != nil {
		fail(err)
	}
	if len(rep.Failures) > 0 {
		fmt.Fprintln(os.Stderr, "meridian-bench: some systems or workloads could not run (see the report)")
		os.Exit(2)
	}
}

// runScale runs the scale experiment on each system in turn and prints
// its Markdown table; with out, the JSON, the plot and Meridian's heap
// profiles go there.
func runScale(systems []string, topoPath, tmp, bin, out, plotRef string, keep bool, p bench.ScaleParams) error {
	topo, err := bench.LoadTopology(topoPath)
	if err != nil {
		return err
	}
	if p.Slice <= 0 {
		p.Slice = max(1, p.Znodes/10)
	}
	start := time.Now()
	progress := func(s string) {
		fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Since(start).Round(time.Second), s)
	}
	var results []bench.ScaleResult
	for i, sys := range systems {
		env, err := bench.NewEnv(topo, tmp, uint64(i+1))
		if err != nil {
			return err
		}
		var c *bench.Cluster
		sp := p
		switch sys {
		case "meridian":
			c, err = bench.StartMeridianWith(env, bin, bench.MeridianOptions{Metrics: true, Pprof: out != "", SuperDigest: bench.AdminSuperDigest()})
			if out != "" {
				sp.Profiles = filepath.Join(out, "heap-meridian")
			}
		case "zookeeper":
			c, err = bench.StartZooKeeperWith(env, bench.ZKOptions{Heap: "2g"})
		case "etcd":
			c, err = bench.StartEtcd(env)
		default:
			err = fmt.Errorf("scale: system %q is not meridian, zookeeper or etcd", sys)
		}
		if err != nil {
			env.Close(keep)
			return err
		}
		progress(fmt.Sprintf("%s on %s: started", sys, topo.Name))
		res, err := bench.RunScale(env, c, sp, progress)
		if f := env.Finish(keep, "scale "+sys); f != "" && err == nil {
			err = fmt.Errorf("%s", f)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", sys, err)
		}
		results = append(results, res)
	}
	plotFile := ""
	if out != "" {
		if err := bench.WriteScale(results, out); err != nil {
			return err
		}
		plotFile = filepath.Join(cmp.Or(plotRef, out), "scale-fill-rate.png")
	}
	fmt.Printf("Scale: %d znodes of %d B by %d clients (ZooKeeper protocol; etcd: its own), topology %s, %s (%s)\n\n", p.Znodes, p.Value, p.Clients, topo.Name, machine(), time.Since(start).Round(time.Second))
	fmt.Print(bench.ScaleMarkdown(results, plotFile))
	return nil
}

// runKeyspacesIdle runs the idle-keyspaces experiment and writes its
// report: a new run file under runs (with its raw result as JSON under
// results), or into report (its section), or to stdout.
func runKeyspacesIdle(topoPath, tmp, bin, src string, quick bool, p bench.KeyspacesIdleParams, runs, results, report, section string) error {
	topo, err := bench.LoadTopology(topoPath)
	if err != nil {
		return err
	}
	start := time.Now()
	progress := func(s string) {
		fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Since(start).Round(time.Second), s)
	}
	env, err := bench.NewEnv(topo, tmp, 1)
	if err != nil {
		return err
	}
	res, err := bench.RunKeyspacesIdle(env, bin, p, progress)
	if f := env.Finish(p.Keep, "keyspaces-idle on "+topo.Name); f != "" && err == nil {
		err = fmt.Errorf("%s", f)
	}
	if err != nil {
		return err
	}
	mode := "full"
	if quick {
		mode = "quick"
	}
	md := fmt.Sprintf("Started %s, %s, commit %s, mode %s, took %s. Command, from `bench/`: `%s`\n\n",
		start.UTC().Format("2006-01-02 15:04 UTC"), machine(), commit(src), mode, time.Since(start).Round(time.Second),
		strings.Join(append([]string{"go run ./cmd/meridian-bench"}, os.Args[1:]...), " ")) + bench.KeyspacesIdleMarkdown(res)
	return writeRun(md, res, start, "keyspaces-idle", runs, results, report, section)
}

// writeRun writes a standalone experiment's report md: a new run file
// under runs (named by the day of start and section, or defaultSection),
// with its raw result res as JSON under results; or into report (its
// section); or to stdout.
func writeRun(md string, res any, start time.Time, defaultSection, runs, results, report, section string) error {
	if runs == "" {
		if results != "" {
			return fmt.Errorf("--results needs --runs")
		}
		if report == "" {
			fmt.Print(md)
			return nil
		}
		return writeReport(report, section, md)
	}
	if section == "" {
		section = defaultSection
	}
	name, err := runName(runs, &bench.Report{Started: start.UTC().Format("2006-01-02 15:04 UTC")}, section)
	if err != nil {
		return err
	}
	if results != "" {
		if err := os.MkdirAll(results, 0o755); err != nil {
			return err
		}
		js, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(results, name+".json"), js, 0o644); err != nil {
			return err
		}
	}
	md = fmt.Sprintf("# Benchmark run %s (generated)\n\nWritten by meridian-bench and not edited afterwards; the claims are on docs/benchmarks.md.\n\n", name) + md
	return writeNewReport(filepath.Join(runs, name+".md"), md)
}

// isSet reports whether the named flag was given on the command line.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// runSessions runs the sessions experiment on each system in turn and
// writes its report as writeRun does.
func runSessions(systems []string, topoPath, tmp, bin, src string, keep, quick bool, p bench.SessionsParams, runs, results, report, section string) error {
	topo, err := bench.LoadTopology(topoPath)
	if err != nil {
		return err
	}
	start := time.Now()
	progress := func(s string) {
		fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Since(start).Round(time.Second), s)
	}
	// Every session is a connection of this process and of a server;
	// raise the file-descriptor limit (the servers inherit it) where the
	// hard limit allows.
	want := uint64(4*p.Sessions + 8192)
	limit, err := bench.RaiseFDLimit(want)
	if err != nil || limit < want {
		progress(fmt.Sprintf("sessions: file-descriptor limit %d (wanted %d): %v", limit, want, err))
	}
	// Meridian's max_client_connections: room for every session on one
	// server, as far as the limit allows (a cap that does not fit, on two
	// client ports with the peer, HTTP and storage reserve, refuses to
	// start); its default is 10000, less where the limit is tighter.
	mc := min(p.Sessions+1024, (int(limit)-2048)/2)
	var out []bench.SessionsResult
	var failures []string
	for i, sys := range systems {
		env, err := bench.NewEnv(topo, tmp, uint64(i+1))
		if err != nil {
			return err
		}
		var c *bench.Cluster
		note := fmt.Sprintf("RLIMIT_NOFILE %d in the benchmark's process and the servers it starts (raised by it where lower)", limit)
		switch sys {
		case "meridian":
			c, err = bench.StartMeridianWith(env, bin, bench.MeridianOptions{Metrics: true, MaxClientConnections: mc})
			note += fmt.Sprintf("; max_client_connections %d on each client port, set by the benchmark (sessions + 1024, at most what the file-descriptor limit leaves room for; the default is 10000, or less under a tighter limit: 9200 under 20000), max_client_cnxns 0 (no per-address cap)", mc)
		case "zookeeper":
			c, err = bench.StartZooKeeperWith(env, bench.ZKOptions{Heap: "1g"})
			note += "; maxClientCnxns=0 (no per-address cap), -Xmx1g"
		case "etcd":
			c, err = bench.StartEtcd(env)
		default:
			err = fmt.Errorf("sessions: system %q is not meridian, zookeeper or etcd", sys)
		}
		if err != nil {
			env.Close(keep)
			failures = append(failures, fmt.Sprintf("%s: could not start: %v", sys, err))
			progress(failures[len(failures)-1])
			continue
		}
		note = c.Notes + "; " + note
		progress(fmt.Sprintf("%s on %s: started", sys, topo.Name))
		res, err := bench.RunSessions(env, c, p, progress)
		res.Notes = note
		if f := env.Finish(keep, "sessions "+sys); f != "" {
			res.Failures = append(res.Failures, f)
		}
		if err != nil {
			res.Failures = append(res.Failures, err.Error())
			progress(fmt.Sprintf("%s: %v", sys, err))
		}
		out = append(out, res)
	}
	mode := "full"
	if quick {
		mode = "quick"
	}
	md := fmt.Sprintf("Started %s, %s, commit %s, mode %s, took %s. Command, from `bench/`: `%s`\n\n",
		start.UTC().Format("2006-01-02 15:04 UTC"), machine(), commit(src), mode, time.Since(start).Round(time.Second),
		strings.Join(append([]string{"go run ./cmd/meridian-bench"}, os.Args[1:]...), " ")) + bench.SessionsMarkdown(out, topo.Name, p)
	if len(failures) > 0 {
		md += "\nCould not run:\n\n- " + strings.Join(failures, "\n- ") + "\n"
	}
	return writeRun(md, out, start, "sessions", runs, results, report, section)
}

// loadReports reads the results JSON files of separate runs.
func loadReports(paths []string) ([]*bench.Report, error) {
	var reps []*bench.Report
	for _, path := range paths {
		rep, err := bench.LoadReport(path)
		if err != nil {
			return nil, err
		}
		reps = append(reps, rep)
	}
	return reps, nil
}

// systemRun is one cluster of one system and the workloads run on it.
type systemRun struct {
	sys       string
	workloads []string
	zk        bench.ZKOptions
}

// systemRuns gives each system one cluster for all workloads, except
// ZooKeeper when followsun has somewhere to move: followsun compares with
// ZooKeeper's leader placed as far from the load as it can be, so it gets
// a cluster of its own, and every other workload runs on a cluster whose
// leader ZooKeeper's election chose, or zkLeader's region if set (before,
// that placement set every ZooKeeper figure of the topology).
func systemRuns(systems, workloads []string, topo *bench.Topology, zkLeader string) []systemRun {
	var out []systemRun
	for _, sys := range systems {
		var zk bench.ZKOptions
		if sys == "zookeeper" {
			zk.LeaderRegion = zkLeader
		}
		far := bench.FollowSunZKLeader(topo)
		if sys != "zookeeper" || !slices.Contains(workloads, "followsun") || far == "" {
			out = append(out, systemRun{sys: sys, workloads: workloads, zk: zk})
			continue
		}
		if rest := slices.DeleteFunc(slices.Clone(workloads), func(w string) bool { return w == "followsun" }); len(rest) > 0 {
			out = append(out, systemRun{sys: sys, workloads: rest, zk: zk})
		}
		out = append(out, systemRun{sys: sys, workloads: []string{"followsun"}, zk: bench.ZKOptions{LeaderRegion: far}})
	}
	return out
}

// write writes rep as a new run report under runs (with its raw results
// under results, if set), or else as output does.
func write(rep *bench.Report, runs, results, out, plotRef, report, section string) error {
	if runs == "" {
		if results != "" {
			return fmt.Errorf("--results needs --runs")
		}
		return output(rep, out, plotRef, report, section)
	}
	if out != "" || report != "" || plotRef != "" {
		return fmt.Errorf("--runs names its own files: leave out --out, --report and --plot-ref")
	}
	name, err := runName(runs, rep, section)
	if err != nil {
		return err
	}
	rep.Section = section
	dir := filepath.Join(runs, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := rep.WritePlots(dir); err != nil {
		return err
	}
	if results != "" {
		if err := os.MkdirAll(results, 0o755); err != nil {
			return err
		}
		if err := rep.WriteJSONFile(filepath.Join(results, name+".json.gz")); err != nil {
			return err
		}
	}
	md := fmt.Sprintf("# Benchmark run %s (generated)\n\nWritten by meridian-bench (`make bench-report`) and not edited afterwards; the readings are in docs/bench/notes/ and the claims on docs/benchmarks.md.\n\n", name) + rep.Markdown(name)
	return writeNewReport(filepath.Join(runs, name+".md"), md)
}

// runName names a run report DATE-LABEL: the day its first part started
// (UTC) and what it covers (main, or the paper the section's workloads
// come from), with -2, -3... if runs already has a report of that name.
func runName(runs string, rep *bench.Report, section string) (string, error) {
	started := rep.Started
	for _, p := range rep.Parts {
		if p.Started < started || started == "" {
			started = p.Started
		}
	}
	day, err := time.Parse("2006-01-02", strings.SplitN(started, " ", 2)[0])
	if err != nil {
		return "", fmt.Errorf("run start %q: %w", started, err)
	}
	base := day.Format("2006-01-02") + "-" + sectionLabel(section)
	name := base
	for i := 2; ; i++ {
		if _, err := os.Stat(filepath.Join(runs, name+".md")); os.IsNotExist(err) {
			return name, nil
		} else if err != nil {
			return "", err
		}
		name = fmt.Sprintf("%s-%d", base, i)
	}
}

// sectionLabel names a report section in file names by the paper its
// workloads follow; the section names themselves are workload names.
func sectionLabel(section string) string {
	switch section {
	case "":
		return "main"
	case "seed000-grid":
		return "cost-of-consensus-grid"
	case "seed000-contention":
		return "cost-of-consensus-contention"
	case "seed002":
		return "dida-gstore"
	}
	return section
}

// output writes rep's plots and raw JSON into out (if set) and its Markdown
// report to report (the named section of it), or to stdout.
func output(rep *bench.Report, out, plotRef, report, section string) error {
	ref := plotRef
	rep.Section = section
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := rep.WritePlots(out); err != nil {
			return err
		}
		if err := rep.WriteJSON(out, section); err != nil {
			return err
		}
		if ref == "" {
			ref = out
		}
	}
	md := rep.Markdown(ref)
	if report == "" {
		fmt.Print(md)
		return nil
	}
	return writeReport(report, section, md)
}

// commit names the checkout's commit, "-dirty" if it has uncommitted
// changes; "" if src is not a git checkout.
func commit(src string) string {
	b, err := exec.Command("git", "-C", src, "describe", "--always", "--dirty", "--abbrev=7").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func leader(c *bench.Cluster, t *bench.Topology) string {
	if c.Leader == nil {
		return "?"
	}
	if l := c.Leader(); l >= 0 {
		return fmt.Sprintf("server %d in %s", l+1, t.Servers[l])
	}
	return "unknown"
}

func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d vCPU %s, %s/%s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH)
}

// Generated report markers, for --report: a report file that has them
// keeps everything outside them (hand-written text around a generated
// part). A named section has its own pair, so runs of different workloads
// can fill different parts of one file. make bench-report uses --runs
// instead: a new file per run.
func markers(section string) (begin, end string) {
	if section == "" {
		return "<!-- meridian-bench:begin -->", "<!-- meridian-bench:end -->"
	}
	return "<!-- meridian-bench:" + section + ":begin -->", "<!-- meridian-bench:" + section + ":end -->"
}

func writeReport(path, section, md string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	beginMarker, endMarker := markers(section)
	s := string(old)
	b, e := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if b >= 0 && e > b {
		s = s[:b+len(beginMarker)] + "\n" + md + s[e:]
	} else {
		s = md
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// serverNames lists a topology's servers as region/zone (or region).
func serverNames(t *bench.Topology) []string {
	var out []string
	for i, s := range t.Servers {
		if t.HasZones() {
			s += "/" + t.Zones[i]
		}
		out = append(out, s)
	}
	return out
}

// writeNewReport writes a run report to path; a report, once written, is
// never replaced (O_EXCL: an existing file is an error).
func writeNewReport(path, md string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(md); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
