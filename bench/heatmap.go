package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Cost of Consensus's figure 10 (and its contention counterpart): one heat map per
// system and strategy of the average acquire latency over two axes, all on
// one log colour scale so that tiles compare.

var s0Topo = regexp.MustCompile(`^seed000-u(\d+)-s(\d+)$`)

// s0RTTs parses a Cost of Consensus topology name (seed000-uU-sS): client↔server and server↔server
// round trips in ms.
func s0RTTs(topology string) (user, server float64, ok bool) {
	m := s0Topo.FindStringSubmatch(topology)
	if m == nil {
		return 0, 0, false
	}
	u, _ := strconv.ParseFloat(m[1], 64)
	s, _ := strconv.ParseFloat(m[2], 64)
	return u, s, true
}

// heatSpec says how a result maps onto a tile's cell.
type heatSpec struct {
	file, title, xLabel, yLabel string
	cell                        func(Result) (x, y float64, ok bool)
	row                         func(y float64) string // a row's tick label
}

// seed000Heatmaps are the heat maps the results allow: the RTT × RTT grid
// when more than one client RTT and server RTT were run at one hold time,
// and RTT × hold time when more than one hold time was run.
func (r *Report) seed000Heatmaps() []heatSpec {
	var users, servers, holds []float64
	for _, res := range r.Results {
		u, s, ok := s0RTTs(res.Topology)
		if res.Workload != "seed000" || !ok || res.Summary.Count == 0 {
			continue
		}
		for _, v := range []struct {
			set *[]float64
			x   float64
		}{{&users, u}, {&servers, s}, {&holds, res.ServiceMs}} {
			if !slices.Contains(*v.set, v.x) {
				*v.set = append(*v.set, v.x)
			}
		}
	}
	var out []heatSpec
	if len(holds) == 1 && len(users) > 1 && len(servers) > 1 {
		out = append(out, heatSpec{file: "seed000-grid-heatmap.png",
			title:  "average acquire ms",
			xLabel: "client–server RTT ms", yLabel: "server–server RTT ms",
			cell: func(res Result) (float64, float64, bool) {
				u, s, ok := s0RTTs(res.Topology)
				return u, s, ok
			},
			row: func(y float64) string { return fmt.Sprintf("%g", y) }})
	}
	if len(holds) > 1 {
		out = append(out, heatSpec{file: "seed000-contention-heatmap.png",
			title:  "average acquire ms",
			xLabel: "mean hold ms", yLabel: "client–server / server–server RTT ms",
			cell: func(res Result) (float64, float64, bool) {
				u, s, ok := s0RTTs(res.Topology)
				return res.ServiceMs, u*1000 + s, ok // rows ordered by client RTT, then server RTT
			},
			row: func(y float64) string { return fmt.Sprintf("%g / %g", math.Floor(y/1000), math.Mod(y, 1000)) }})
	}
	return out
}

type heatGrid struct {
	xs, ys []float64
	z      [][]float64 // [y][x], log10 ms; NaN where not run
}

func (g heatGrid) Dims() (int, int)   { return len(g.xs), len(g.ys) }
func (g heatGrid) Z(c, r int) float64 { return g.z[r][c] }
func (g heatGrid) X(c int) float64    { return float64(c) }
func (g heatGrid) Y(r int) float64    { return float64(r) }

// writeHeatmap draws one tile per system and strategy into dir/spec.file.
func (r *Report) writeHeatmap(dir string, spec heatSpec) error {
	type key struct{ flavor, series string }
	var keys []key
	var xs, ys []float64
	vals := map[key]map[[2]float64]float64{}
	for _, res := range r.Results {
		if res.Workload != "seed000" || res.Summary.Count == 0 {
			continue
		}
		x, y, ok := spec.cell(res)
		if !ok {
			continue
		}
		k := key{res.Flavor, res.Series}
		if vals[k] == nil {
			vals[k] = map[[2]float64]float64{}
			keys = append(keys, k)
		}
		vals[k][[2]float64{x, y}] = res.Summary.Avg
		if !slices.Contains(xs, x) {
			xs = append(xs, x)
		}
		if !slices.Contains(ys, y) {
			ys = append(ys, y)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(xs)
	slices.Sort(ys)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, m := range vals {
		for _, v := range m {
			lo, hi = math.Min(lo, math.Log10(v)), math.Max(hi, math.Log10(v))
		}
	}
	if hi <= lo {
		hi = lo + 1
	}
	pal := moreland.SmoothBlueRed().Palette(255)
	const cols = 3
	rows := (len(keys) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, k := range keys {
		g := heatGrid{xs: xs, ys: ys, z: make([][]float64, len(ys))}
		var labels plotter.XYLabels
		for yi, y := range ys {
			g.z[yi] = make([]float64, len(xs))
			for xi, x := range xs {
				v, ok := vals[k][[2]float64{x, y}]
				g.z[yi][xi] = math.NaN()
				if ok {
					g.z[yi][xi] = math.Log10(v)
					labels.XYs = append(labels.XYs, plotter.XY{X: float64(xi), Y: float64(yi)})
					labels.Labels = append(labels.Labels, fmtMs(v))
				}
			}
		}
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s\n%s", k.flavor, k.series)
		p.X.Label.Text = spec.xLabel
		p.Y.Label.Text = spec.yLabel
		h := plotter.NewHeatMap(g, pal)
		h.Min, h.Max = lo, hi
		h.NaN = plotter.DefaultLineStyle.Color
		p.Add(h)
		if l, err := plotter.NewLabels(labels); err == nil {
			for j := range l.TextStyle {
				l.TextStyle[j].XAlign, l.TextStyle[j].YAlign = draw.XCenter, draw.YCenter
			}
			p.Add(l)
		}
		var xt, yt []plot.Tick
		for xi, x := range xs {
			xt = append(xt, plot.Tick{Value: float64(xi), Label: fmt.Sprintf("%g", x)})
		}
		for yi, y := range ys {
			yt = append(yt, plot.Tick{Value: float64(yi), Label: spec.row(y)})
		}
		p.X.Tick.Marker = plot.ConstantTicks(xt)
		p.Y.Tick.Marker = plot.ConstantTicks(yt)
		p.X.Min, p.X.Max = -0.5, float64(len(xs))-0.5
		p.Y.Min, p.Y.Max = -0.5, float64(len(ys))-0.5
		plots[i/cols][i%cols] = p
	}
	for i := len(keys); i < rows*cols; i++ {
		plots[i/cols][i%cols] = plot.New() // empty tile
	}
	w, hgt := 12*vg.Inch, vg.Length(rows)*3.6*vg.Inch
	img := vgimg.New(w, hgt)
	dc := draw.New(img)
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 6,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, t, dc)
	for j := range plots {
		for i := range plots[j] {
			plots[j][i].Draw(canvases[j][i])
		}
	}
	f, err := os.Create(filepath.Join(dir, spec.file))
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
