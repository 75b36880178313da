package bench

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Cost of Consensus's line plots (its figures 11 and 13–16): the average acquire
// latency of every system and strategy against one variable with the
// others fixed. Which plots a report gets follows from the cells it holds:
// a plot needs at least two values of its variable.

// lineSpec is one line plot: which results are on it, and each one's x.
type lineSpec struct {
	file, title, xLabel, caption string
	x                            func(Result) (float64, bool)
}

// s0Cell is one Cost of Consensus setting: round trips, mean hold, mean time
// between requests (ms).
type s0Cell struct{ user, server, hold, arrival float64 }

// distinctOf returns f's distinct values over the cells that match, in
// the cells' order.
func distinctOf[T comparable](cells []s0Cell, match func(s0Cell) bool, f func(s0Cell) T) []T {
	var out []T
	for _, c := range cells {
		if match(c) && !slices.Contains(out, f(c)) {
			out = append(out, f(c))
		}
	}
	return out
}

// seed000Lines lists the line plots the results allow, in a stable order.
func (r *Report) seed000Lines() []lineSpec {
	var cells []s0Cell
	for _, res := range r.Results {
		u, s, ok := s0RTTs(res.Topology)
		if res.Workload != "seed000" || !ok || res.Summary.Count == 0 {
			continue
		}
		if c := (s0Cell{u, s, res.ServiceMs, res.InterarrivalMs}); !slices.Contains(cells, c) {
			cells = append(cells, c)
		}
	}
	slices.SortFunc(cells, func(a, b s0Cell) int {
		return cmp.Or(cmp.Compare(a.user, b.user), cmp.Compare(a.server, b.server), cmp.Compare(a.hold, b.hold), cmp.Compare(a.arrival, b.arrival))
	})
	all := func(s0Cell) bool { return true }
	type load struct{ hold, arrival float64 }
	loadOf := func(c s0Cell) load { return load{c.hold, c.arrival} }
	var out []lineSpec
	// Against the server RTT, one plot per client RTT and contention
	// (figure 11: the servers' RTT adds about the same to every strategy).
	for _, l := range distinctOf(cells, all, loadOf) {
		for _, u := range distinctOf(cells, func(c s0Cell) bool { return loadOf(c) == l }, func(c s0Cell) float64 { return c.user }) {
			if len(distinctOf(cells, func(c s0Cell) bool { return loadOf(c) == l && c.user == u }, func(c s0Cell) float64 { return c.server })) < 2 {
				continue
			}
			out = append(out, lineSpec{
				file:    fmt.Sprintf("seed000-vs-server-rtt-u%g-hold%g-every%g.png", u, l.hold, l.arrival),
				title:   fmt.Sprintf("client RTT %g ms, mean hold %g ms, a request every %g ms", u, l.hold, l.arrival),
				xLabel:  "server–server RTT ms",
				caption: fmt.Sprintf("against the servers' round trip at client RTT %g ms (figure 11 of Cost of Consensus)", u),
				x: func(res Result) (float64, bool) {
					ru, rs, ok := s0RTTs(res.Topology)
					return rs, ok && ru == u && res.ServiceMs == l.hold && res.InterarrivalMs == l.arrival
				}})
		}
	}
	// Against the client RTT with no server RTT, at each arrival rate's
	// longest hold, its most contended setting (figure 15 at low
	// contention, 16 at high).
	noServer := func(c s0Cell) bool { return c.server == 0 }
	for _, l := range distinctOf(cells, noServer, loadOf) {
		longest := slices.Max(distinctOf(cells, func(c s0Cell) bool { return noServer(c) && c.arrival == l.arrival }, func(c s0Cell) float64 { return c.hold }))
		if l.hold != longest || len(distinctOf(cells, func(c s0Cell) bool { return noServer(c) && loadOf(c) == l }, func(c s0Cell) float64 { return c.user })) < 2 {
			continue
		}
		out = append(out, lineSpec{
			file:    fmt.Sprintf("seed000-vs-client-rtt-hold%g-every%g.png", l.hold, l.arrival),
			title:   fmt.Sprintf("server RTT 0 ms, mean hold %g ms, a request every %g ms", l.hold, l.arrival),
			xLabel:  "client–server RTT ms",
			caption: fmt.Sprintf("against the client's round trip, mean hold %g ms, a request every %g ms (figure 15 of Cost of Consensus is 1 and 500 ms, 16 is 150 and 200 ms)", l.hold, l.arrival),
			x: func(res Result) (float64, bool) {
				ru, rs, ok := s0RTTs(res.Topology)
				return ru, ok && rs == 0 && res.ServiceMs == l.hold && res.InterarrivalMs == l.arrival
			}})
	}
	// Against the mean hold, one plot per round trips and arrival rate
	// (figure 13 at 100 ms client RTT, 14 at none).
	type rtts struct{ user, server, arrival float64 }
	rttsOf := func(c s0Cell) rtts { return rtts{c.user, c.server, c.arrival} }
	for _, k := range distinctOf(cells, all, rttsOf) {
		if len(distinctOf(cells, func(c s0Cell) bool { return rttsOf(c) == k }, func(c s0Cell) float64 { return c.hold })) < 2 {
			continue
		}
		out = append(out, lineSpec{
			file:    fmt.Sprintf("seed000-vs-hold-u%g-s%g-every%g.png", k.user, k.server, k.arrival),
			title:   fmt.Sprintf("client RTT %g ms, server RTT %g ms, a request every %g ms", k.user, k.server, k.arrival),
			xLabel:  "mean hold ms",
			caption: fmt.Sprintf("against the contention at client RTT %g ms (figure 13 of Cost of Consensus is at 100 ms, 14 at none)", k.user),
			x: func(res Result) (float64, bool) {
				ru, rs, ok := s0RTTs(res.Topology)
				return res.ServiceMs, ok && rtts{ru, rs, res.InterarrivalMs} == k
			}})
	}
	return out
}

