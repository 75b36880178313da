package chaos

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// AvailabilityStats gathers the availability figures of many scenarios by
// fault kind. It keeps every sample (milliseconds), so the files of
// several shards of a run merge into exactly the distribution one run
// would have given.
type AvailabilityStats struct {
	ElectionTimeoutMs float64  `json:"election_timeout_ms"`
	BoundRatio        int      `json:"bound_ratio"`
	Scenarios         int      `json:"scenarios"`
	Seeds             []uint64 `json:"seeds"`
	// ToNextWriteMs: per fault kind, each fault's time to the next
	// acknowledged write. NoNextWrite counts faults followed by none
	// before the workload ended.
	ToNextWriteMs map[string][]float64 `json:"to_next_write_ms"`
	NoNextWrite   map[string]int       `json:"no_next_write,omitempty"`
	// LongestGapMs: each scenario's longest window with no acknowledged
	// write, under the kind of the fault it overlapped ("no fault").
	LongestGapMs map[string][]float64 `json:"longest_gap_ms"`
	// OverBound counts availability violations by the kind they name.
	OverBound map[string]int `json:"over_bound,omitempty"`
	// TickMoves counts the servers' raft tick changes; TickMoveScenarios
	// the scenarios with any, TickMovesWith those scenarios by each fault
	// kind they contained (to tell emulated delays from stalls).
	TickMoves         int            `json:"tick_moves"`
	TickMoveScenarios int            `json:"tick_move_scenarios"`
	TickMovesWith     map[string]int `json:"tick_moves_with,omitempty"`
}

