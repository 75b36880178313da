package bench

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Report is everything one run measured.
type Report struct {
	Machine  string
	Started  string
	Duration string
	Mode     string // quick or full
	// Section is the report section this run fills (seed000-grid, seed002...), if any
	// (set by the writer; it names plot files).
	Section  string `json:"-"`
	Links    map[string][]LinkCheck
	Notes    map[string]string // per system: durability and emulation settings
	Results  []Result
	Failures []string // systems or workloads that could not run, and why
	// Fsync is the median time of a small write and fdatasync in the run
	// directory (for the followsun floor), 0 if not measured.
	Fsync time.Duration `json:",omitempty"`
	// Topologies run, by name.
	Topologies map[string]*Topology `json:",omitempty"`
	// Probes: Meridian's measured round-trip matrix per topology.
	Probes map[string][]ProbeRow `json:",omitempty"`
	// Commit: the Meridian commit measured (git describe of the checkout
	// the binary was built from), "" if unknown.
	Commit string `json:",omitempty"`
	// Parts: for a report merged from separate runs, each run's own
	// description (a full report takes hours, so make bench-report runs
	// one topology at a time and can resume after an interruption).
	Parts []Part `json:",omitempty"`
}

// Part describes one run merged into a report.
type Part struct {
	Started, Duration, Mode, Commit, Machine string
	Topologies                               []string
	// Rerun: for a run whose results replaced some of another part's
	// (Replace), what it reran; "" for a whole part.
	Rerun string `json:",omitempty"`
}

// Merge combines reports of separate runs (each a results JSON) into one:
// their results, link checks, topologies, probes and failures side by side,
// and each run's time, commit and machine listed in Parts.
func Merge(reps ...*Report) *Report {
	m := &Report{Links: map[string][]LinkCheck{}, Notes: map[string]string{}, Topologies: map[string]*Topology{}, Probes: map[string][]ProbeRow{}}
	// A system's note can differ between runs (its settings follow the
	// topology): each distinct note is kept with the topologies it is for.
	type noted struct {
		note  string
		topos []string
	}
	notes := map[string][]noted{}
	for _, r := range reps {
		parts := r.Parts
		if len(parts) == 0 {
			var topos []string
			for t := range r.Links {
				topos = append(topos, t)
			}
			sort.Strings(topos)
			parts = []Part{{Started: r.Started, Duration: r.Duration, Mode: r.Mode, Commit: r.Commit, Machine: r.Machine, Topologies: topos}}
		}
		m.Parts = append(m.Parts, parts...)
		m.Results = append(m.Results, r.Results...)
		m.Failures = append(m.Failures, r.Failures...)
		maps.Copy(m.Links, r.Links)
		var topos []string
		for _, p := range parts {
			topos = append(topos, p.Topologies...)
		}
		for sys, n := range r.Notes {
			i := slices.IndexFunc(notes[sys], func(x noted) bool { return x.note == n })
			if i < 0 {
				notes[sys] = append(notes[sys], noted{note: n})
				i = len(notes[sys]) - 1
			}
			notes[sys][i].topos = append(notes[sys][i].topos, topos...)
		}
		maps.Copy(m.Topologies, r.Topologies)
		maps.Copy(m.Probes, r.Probes)
		if m.Fsync == 0 {
			m.Fsync = r.Fsync
		}
	}
	for sys, ns := range notes {
		if len(ns) == 1 {
			m.Notes[sys] = ns[0].note
			continue
		}
		var each []string
		for _, n := range ns {
			slices.Sort(n.topos)
			each = append(each, fmt.Sprintf("on %s: %s", strings.Join(slices.Compact(n.topos), ", "), n.note))
		}
		m.Notes[sys] = strings.Join(each, "; ")
	}
	var total time.Duration
	for _, p := range m.Parts {
		d, _ := time.ParseDuration(p.Duration)
		total += d
	}
	m.Duration = total.String()
	if len(m.Parts) > 0 {
		m.Started, m.Mode, m.Commit, m.Machine = m.Parts[0].Started, m.Parts[0].Mode, m.Parts[0].Commit, m.Parts[0].Machine
	}
	return m
}

// Replace returns base with over's results in place of base's results of
// the same workload, topology and flavor, so that some systems of a part
// can be rerun (after a fix to how they ran) without rerunning the whole
// part. over is listed as a part of its own, saying what it reran; a
// system's note keeps base's note for the results of base that remain.
func Replace(base, over *Report) *Report {
	type key struct{ workload, topology, flavor string }
	rerun := map[key]bool{}
	var workloads []string
	for _, res := range over.Results {
		rerun[key{res.Workload, res.Topology, res.Flavor}] = true
		if w, _, _ := strings.Cut(res.Workload, "-"); !slices.Contains(workloads, w) {
			workloads = append(workloads, w)
		}
	}
	m := Merge(base)
	m.Results = slices.DeleteFunc(m.Results, func(res Result) bool { return rerun[key{res.Workload, res.Topology, res.Flavor}] })
	var systems []string
	for sys, note := range over.Notes {
		systems = append(systems, sys)
		var left []string // base's workloads of sys that remain
		for _, res := range m.Results {
			if flavorSystem(res.Flavor) == sys && !slices.Contains(left, res.Workload) {
				left = append(left, res.Workload)
			}
		}
		if prev := m.Notes[sys]; prev != "" && prev != note && len(left) > 0 {
			note = fmt.Sprintf("%s; %s from the run of %s: %s", note, strings.Join(left, ", "), m.Started, prev)
		}
		m.Notes[sys] = note
	}
	slices.Sort(systems)
	m.Results = append(m.Results, over.Results...)
	m.Failures = append(m.Failures, over.Failures...)
	rerunOf := fmt.Sprintf("%s: %s", strings.Join(systems, ", "), strings.Join(workloads, ", "))
	for _, p := range Merge(over).Parts {
		p.Rerun = rerunOf
		m.Parts = append(m.Parts, p)
	}
	return Merge(m)
}