// writeLines draws one line per system and strategy: a strategy keeps its
// colour on both systems, ZooKeeper's lines are dashed with hollow marks,
// and the server-side lock is drawn heavier. The y axis is logarithmic (the
// strategies span three orders of magnitude) and leaves its top third to
// the legend.
func (r *Report) writeLines(dir string, spec lineSpec) error {
	type key struct{ flavor, series string }
	var keys []key
	pts := map[key]plotter.XYs{}
	var xs []float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, res := range r.Results {
		if res.Workload != "seed000" || res.Summary.Count == 0 {
			continue
		}
		x, ok := spec.x(res)
		if !ok {
			continue
		}
		k := key{res.Flavor, res.Series}
		if _, seen := pts[k]; !seen {
			keys = append(keys, k)
		}
		pts[k] = append(pts[k], plotter.XY{X: x, Y: res.Summary.Avg})
		if !slices.Contains(xs, x) {
			xs = append(xs, x)
		}
		lo, hi = math.Min(lo, res.Summary.Avg), math.Max(hi, res.Summary.Avg)
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(xs)
	p := plot.New()
	p.Title.Text = "Cost of Consensus: average acquire ms, " + spec.title
	p.X.Label.Text = spec.xLabel
	p.Y.Label.Text = "average acquire ms (log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	span := math.Log10(hi) - math.Log10(lo)
	p.Y.Min, p.Y.Max = lo/math.Pow(10, 0.05*span+0.05), hi*math.Pow(10, 0.6*span+0.3)
	p.X.Tick.Marker = valueTicks(xs)
	pad := 0.04 * (xs[len(xs)-1] - xs[0])
	p.X.Min, p.X.Max = xs[0]-pad, xs[len(xs)-1]+pad
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), -vg.Points(8)
	p.Add(plotter.NewGrid())
	strategies := []string{S0Server, S0SyncTAS, S0AsyncTAS, S0SyncQueue, S0AsyncQueue}
	solid := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{}, draw.BoxGlyph{}}
	hollow := []draw.GlyphDrawer{draw.RingGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PlusGlyph{}, draw.CrossGlyph{}}
	for _, k := range keys {
		xy := pts[k]
		l, sc, err := sortedLine(xy)
		if err != nil {
			return err
		}
		i := slices.Index(strategies, k.series)
		if i < 0 {
			i = len(strategies)
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		sc.Color = l.Color
		sc.Shape = solid[i%len(solid)]
		if k.series == S0Server {
			l.Width = vg.Points(3)
		}
		if strings.HasPrefix(k.flavor, "ZooKeeper") {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			sc.Shape = hollow[i%len(hollow)]
		}
		p.Add(l, sc)
		p.Legend.Add(fmt.Sprintf("%s: %s", k.flavor, k.series), l, sc)
	}
	return p.Save(9*vg.Inch, 6*vg.Inch, filepath.Join(dir, spec.file))
}