// NewAvailabilityStats returns empty stats.
func NewAvailabilityStats() *AvailabilityStats {
	return &AvailabilityStats{BoundRatio: AvailabilityRatio, ToNextWriteMs: map[string][]float64{}, NoNextWrite: map[string]int{},
		LongestGapMs: map[string][]float64{}, OverBound: map[string]int{}, TickMovesWith: map[string]int{}}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Add takes one scenario's figures.
func (s *AvailabilityStats) Add(r *Result) {
	s.Scenarios++
	s.Seeds = append(s.Seeds, r.Seed)
	if len(r.TickMoves) > 0 {
		s.TickMoves += len(r.TickMoves)
		s.TickMoveScenarios++
		seen := map[string]bool{}
		for _, f := range r.Faults {
			if !seen[f.Kind] {
				seen[f.Kind] = true
				s.TickMovesWith[f.Kind]++
			}
		}
	}
	if r.ElectionTimeout > 0 {
		s.ElectionTimeoutMs = ms(r.ElectionTimeout)
	}
	for _, f := range r.Faults {
		if f.ToNextWrite < 0 {
			s.NoNextWrite[f.Kind]++
		} else {
			s.ToNextWriteMs[f.Kind] = append(s.ToNextWriteMs[f.Kind], ms(f.ToNextWrite))
		}
		if f.OverBound {
			s.OverBound[f.Kind]++
		}
	}
	if r.LongestGap.Len() > 0 {
		k := r.LongestGap.Fault
		if k == "" {
			k = "no fault"
		}
		s.LongestGapMs[k] = append(s.LongestGapMs[k], ms(r.LongestGap.Len()))
		if r.LongestGap.Len() > r.LongestGap.Bound {
			s.OverBound["gap:"+k]++
		}
	}
}

// Merge adds another shard's figures. Shards run with different election
// timeouts do not merge: their bounds differ.
func (s *AvailabilityStats) Merge(o *AvailabilityStats) error {
	if s.ElectionTimeoutMs != 0 && o.ElectionTimeoutMs != 0 && s.ElectionTimeoutMs != o.ElectionTimeoutMs {
		return fmt.Errorf("election timeouts differ: %vms and %vms", s.ElectionTimeoutMs, o.ElectionTimeoutMs)
	}
	if o.BoundRatio != 0 && o.BoundRatio != s.BoundRatio {
		return fmt.Errorf("bound ratios differ: %d and %d", s.BoundRatio, o.BoundRatio)
	}
	if o.ElectionTimeoutMs != 0 {
		s.ElectionTimeoutMs = o.ElectionTimeoutMs
	}
	s.Scenarios += o.Scenarios
	s.Seeds = append(s.Seeds, o.Seeds...)
	s.TickMoves += o.TickMoves
	s.TickMoveScenarios += o.TickMoveScenarios
	for k, v := range o.TickMovesWith {
		s.TickMovesWith[k] += v
	}
	for k, v := range o.ToNextWriteMs {
		s.ToNextWriteMs[k] = append(s.ToNextWriteMs[k], v...)
	}
	for k, v := range o.NoNextWrite {
		s.NoNextWrite[k] += v
	}
	for k, v := range o.LongestGapMs {
		s.LongestGapMs[k] = append(s.LongestGapMs[k], v...)
	}
	for k, v := range o.OverBound {
		s.OverBound[k] += v
	}
	return nil
}

// WriteFile writes the stats as JSON.
func (s *AvailabilityStats) WriteFile(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadAvailabilityStats reads a file written by WriteFile.
func ReadAvailabilityStats(path string) (*AvailabilityStats, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := NewAvailabilityStats()
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, m := range []*map[string]int{&s.NoNextWrite, &s.OverBound, &s.TickMovesWith} {
		if *m == nil {
			*m = map[string]int{}
		}
	}
	for _, m := range []*map[string][]float64{&s.ToNextWriteMs, &s.LongestGapMs} {
		if *m == nil {
			*m = map[string][]float64{}
		}
	}
	return s, nil
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Distribution is count, p50, p90, p99 and max of samples (milliseconds).
type Distribution struct {
	Count              int
	P50, P90, P99, Max float64
}

// Distribute summarizes samples.
func Distribute(samples []float64) Distribution {
	s := slices.Clone(samples)
	slices.Sort(s)
	d := Distribution{Count: len(s)}
	if len(s) > 0 {
		d.P50, d.P90, d.P99, d.Max = percentile(s, 50), percentile(s, 90), percentile(s, 99), s[len(s)-1]
	}
	return d
}

// Table prints the distributions, one line per fault kind.
func (s *AvailabilityStats) Table() string {
	var b strings.Builder
	et := time.Duration(s.ElectionTimeoutMs * float64(time.Millisecond))
	fmt.Fprintf(&b, "availability over %d scenarios (bound %d × election timeout %v = %v; kill-all adds its planned down time)\n",
		s.Scenarios, s.BoundRatio, et, time.Duration(s.BoundRatio)*et)
	row := func(w *tabwriter.Writer, k string, v []float64, extra ...any) {
		d := Distribute(v)
		fmt.Fprintf(w, "  %s\t%d\t%.0f\t%.0f\t%.0f\t%.0f", k, d.Count, d.P50, d.P90, d.P99, d.Max)
		for _, e := range extra {
			fmt.Fprintf(w, "\t%v", e)
		}
		fmt.Fprintln(w)
	}
	b.WriteString("fault to next acknowledged write (ms):\n")
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "  kind\tfaults\tp50\tp90\tp99\tmax\tnone\tover bound\t")
	var all []float64
	for _, k := range sortedKeys(s.ToNextWriteMs, s.NoNextWrite) {
		row(w, k, s.ToNextWriteMs[k], s.NoNextWrite[k], s.OverBound[k], "")
		all = append(all, s.ToNextWriteMs[k]...)
	}
	row(w, "all", all, "", "", "")
	w.Flush()
	b.WriteString("longest window with no acknowledged write per scenario, by the fault it overlapped (ms):\n")
	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "  kind\tscenarios\tp50\tp90\tp99\tmax\tover bound\t")
	all = nil
	for _, k := range sortedKeys(s.LongestGapMs, nil) {
		row(w, k, s.LongestGapMs[k], s.OverBound["gap:"+k], "")
		all = append(all, s.LongestGapMs[k]...)
	}
	row(w, "all", all, "", "")
	w.Flush()
	fmt.Fprintf(&b, "raft tick moves: %d, in %d of %d scenarios", s.TickMoves, s.TickMoveScenarios, s.Scenarios)
	if len(s.TickMovesWith) > 0 {
		var with []string
		for _, k := range sortedKeys(nil, s.TickMovesWith) {
			with = append(with, fmt.Sprintf("%s %d", k, s.TickMovesWith[k]))
		}
		fmt.Fprintf(&b, "; those scenarios held: %s", strings.Join(with, ", "))
	}
	b.WriteString("\n")
	return b.String()
}

func sortedKeys(a map[string][]float64, b map[string]int) []string {
	var ks []string
	for k := range a {
		ks = append(ks, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}