// flavorSystem is the system a result's flavor ran on ("" if none is
// named, as in Meridian's georead series).
func flavorSystem(flavor string) string {
	for _, f := range Flavors {
		if strings.HasPrefix(flavor, f.Name) {
			return f.System
		}
	}
	return ""
}

// WriteJSON writes the report with every series' full histogram
// (non-empty buckets, microseconds) as results.json, or as
// results-SECTION.json for a run that fills one section of the report (so
// one section's run does not replace another's raw data).
func (r *Report) WriteJSON(dir, section string) error {
	name := "results.json"
	if section != "" {
		name = "results-" + section + ".json"
	}
	return r.WriteJSONFile(filepath.Join(dir, name))
}

// WriteJSONFile writes the report with every series' full histogram to
// path (LoadReport reads it back), gzip-compressed if path ends in .gz
// (the raw results kept in bench/results/).
func (r *Report) WriteJSONFile(path string) error {
	for i := range r.Results {
		if h := r.Results[i].Hist; h != nil {
			r.Results[i].Raw = rawHist(h)
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if strings.HasSuffix(path, ".gz") {
		var z bytes.Buffer
		w, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		if _, err := w.Write(b); err != nil {
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		b = z.Bytes()
	}
	return os.WriteFile(path, b, 0o644)
}

// fmtOps shows small rates with a decimal (hand-offs per second).
func fmtOps(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// fmtCPU is a CPU cost in µs per operation; "—" where not measured.
func fmtCPU(us float64) string {
	if us <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f", us)
}

func fmtMs(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// Markdown renders the report's tables.
func (r *Report) Markdown(plotDir string) string {
	var b strings.Builder
	commit := func(c string) string {
		if c == "" {
			return ""
		}
		return ", commit " + c
	}
	if len(r.Parts) > 1 {
		fmt.Fprintf(&b, "Run in %d parts, one after another on the same machine unless said:\n\n", len(r.Parts))
		for _, p := range r.Parts {
			rerun := ""
			if p.Rerun != "" {
				rerun = " (rerun of " + p.Rerun + ")"
			}
			fmt.Fprintf(&b, "- %s%s: %s, %s mode, %s%s, on %s.\n", strings.Join(p.Topologies, ", "), rerun, p.Started, p.Mode, p.Duration, commit(p.Commit), p.Machine)
		}
		b.WriteString("\n")
	} else {
		fmt.Fprintf(&b, "Run: %s, %s mode, %s%s, on %s.\n\n", r.Started, r.Mode, r.Duration, commit(r.Commit), r.Machine)
	}
	if len(r.Notes) > 0 {
		b.WriteString("Systems (3 servers each unless said, fsync on for all):\n\n")
		var keys []string
		for k := range r.Notes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "- %s: %s\n", k, r.Notes[k])
		}
		b.WriteString("\n")
	}
	var topos []string
	for t := range r.Links {
		topos = append(topos, t)
	}
	sort.Strings(topos)
	for _, t := range topos {
		if len(r.Links[t]) == 0 {
			continue // no link verified (a hand-built report)
		}
		fmt.Fprintf(&b, "Emulated round trips, topology %s (configured vs measured through a link built like the benchmark's, proxy overhead included; %d pings each):\n\n", t, r.Links[t][0].Samples)
		b.WriteString("| regions | configured ms | jitter | min | p50 | p99 | max |\n|---|---|---|---|---|---|---|\n")
		for _, l := range r.Links[t] {
			fmt.Fprintf(&b, "| %s–%s | %s | %.0f%% | %s | %s | %s | %s |\n", l.From, l.To, fmtMs(ms(l.Configured)), l.JitterPct,
				fmtMs(ms(l.Min)), fmtMs(ms(l.P50)), fmtMs(ms(l.P99)), fmtMs(ms(l.Max)))
		}
		b.WriteString("\n")
	}
	groups := r.groups()
	for _, g := range groups {
		fmt.Fprintf(&b, "### %s, topology %s\n\n", workloadTitle(g.workload), g.topology)
		if plotDir != "" {
			fmt.Fprintf(&b, "![%s %s](%s)\n\n", g.workload, g.topology, filepath.ToSlash(filepath.Join(plotDir, r.plotName(g.workload, g.topology))))
		}
		if strings.HasPrefix(g.workload, "throughput") || g.workload == "localfirst" {
			// CPU per operation where the run measured it (from df0f9cf on).
			cpu := slices.ContainsFunc(g.results, func(r Result) bool { return r.ServerCPUUs > 0 })
			head := "| system | clients | ops/s | avg | p50 | p90 | p99 | p99.9 | max | errors | leader |"
			if cpu {
				head += " server CPU µs/op | harness CPU µs/op |"
			}
			b.WriteString(head + "\n" + strings.Repeat("|---", strings.Count(head, "|")-1) + "|\n")
			for _, res := range g.results {
				s := res.Summary
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %d | %s |", res.Flavor, res.Clients, fmtOps(res.OpsPerSec),
					fmtMs(s.Avg), fmtMs(s.P50), fmtMs(s.P90), fmtMs(s.P99), fmtMs(s.P999), fmtMs(s.Max), res.Errors, res.Leader)
				if cpu {
					fmt.Fprintf(&b, " %s | %s |", fmtCPU(res.ServerCPUUs), fmtCPU(res.HarnessCPUUs))
				}
				b.WriteString("\n")
			}
			b.WriteString("\n")
			flavorRatios(&b, g.results)
			r.xyMarkdown(&b, plotDir, g.workload, g.topology)
			continue
		}
		if g.workload == "keyspaces" {
			b.WriteString("| system, region, series | region | n | avg | p50 | p99 | max | floor | p50 / floor | servers' fsync p50 in the run | floor with it | p50 / that | errors | leader |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
			for _, res := range g.results {
				s := res.Summary
				floor, ratio, fsync, runFloor, runRatio := "—", "—", "—", "—", "—"
				if res.FloorMs > 0 && (res.Series == "write" || res.Series == "lock acquire") {
					floor = fmtMs(res.FloorMs)
					if s.Count > 0 {
						ratio = fmt.Sprintf("%.2f×", s.P50/res.FloorMs)
					}
					if res.RunFloorMs > 0 {
						fsync, runFloor = fmtMs(res.FsyncMs), fmtMs(res.RunFloorMs)
						if s.Count > 0 {
							runRatio = fmt.Sprintf("%.2f×", s.P50/res.RunFloorMs)
						}
					}
				}
				fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", res.Flavor, res.Region, s.Count,
					fmtMs(s.Avg), fmtMs(s.P50), fmtMs(s.P99), fmtMs(s.Max), floor, ratio, fsync, runFloor, runRatio, res.Errors, res.Leader)
			}
			b.WriteString("\n")
			r.keyspaceFloors(&b, g)
			firstErrors(&b, g.results)
			continue
		}
		if g.workload == "seed000" {
			b.WriteString("| system | strategy | mean hold ms | mean inter-arrival ms | acquires | avg | p50 | p99 | max | errors | leader |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
			for _, res := range g.results {
				s := res.Summary
				fmt.Fprintf(&b, "| %s | %s | %g | %g | %d | %s | %s | %s | %s | %d | %s |\n", res.Flavor, res.Series, res.ServiceMs, res.InterarrivalMs, s.Count,
					fmtMs(s.Avg), fmtMs(s.P50), fmtMs(s.P99), fmtMs(s.Max), res.Errors, res.Leader)
			}
			b.WriteString("\n")
			continue
		}
		if strings.HasPrefix(g.workload, "seed002") {
			b.WriteString("| system | clients | writes | completion s | writes/s | avg | p50 | p99 | max | errors | leader |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
			for _, res := range g.results {
				s := res.Summary
				fmt.Fprintf(&b, "| %s | %d | %d | %.2f | %s | %s | %s | %s | %s | %d | %s |\n", res.Flavor, res.Clients, s.Count, res.TotalSec, fmtOps(res.OpsPerSec),
					fmtMs(s.Avg), fmtMs(s.P50), fmtMs(s.P99), fmtMs(s.Max), res.Errors, res.Leader)
			}
			b.WriteString("\n")
			firstErrors(&b, g.results)
			r.xyMarkdown(&b, plotDir, g.workload, g.topology)
			continue
		}
		if g.workload == "locks" {
			b.WriteString("| system | clients | keys | acquires/s | avg | p50 | p90 | p99 | p99.9 | max | n | errors | leader |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		} else {
			b.WriteString("| system | clients | keys | avg | p50 | p90 | p99 | p99.9 | max | n | errors | leader |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		}
		for _, res := range g.results {
			keys, rate := "—", ""
			if res.Workload == "locks" {
				keys = map[bool]string{false: "different", true: "same"}[res.Same]
				rate = " " + fmtOps(res.OpsPerSec) + " |"
			}
			s := res.Summary
			fmt.Fprintf(&b, "| %s | %d | %s |%s %s | %s | %s | %s | %s | %s | %d | %d | %s |\n", res.Flavor, res.Clients, keys, rate,
				fmtMs(s.Avg), fmtMs(s.P50), fmtMs(s.P90), fmtMs(s.P99), fmtMs(s.P999), fmtMs(s.Max), s.Count, res.Errors, res.Leader)
		}
		b.WriteString("\n")
		if g.workload == "locks" {
			lockTargets(&b, g)
		}
		if g.workload == "seed004-mixed-op" {
			seed004Published(&b, g)
		}
		if g.workload == "followsun" {
			r.followSunTargets(&b, g)
			if rows := r.Probes[g.topology]; len(rows) > 0 {
				probeMarkdown(&b, g.topology, rows)
			}
		}
	}
	if plotDir != "" {
		for _, h := range r.seed000Heatmaps() {
			fmt.Fprintf(&b, "Figure 10 of Cost of Consensus here (%s × %s): every system and strategy's average acquire latency, one colour scale (logarithmic) for all tiles.\n\n![%s](%s)\n\n",
				h.xLabel, h.yLabel, strings.TrimSuffix(h.file, ".png"), filepath.ToSlash(filepath.Join(plotDir, h.file)))
		}
		for _, l := range r.seed000Lines() {
			fmt.Fprintf(&b, "Every system and strategy's average acquire latency %s.\n\n![%s](%s)\n\n",
				l.caption, strings.TrimSuffix(l.file, ".png"), filepath.ToSlash(filepath.Join(plotDir, l.file)))
		}
	}
	r.seed000Summary(&b)
	r.seed002Summary(&b)
	r.xyMarkdown(&b, plotDir, "seed002-same", "")
	if len(r.Failures) > 0 {
		b.WriteString("Could not run:\n\n")
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// seed000Summary tests the claim of Cost of Consensus cell by cell: at every topology and
// contention level, Meridian's server-side lock against the best of the
// four ZooKeeper-API strategies (on ZooKeeper and on Meridian's port), by
// average acquire latency.
func (r *Report) seed000Summary(b *strings.Builder) {
	type cell struct {
		topo     string
		svc, arr float64
	}
	type best struct {
		avg  float64
		name string
		se   float64 // standard error of avg, ms
		res  Result
	}
	var cells []cell
	server, onZK, onMer := map[cell]best{}, map[cell]best{}, map[cell]best{}
	for _, res := range r.Results {
		if res.Workload != "seed000" || res.Summary.Count == 0 {
			continue
		}
		k := cell{res.Topology, res.ServiceMs, res.InterarrivalMs}
		if !slices.Contains(cells, k) {
			cells = append(cells, k)
		}
		raw := res.Raw
		if raw == nil && res.Hist != nil {
			raw = rawHist(res.Hist)
		}
		avg, se := res.Summary.Avg, stdErrMs(raw)
		switch {
		case res.Series == "Meridian server-side lock":
			server[k] = best{avg, res.Series, se, res}
		case res.Flavor == "ZooKeeper 3.8":
			if bz, ok := onZK[k]; !ok || avg < bz.avg {
				onZK[k] = best{avg, res.Series, se, res}
			}
		default:
			if bm, ok := onMer[k]; !ok || avg < bm.avg {
				onMer[k] = best{avg, res.Series, se, res}
			}
		}
	}
	if len(cells) == 0 {
		return
	}
	b.WriteString("### Cost of Consensus: Meridian's server-side lock against the best ZooKeeper-API strategy, cell by cell (average acquire ms)\n\n")
	b.WriteString("| topology | mean hold ms | inter-arrival ms | server-side lock | best on ZooKeeper 3.8 | best on Meridian's ZooKeeper port | server-side lock at least as fast? |\n|---|---|---|---|---|---|---|\n")
	var queued []cell // cells where requests queued: the hand-off table's rows
	paired := false   // some verdict compared waits request by request
	fastest := map[cell]best{}
	for _, k := range cells {
		sb, sok := server[k]
		sv := sb.avg
		bz, zok := onZK[k]
		bm, mok := onMer[k]
		verdict := "—"
		if sok && (zok || mok) {
			lo := bz
			if !zok || (mok && bm.avg < lo.avg) {
				lo = bm
			}
			fastest[k] = lo
			if sb.res.Handoffs >= 10 {
				queued = append(queued, k)
			}
			verdict = fmt.Sprintf("no (%.2f×)", sv/lo.avg)
			if sv <= lo.avg {
				verdict = fmt.Sprintf("yes (%.2f×)", sv/lo.avg)
			}
			// Averages of a few dozen acquires: say when the difference
			// is within two standard errors, i.e. not resolved by the run.
			// Series that recorded every request's wait on the same
			// requests are compared request by request (paired), else
			// as independent samples.
			d, se := sv-lo.avg, math.Hypot(sb.se, lo.se)
			if pd, pse, ok := pairedDiff(sb.res.Waits, lo.res.Waits); ok {
				d, se = pd, pse
				paired = true
			}
			if se > 0 && math.Abs(d) < 2*se {
				verdict += fmt.Sprintf(", within noise (Δ %+.2f ± %.2f ms)", d, 2*se)
			}
		}
		show := func(ok bool, x best) string {
			if !ok {
				return "—"
			}
			return fmt.Sprintf("%s (%s)", fmtMs(x.avg), x.name)
		}
		sval := "—"
		if sok {
			sval = fmtMs(sv)
		}
		fmt.Fprintf(b, "| %s | %g | %g | %s | %s | %s | %s |\n", k.topo, k.svc, k.arr, sval, show(zok, bz), show(mok, bm), verdict)
	}
	b.WriteString("\n\"Within noise\": the two averages differ by less than two standard errors of their difference (± shown), so this run does not resolve which is faster.")
	if paired {
		b.WriteString(" Where both series recorded every request's wait, on the same requests, the difference and its error are those of the requests' paired differences.")
	}
	b.WriteString("\n\n")
	if len(queued) == 0 {
		return
	}
	// Once requests queue, a strategy's average is decided by how fast the
	// lock passes from holder to holder, and by whom it passes to.
	b.WriteString("#### Cost of Consensus: hand-offs where requests queued (the server-side lock against the fastest strategy of the cell)\n\n")
	b.WriteString("A hand-off is a grant to a request already waiting when the previous holder began to release; its time runs from that release to the grant, as the clients saw them. \"On the leader\": the share of all grants that went to sessions on the leading server. Grants seen before the previous holder released (a broken lock) would be counted as overlaps.\n\n")
	b.WriteString("| topology | mean hold ms | server-side lock: hand-offs, mean ms, on the leader | fastest strategy | its hand-offs, mean ms, on the leader | overlaps |\n|---|---|---|---|---|---|\n")
	ho := func(r Result) string {
		return fmt.Sprintf("%d, %s, %.0f%%", r.Handoffs, fmtMs(r.HandoffMs), 100*r.LeaderGrants)
	}
	for _, k := range queued {
		sr, lo := server[k].res, fastest[k]
		fmt.Fprintf(b, "| %s | %g | %s | %s on %s | %s | %d |\n", k.topo, k.svc, ho(sr), lo.name, lo.res.Flavor, ho(lo.res), sr.Overlaps+lo.res.Overlaps)
	}
	b.WriteString("\n")
}

// pairedDiff compares two series run on the same requests, request by
// request: the mean of a's wait minus b's (ms) over the requests both
// were granted, and its standard error. ok is false unless both recorded
// the same number of requests and at least 2 were granted in both.
func pairedDiff(a, b []int64) (mean, se float64, ok bool) {
	if len(a) == 0 || len(a) != len(b) {
		return 0, 0, false
	}
	var n, sum, sq float64
	for i := range a {
		if a[i] < 0 || b[i] < 0 {
			continue
		}
		d := float64(a[i]-b[i]) / 1000
		n, sum, sq = n+1, sum+d, sq+d*d
	}
	if n < 2 {
		return 0, 0, false
	}
	mean, se = meanStdErr(n, sum, sq)
	return mean, se, true
}

// flavorRatios compares Meridian's native API with its ZooKeeper port run
// by run at every throughput point both ran several times (--alternations):
// the k-th runs of the two ran next to each other (A B B A), so their
// ratio is free of what drifts over a run, and the spread of those ratios
// says how far the point's ratio can be trusted. Printed: the geometric
// mean of the runs' ratios and its 95% interval (Student's t on the
// logarithms).
func flavorRatios(b *strings.Builder, results []Result) {
	native, port := Flavors[0].Name, Flavors[1].Name
	var parts []string
	for _, n := range results {
		if n.Flavor != native {
			continue
		}
		i := slices.IndexFunc(results, func(p Result) bool { return p.Flavor == port && p.Clients == n.Clients })
		if i < 0 {
			continue
		}
		if g, lo, hi, ok := pairedRatio(n.RunOps, results[i].RunOps); ok {
			parts = append(parts, fmt.Sprintf("%d clients %.2f× (%.2f–%.2f, %d pairs)", n.Clients, g, lo, hi, len(n.RunOps)))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(b, "%s against %s, run by run (the geometric mean of the paired runs' ratios of ops/s, with its 95%% interval): %s.\n\n",
			native, port, strings.Join(parts, "; "))
	}
}

// pairedRatio is the geometric mean of a[k]/b[k] with its 95% interval;
// ok is false unless a and b have the same length, at least 2, and every
// rate is positive.
func pairedRatio(a, b []float64) (g, lo, hi float64, ok bool) {
	if len(a) < 2 || len(a) != len(b) {
		return 0, 0, 0, false
	}
	var sum, sq float64
	for k := range a {
		if a[k] <= 0 || b[k] <= 0 {
			return 0, 0, 0, false
		}
		d := math.Log(a[k] / b[k])
		sum, sq = sum+d, sq+d*d
	}
	n := float64(len(a))
	mean, se := meanStdErr(n, sum, sq)
	t := studentT975(len(a) - 1)
	return math.Exp(mean), math.Exp(mean - t*se), math.Exp(mean + t*se), true
}

// studentT975 is the 97.5th percentile of Student's t with df degrees of
// freedom (df >= 1): the half-width of a two-sided 95% interval in
// standard errors.
func studentT975(df int) float64 {
	table := [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df <= len(table) {
		return table[df-1]
	}
	return 1.96 + 2.4/float64(df) // within 0.002 above 30
}

// stdErrMs is the standard error of the mean (ms) of a raw histogram of
// µs values (each bucket counted at its value); 0 with fewer than 2 samples.
func stdErrMs(raw [][2]int64) float64 {
	var n, sum, sq float64
	for _, b := range raw {
		v, c := float64(b[0])/1000, float64(b[1])
		n, sum, sq = n+c, sum+c*v, sq+c*v*v
	}
	if n < 2 {
		return 0
	}
	_, se := meanStdErr(n, sum, sq)
	return se
}

// meanStdErr is the mean of n samples from their sum and sum of squares,
// and its standard error (sample variance, n-1); n >= 2.
func meanStdErr(n, sum, sq float64) (mean, se float64) {
	mean = sum / n
	return mean, math.Sqrt(math.Max(0, sq/n-mean*mean) * n / (n - 1) / n)
}

// firstErrors lists the first error of every series that had errors.
func firstErrors(b *strings.Builder, results []Result) {
	n := 0
	for _, res := range results {
		if res.FirstError == "" {
			continue
		}
		if n == 0 {
			b.WriteString("First error of each series with errors:\n\n")
		}
		n++
		fmt.Fprintf(b, "- %s, %d clients: %s\n", res.Flavor, res.Clients, res.FirstError)
	}
	if n > 0 {
		b.WriteString("\n")
	}
}

// seed002Summary is figure 3 of DIDA-GSTORE as a table: the completion time of
// 10 clients x 25 writes to one object, per system, against the round trip.
func (r *Report) seed002Summary(b *strings.Builder) {
	type cell struct {
		rtt  time.Duration
		flav string
	}
	got := map[cell]float64{}
	var rtts []time.Duration
	var flavs []string
	for _, res := range r.Results {
		if res.Workload != "seed002-same" {
			continue
		}
		t := r.topology(res.Topology)
		if t == nil {
			continue
		}
		rtt, ok := t.UniformRTT()
		if !ok {
			continue
		}
		if !slices.Contains(rtts, rtt) {
			rtts = append(rtts, rtt)
		}
		if !slices.Contains(flavs, res.Flavor) {
			flavs = append(flavs, res.Flavor)
		}
		got[cell{rtt, res.Flavor}] = res.TotalSec
	}
	if len(rtts) < 2 {
		return
	}
	slices.Sort(rtts)
	b.WriteString("### DIDA-GSTORE figure 3: completion time (s) of the writes to one shared object (10 clients; 25 writes each in full mode), against the round trip between every pair of hosts\n\n| system |")
	for _, d := range rtts {
		fmt.Fprintf(b, " %v |", d)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(rtts)) + "\n")
	for _, f := range flavs {
		fmt.Fprintf(b, "| %s |", f)
		for _, d := range rtts {
			if v, ok := got[cell{d, f}]; ok {
				fmt.Fprintf(b, " %.2f |", v)
			} else {
				b.WriteString(" — |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func workloadTitle(w string) string {
	return map[string]string{
		"locks":              "Key-value stores for locking: acquire latency (ms)",
		"seed004-read":       "Tail Latency in ZooKeeper, task 1: one client reads a random 1000 B key (ms)",
		"seed004-write":      "Tail Latency in ZooKeeper, task 2: one client writes a random key, 1000 B (ms)",
		"seed004-mixed-op":   "Tail Latency in ZooKeeper, task 3: mixed conflicting task, per operation of client 0 (ms)",
		"seed004-mixed-pair": "Tail Latency in ZooKeeper, task 3: mixed conflicting task, per read+write pair of client 0 (ms)",
		"throughput-write":   "Throughput: 1000 B writes to random keys, closed-loop clients (latency ms)",
		"throughput-read":    "Throughput: reads of random keys, closed-loop clients (latency ms)",
		"keyspaces":          "Regional keyspaces: a client in every region writes 100 B and takes a lock in its own region's keyspace, all at once, then reads every keyspace; against one raft group (ms; floor: client↔server and intra-region quorum round trips plus one fsync)",
		"followsun":          "Follow the sun: 100 B writes while the write load moves between regions with a voter (ms)",
		"localfirst":         "Local-first lock hand-off vs FIFO: 2 clients per client region on one lock, hold 2 ms (acquire wait ms; ops/s = hand-offs/s)",
		"seed000":            "Cost of Consensus: lock strategies, random arrivals, time from a request's arrival to its acquisition (ms)",
		"seed002-same":       "DIDA-GSTORE: clients each writing one shared 100 B object (write latency ms; completion = first start to last write)",
		"seed002-random":     "DIDA-GSTORE: closed-loop clients writing random objects among 100, 100 B (latency ms; writes/s)",
		"georead":            "Far-region reads: one client in a region without a voter reads a 100 B key; Meridian with a learner there (ms)",
	}[w]
}

type group struct {
	workload, topology string
	results            []Result
}

func (r *Report) groups() []group {
	var out []group
	idx := map[[2]string]int{}
	for _, res := range r.Results {
		k := [2]string{res.Workload, res.Topology}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, group{workload: res.Workload, topology: res.Topology})
		}
		out[i].results = append(out[i].results, res)
	}
	return out
}

func maxHold(rs []Result) float64 {
	m := 0.0
	for _, r := range rs {
		m = max(m, r.ServiceMs)
	}
	return m
}

// plotName is the file of one workload's plot on one topology. In a named
// report section whose name the workload does not start with (Cost of Consensus's
// grid and contention sweep share workload and topologies), the section
// names the file, so sections do not overwrite each other's plots.
func (r *Report) plotName(workload, topology string) string {
	if r.Section != "" && !strings.HasPrefix(workload, r.Section) {
		return fmt.Sprintf("%s-%s.png", r.Section, topology)
	}
	return fmt.Sprintf("%s-%s.png", workload, topology)
}

var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
}

// WritePlots draws one latency CDF per workload and topology (one line per
// system and client count) into dir.
func (r *Report) WritePlots(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, g := range r.groups() {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s — %s", workloadTitle(g.workload), g.topology)
		p.X.Label.Text = "latency (ms)"
		p.Y.Label.Text = "fraction of operations"
		p.Legend.Top = false
		p.Legend.Left = false
		p.Add(plotter.NewGrid())
		n, most := 0, 0
		for _, res := range g.results {
			most = max(most, res.Clients)
		}
		for _, res := range g.results {
			if res.Hist == nil || res.Hist.TotalCount() == 0 {
				continue
			}
			// Throughput: the largest client count only.
			if (strings.HasPrefix(res.Workload, "throughput") || res.Workload == "seed002-random") && res.Clients != most {
				continue
			}
			// Cost of Consensus: the most contended setting only.
			if res.Workload == "seed000" && res.ServiceMs != maxHold(g.results) {
				continue
			}
			// Locks: one line per flavor at the largest contended setting
			// and at one client, to keep the plot readable.
			if res.Workload == "locks" && !(res.Clients == 1 || res.Same) {
				continue
			}
			// A step for every non-empty bucket: the exact empirical CDF
			// (at the histogram's 3 significant digits).
			var pts plotter.XYs
			var cum int64
			total := float64(res.Hist.TotalCount())
			for _, br := range res.Hist.Distribution() {
				if br.Count == 0 {
					continue
				}
				x := float64(br.To) / 1000
				pts = append(pts, plotter.XY{X: x, Y: float64(cum) / total})
				cum += br.Count
				pts = append(pts, plotter.XY{X: x, Y: float64(cum) / total})
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = palette[n%len(palette)]
			l.Width = vg.Points(1.5)
			label := res.Flavor
			if strings.HasPrefix(res.Workload, "throughput") {
				label = fmt.Sprintf("%s, %d clients", res.Flavor, res.Clients)
			}
			if res.Workload == "locks" {
				label = fmt.Sprintf("%s, %d on %s", res.Flavor, res.Clients, map[bool]string{false: "own lock", true: "one lock"}[res.Same])
			}
			if res.Workload == "seed000" {
				label = fmt.Sprintf("%s: %s, hold %g ms", res.Flavor, res.Series, res.ServiceMs)
			}
			if strings.HasPrefix(res.Workload, "seed002-random") {
				label = fmt.Sprintf("%s, %d clients", res.Flavor, res.Clients)
			}
			p.Add(l)
			p.Legend.Add(label, l)
			n++
		}
		if n == 0 {
			continue
		}
		if err := p.Save(9*vg.Inch, 5*vg.Inch, filepath.Join(dir, r.plotName(g.workload, g.topology))); err != nil {
			return err
		}
	}
	for _, h := range r.seed000Heatmaps() {
		if err := r.writeHeatmap(dir, h); err != nil {
			return err
		}
	}
	for _, l := range r.seed000Lines() {
		if err := r.writeLines(dir, l); err != nil {
			return err
		}
	}
	for _, p := range r.xyPlots() {
		if err := r.writeXY(dir, p); err != nil {
			return err
		}
	}
	return nil
}

// LoadReport reads a results JSON written by WriteJSON or WriteJSONFile
// (gzip-compressed if its name ends in .gz) and rebuilds every series'
// histogram from its raw buckets (to redraw plots).
func LoadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if b, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range r.Results {
		h := newHist()
		for _, vc := range r.Results[i].Raw {
			if err := h.RecordValues(vc[0], vc[1]); err != nil {
				return nil, fmt.Errorf("%s: result %d: %w", path, i, err)
			}
		}
		r.Results[i].Hist = h
	}
	return &r, nil
}

// followSunTargets writes the placement target check for one topology: for each
// shifted phase, Meridian's lock acquire after the leader arrived against
// the physical floor (within 1.1×) and against ZooKeeper's recipe from the
// same region with ZooKeeper's leader in the farthest region (3× faster).
func (r *Report) followSunTargets(b *strings.Builder, g group) {
	var zk []Result
	for _, res := range g.results {
		if res.Series == "fixed-lock" {
			zk = append(zk, res)
		}
	}
	header := false
	for _, res := range g.results {
		if res.Series != "lock-after" || res.Summary.Count == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(b, "Placement targets, topology %s: floor = client↔server + round trip to the nearest other voter (both p50 through the emulated links, above) + one fsync (p50 %s ms, measured in the run directory).\n\n", g.topology, fmtMs(ms(r.Fsync)))
			b.WriteString("| phase | leader arrived after | Meridian lock acquire avg (p99) | floor | Meridian / floor | ZooKeeper recipe avg (p99), its leader | ZooKeeper / Meridian |\n|---|---|---|---|---|---|---|\n")
			header = true
		}
		floor, ok := followSunFloor(r.topology(g.topology), r.Links[g.topology], res.Region, r.Fsync)
		fl, ratio := "—", "—"
		if ok && r.Fsync > 0 {
			fl, ratio = fmtMs(ms(floor)), fmt.Sprintf("%.2f×", res.Summary.Avg/ms(floor))
		}
		zkCell, zkRatio := "not run", "—"
		for _, z := range zk {
			if z.Region == res.Region && z.Summary.Count > 0 {
				zkCell = fmt.Sprintf("%s (%s), leader %s", fmtMs(z.Summary.Avg), fmtMs(z.Summary.P99), z.Leader)
				zkRatio = fmt.Sprintf("%.1f×", z.Summary.Avg/res.Summary.Avg)
			}
		}
		phase, _, _ := strings.Cut(strings.TrimPrefix(res.Flavor, "Meridian (native), "), ": ")
		fmt.Fprintf(b, "| %s | %.1f s | %s (%s) | %s | %s | %s | %s |\n", phase, res.ConvergedSec,
			fmtMs(res.Summary.Avg), fmtMs(res.Summary.P99), fl, ratio, zkCell, zkRatio)
	}
	if header {
		b.WriteString("\n")
	}
}

// topology returns a topology the run used, by name (nil: not recorded).
func (r *Report) topology(name string) *Topology { return r.Topologies[name] }

// seed004Figure7 is the published mixed-task figures (its figure 7,
// ms per operation) by the shipped topology that
// reproduces each setting: ZooKeeper 3.4, and Safari, which skips consensus
// and which the seed calls a lower bound for any ZooKeeper-like system.
var seed004Figure7 = map[string]struct {
	setting           string
	zookeeper, safari [3]float64 // avg, p99, p99.9
}{
	"loopback": {"one machine", [3]float64{13.414, 26.090, 33.073}, [3]float64{0.307, 0.441, 1.341}},
	"2dc":      {"2 DCs: 2 servers west, 1 east, client west", [3]float64{148.230, 272.393, 279.877}, [3]float64{0.728, 1.052, 1.439}},
	"3dc":      {"3 DCs: N. California, Oregon, Virginia, client in N. California", [3]float64{76.873, 93.481, 94.716}, [3]float64{45.981, 46.391, 47.748}},
}

// seed004Published puts the published mixed-task figures for the
// group's setting beside this run's, each as a ratio to the ZooKeeper of
// its own run: the seed's hardware and ZooKeeper version differ from
// ours, so the ratios compare, the absolute figures do not.
func seed004Published(b *strings.Builder, g group) {
	pub, ok := seed004Figure7[g.topology]
	if !ok {
		return
	}
	var zk *Result
	for i, res := range g.results {
		if strings.HasPrefix(res.Flavor, "ZooKeeper") && res.Summary.Count > 0 {
			zk = &g.results[i]
		}
	}
	ratio := func(avg, zkAvg float64) string {
		switch r := avg / zkAvg; {
		case zkAvg <= 0:
			return "—"
		case r < 0.1:
			return fmt.Sprintf("%.3f×", r)
		default:
			return fmt.Sprintf("%.2f×", r)
		}
	}
	fmt.Fprintf(b, "Beside the published figures of Tail Latency in ZooKeeper for this setting (its figure 7, %s; ms per operation). Its hardware and ZooKeeper version are not ours: compare each row's ratio to the ZooKeeper of its own run.\n\n", pub.setting)
	b.WriteString("| system | source | avg | p99 | p99.9 | avg ÷ ZooKeeper's avg |\n|---|---|---|---|---|---|\n")
	for _, row := range []struct {
		name string
		f    [3]float64
	}{{"ZooKeeper 3.4", pub.zookeeper}, {"Safari (no consensus)", pub.safari}} {
		fmt.Fprintf(b, "| %s | Tail Latency in ZooKeeper (published) | %s | %s | %s | %s |\n", row.name, fmtMs(row.f[0]), fmtMs(row.f[1]), fmtMs(row.f[2]), ratio(row.f[0], pub.zookeeper[0]))
	}
	for _, res := range g.results {
		if res.Summary.Count == 0 {
			continue
		}
		zkAvg := 0.0
		if zk != nil {
			zkAvg = zk.Summary.Avg
		}
		s := res.Summary
		fmt.Fprintf(b, "| %s | this run | %s | %s | %s | %s |\n", res.Flavor, fmtMs(s.Avg), fmtMs(s.P99), fmtMs(s.P999), ratio(s.Avg, zkAvg))
	}
	b.WriteString("\n")
}

// lockTargets compares Meridian's native lock with ZooKeeper's recipe and
// etcd's mutex in one topology against the lock targets: uncontended p99
// at most 1/5 of ZooKeeper's and 1/3 of etcd's, contended hand-offs per
// second at least 3x ZooKeeper's.
func lockTargets(b *strings.Builder, g group) {
	find := func(prefix string, clients int, same bool) (Result, bool) {
		for _, res := range g.results {
			if strings.HasPrefix(res.Flavor, prefix) && res.Clients == clients && res.Same == same && res.Summary.Count > 0 {
				return res, true
			}
		}
		return Result{}, false
	}
	ratio := func(num, den float64, ok bool) string {
		if !ok || den <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f×", num/den)
	}
	header := false
	for _, row := range []struct {
		clients int
		same    bool
	}{{1, false}, {3, false}, {5, false}, {3, true}, {5, true}} {
		m, ok := find("Meridian (native)", row.clients, row.same)
		if !ok {
			continue
		}
		z, zok := find("ZooKeeper", row.clients, row.same)
		e, eok := find("etcd", row.clients, row.same)
		if !zok && !eok {
			continue
		}
		if !header {
			fmt.Fprintf(b, "Lock targets, topology %s: uncontended (own locks) p99 ms, ZooKeeper's at least 5× and etcd's at least 3× Meridian's; contended (one lock) hand-offs/s, Meridian's at least 3× ZooKeeper's.\n\n", g.topology)
			b.WriteString("| clients, locks | measure | Meridian (native) | ZooKeeper recipe | etcd mutex | vs ZooKeeper (target) | vs etcd (target) |\n|---|---|---|---|---|---|---|\n")
			header = true
		}
		cell := func(r Result, ok, rate bool) string {
			switch {
			case !ok:
				return "not run"
			case rate:
				return fmtOps(r.OpsPerSec)
			}
			return fmtMs(r.Summary.P99)
		}
		if !row.same {
			fmt.Fprintf(b, "| %d, own | p99 ms | %s | %s | %s | ZooKeeper's is %s (≥5×) | etcd's is %s (≥3×) |\n", row.clients, cell(m, true, false), cell(z, zok, false), cell(e, eok, false),
				ratio(z.Summary.P99, m.Summary.P99, zok), ratio(e.Summary.P99, m.Summary.P99, eok))
		} else {
			fmt.Fprintf(b, "| %d, one | hand-offs/s | %s | %s | %s | Meridian's is %s (≥3×) | Meridian's is %s |\n", row.clients, cell(m, true, true), cell(z, zok, true), cell(e, eok, true),
				ratio(m.OpsPerSec, z.OpsPerSec, zok), ratio(m.OpsPerSec, e.OpsPerSec, eok))
		}
	}
	if header {
		b.WriteString("\n")
	}
}

// keyspaceFloors lists each region's floor and its parts, as measured in
// the run, with each variant's writes and lock acquires against it.
func (r *Report) keyspaceFloors(b *strings.Builder, g group) {
	links := r.Links[g.topology]
	var regions []string
	for _, res := range g.results {
		if !slices.Contains(regions, res.Region) {
			regions = append(regions, res.Region)
		}
	}
	regionSurvival := func(res Result) bool { return strings.HasPrefix(res.Flavor, KeyspacesVariants[4]+",") }
	ratios := func(region string, floor time.Duration, which func(Result) bool) {
		for _, res := range g.results {
			if res.Region == region && which(res) && (res.Series == "write" || res.Series == "lock acquire") && res.Summary.Count > 0 {
				fmt.Fprintf(b, " %s %.2f×;", strings.TrimSuffix(res.Flavor, ", client in "+region+", "+res.Series)+" "+res.Series, res.Summary.P50/ms(floor))
			}
		}
	}
	for _, region := range regions {
		if floor, nearest, near, ok := keyspaceRegionFloor(links, region, r.Fsync); ok && slices.ContainsFunc(g.results, regionSurvival) {
			var local time.Duration
			for _, l := range links {
				if l.From == region && l.To == region {
					local = l.P50
				}
			}
			fmt.Fprintf(b, "- %s region-survival floor %s ms = client↔server %s + nearest other region (%s) %s + fsync %s (p50s);", region,
				fmtMs(ms(floor)), fmtMs(ms(local)), nearest, fmtMs(ms(near)), fmtMs(ms(r.Fsync)))
			ratios(region, floor, regionSurvival)
			b.WriteString(" target: within 1.1× at p50.\n")
		}
		floor, ok := keyspaceFloor(links, region, r.Fsync)
		if !ok {
			continue
		}
		var local, zone time.Duration
		for _, l := range links {
			if l.From == region && l.To == region {
				local = l.P50
			} else if strings.HasPrefix(l.From, region+"/") && strings.HasPrefix(l.To, region+"/") {
				zone = l.P50
			}
		}
		fmt.Fprintf(b, "- %s floor %s ms = client↔server %s + two zones %s + fsync %s (p50s);", region, fmtMs(ms(floor)),
			fmtMs(ms(local)), fmtMs(ms(zone)), fmtMs(ms(r.Fsync)))
		ratios(region, floor, func(res Result) bool { return !regionSurvival(res) })
		b.WriteString(" target: writes and lock acquires within 1.3× at p50.\n")
	}
	b.WriteString("\n")
}
