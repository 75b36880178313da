package bench

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Line plots of one measure against one variable, a line per system:
// DIDA-GSTORE's figures 3–5 and the throughput sweep's throughput against
// clients. A plot needs at least two values of its variable.

// xyPlot is one such plot. It sits in the report under the table of the
// group named by workload and topology (or, with topology "", under the
// workload's summary).
type xyPlot struct {
	workload, topology          string
	file, title, xLabel, yLabel string
	caption                     string
	logX, logY                  bool
	point                       func(Result) (x, y float64, ok bool)
}

// xyPlots lists the plots the results allow, in the order of r.groups.
func (r *Report) xyPlots() []xyPlot {
	var out []xyPlot
	for _, g := range r.groups() {
		switch {
		case strings.HasPrefix(g.workload, "throughput"):
			what := strings.TrimPrefix(g.workload, "throughput-") + "s"
			out = append(out, xyPlot{workload: g.workload, topology: g.topology,
				file:   fmt.Sprintf("%s-vs-clients-%s.png", g.workload, g.topology),
				title:  fmt.Sprintf("%s per second against closed-loop clients, topology %s", what, g.topology),
				xLabel: "clients (log)", yLabel: what + "/s (log)", logX: true, logY: true,
				caption: fmt.Sprintf("Completed %s per second against the number of clients, topology %s.", what, g.topology),
				point:   byClients(g.workload, g.topology, func(res Result) float64 { return res.OpsPerSec })})
		case g.workload == "seed002-random":
			out = append(out,
				xyPlot{workload: g.workload, topology: g.topology,
					file:   fmt.Sprintf("seed002-latency-vs-clients-%s.png", g.topology),
					title:  fmt.Sprintf("average write latency against clients, topology %s", g.topology),
					xLabel: "clients", yLabel: "average write ms",
					caption: "Average write latency against the number of clients (figure 4 of DIDA-GSTORE).",
					point:   byClients(g.workload, g.topology, func(res Result) float64 { return res.Summary.Avg })},
				xyPlot{workload: g.workload, topology: g.topology,
					file:   fmt.Sprintf("seed002-throughput-vs-clients-%s.png", g.topology),
					title:  fmt.Sprintf("writes per second against clients, topology %s", g.topology),
					xLabel: "clients", yLabel: "writes/s (log)", logY: true,
					caption: "Writes per second against the number of clients (figure 5 of DIDA-GSTORE).",
					point:   byClients(g.workload, g.topology, func(res Result) float64 { return res.OpsPerSec })})
		}
	}
	// DIDA-GSTORE's figure 3 spans topologies: one point per uniform RTT.
	out = append(out, xyPlot{workload: "seed002-same",
		file:   "seed002-completion-vs-rtt.png",
		title:  "10 clients writing one shared object: completion against the round trip",
		xLabel: "round trip between every pair of hosts, ms", yLabel: "completion s",
		caption: "Completion time of the writes to one shared object against the round trip (figure 3 of DIDA-GSTORE).",
		point: func(res Result) (float64, float64, bool) {
			t := r.topology(res.Topology)
			if res.Workload != "seed002-same" || t == nil || res.TotalSec <= 0 {
				return 0, 0, false
			}
			rtt, ok := t.UniformRTT()
			return float64(rtt) / float64(time.Millisecond), res.TotalSec, ok
		}})
	var drawn []xyPlot
	for _, p := range out {
		var xs []float64
		for _, res := range r.Results {
			if x, _, ok := p.point(res); ok && !slices.Contains(xs, x) {
				xs = append(xs, x)
			}
		}
		if len(xs) >= 2 {
			drawn = append(drawn, p)
		}
	}
	return drawn
}

// byClients places a workload's results on one topology by client count.
func byClients(workload, topology string, y func(Result) float64) func(Result) (float64, float64, bool) {
	return func(res Result) (float64, float64, bool) {
		ok := res.Workload == workload && res.Topology == topology && res.Summary.Count > 0 && res.Clients > 0 && y(res) > 0
		return float64(res.Clients), y(res), ok
	}
}

// xyMarkdown writes the plots anchored at a group (topology "" for a
// workload's summary).
func (r *Report) xyMarkdown(b *strings.Builder, plotDir, workload, topology string) {
	if plotDir == "" {
		return
	}
	for _, p := range r.xyPlots() {
		if p.workload == workload && p.topology == topology {
			fmt.Fprintf(b, "%s\n\n![%s](%s)\n\n", p.caption, strings.TrimSuffix(p.file, ".png"), filepath.ToSlash(filepath.Join(plotDir, p.file)))
		}
	}
}

// writeXY draws one line per system, points marked, at the x values run.
func (r *Report) writeXY(dir string, spec xyPlot) error {
	var flavors []string
	pts := map[string]plotter.XYs{}
	var xs []float64
	for _, res := range r.Results {
		x, y, ok := spec.point(res)
		if !ok {
			continue
		}
		if _, seen := pts[res.Flavor]; !seen {
			flavors = append(flavors, res.Flavor)
		}
		pts[res.Flavor] = append(pts[res.Flavor], plotter.XY{X: x, Y: y})
		if !slices.Contains(xs, x) {
			xs = append(xs, x)
		}
	}
	if len(flavors) == 0 {
		return nil
	}
	slices.Sort(xs)
	p := plot.New()
	p.Title.Text = spec.title
	p.X.Label.Text = spec.xLabel
	p.Y.Label.Text = spec.yLabel
	if spec.logX {
		p.X.Scale = plot.LogScale{}
	}
	if spec.logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	} else {
		p.Y.Min = 0
	}
	p.X.Tick.Marker = valueTicks(xs)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	shapes := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{}, draw.BoxGlyph{}, draw.RingGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}}
	for i, f := range flavors {
		xy := pts[f]
		l, sc, err := sortedLine(xy)
		if err != nil {
			return err
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		sc.Color, sc.Shape = l.Color, shapes[i%len(shapes)]
		p.Add(l, sc)
		p.Legend.Add(f, l, sc)
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, spec.file))
}

// sortedLine is a line with its points marked, through xy in x order.
func sortedLine(xy plotter.XYs) (*plotter.Line, *plotter.Scatter, error) {
	slices.SortFunc(xy, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
	return plotter.NewLinePoints(xy)
}

// valueTicks marks the x values that were run, and only those.
func valueTicks(xs []float64) plot.Ticker {
	var t []plot.Tick
	for _, x := range xs {
		t = append(t, plot.Tick{Value: x, Label: fmt.Sprintf("%g", x)})
	}
	return plot.ConstantTicks(t)
}
