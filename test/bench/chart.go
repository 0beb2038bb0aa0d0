package main

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The charts (gonum.org/v1/plot): one per table of the report, each with
// a title, axis titles, tick labels and a legend, so that it reads without
// the table beside it.

var sysColors = map[string]color.RGBA{
	sysLoopback: {0x1f, 0x77, 0xb4, 0xff},
	sysOverlay:  {0xff, 0x7f, 0x0e, 0xff},
	sysPassHP:   {0x94, 0x67, 0xbd, 0xff},
	sysFloor:    {0x8c, 0x56, 0x4b, 0xff},
	// The floor's kernel modes (-systems floor-noopen,floor-nopt).
	sysFloorNoOpen: {0xc4, 0x9c, 0x94, 0xff},
	sysFloorNoPT:   {0xe3, 0x77, 0xc2, 0xff},
	sysAcyclicfs:   {0x2c, 0xa0, 0x2c, 0xff},
}

var (
	goalColor   = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	nativeColor = color.RGBA{0x55, 0x55, 0x55, 0xff}
	refColor    = color.RGBA{0xbb, 0xbb, 0xbb, 0xff}
)

// chartFiles names the charts written beside the main one (path):
// benchmarks.png → benchmarks-forks.png, benchmarks-git.png.
func chartFiles(path string) (forks, git string) {
	ext := filepath.Ext(path)
	base := strings.TrimSuffix(path, ext)
	return base + "-forks" + ext, base + "-git" + ext
}

// writePNG writes the ratio chart to path and the charts of the
// acyclicfs-only tables beside it (chartFiles); a chart without data is
// not written.
func (r *results) writePNG(path string) error {
	forks, git := chartFiles(path)
	for _, c := range []struct {
		file string
		mk   func() (*plot.Plot, vg.Length, error)
	}{{path, r.ratioPlot}, {forks, r.forksPlot}, {git, r.gitPlot}} {
		p, h, err := c.mk()
		if err != nil {
			return err
		}
		if p == nil {
			continue
		}
		if err := p.Save(9*vg.Inch, h, c.file); err != nil {
			return fmt.Errorf("chart %s: %w", c.file, err)
		}
	}
	return nil
}

// ratioTicks labels a log2 axis with ratios: 1/4×, 1/2×, 1×, 2×, 4×, …
type ratioTicks struct{}

func (ratioTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(min); e <= math.Ceil(max); e++ {
		label := fmt.Sprintf("%g×", math.Exp2(e))
		if e < 0 {
			label = fmt.Sprintf("1/%g×", math.Exp2(-e))
		}
		ts = append(ts, plot.Tick{Value: e, Label: label})
	}
	return ts
}

// groupedBars adds one horizontal bar series per name: values[j][i] is
// series j's value in row i (NaN: no bar), with a legend entry each.
func groupedBars(p *plot.Plot, names []string, colors []color.Color, values [][]float64) error {
	const barW = 7
	for j, name := range names {
		vs := make(plotter.Values, len(values[j]))
		for i, v := range values[j] {
			if math.IsNaN(v) {
				v = 0
			}
			vs[i] = v
		}
		bc, err := plotter.NewBarChart(vs, vg.Points(barW))
		if err != nil {
			return err
		}
		bc.Horizontal = true
		bc.Color = colors[j]
		bc.LineStyle.Width = 0
		bc.Offset = vg.Points(barW * (float64(len(names)-1)/2 - float64(j)))
		p.Add(bc)
		p.Legend.Add(name, bc)
	}
	return nil
}

// newPlot is a plot with the house style: legend at the top right, grid
// lines along the value axis.
func newPlot(title, xLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Points(4)
	p.Add(plotter.NewGrid())
	return p
}

// rowPoints is the height of a row of k bars, in points.
func rowPoints(k int) float64 { return float64(k*7 + 12) }

// rowsHeight is the height of a chart with n rows of k bars each and a
// legend of entries lines above them.
func rowsHeight(n, k, entries int) vg.Length {
	return vg.Points(float64(n)*rowPoints(k) + float64(entries)*legendLine + 110)
}

// legendLine is the height of one legend entry, in points.
const legendLine = 13

// rowsAxis fits the Y axis to n rows and leaves room above them for a
// legend of entries lines, so that no bar runs under it.
func rowsAxis(p *plot.Plot, n, k, entries int) {
	p.Y.Min = -0.5
	p.Y.Max = float64(n) - 0.5 + float64(entries)*legendLine/rowPoints(k)
}

// ratioPlot: per workload, each system's median time as a ratio to native
// on a log2 axis (1× is native; left of it is faster), with acyclicfs's
// goal marked.
func (r *results) ratioPlot() (*plot.Plot, vg.Length, error) {
	var syss []string
	for _, s := range r.cfg.systems {
		if s != sysNative {
			syss = append(syss, s)
		}
	}
	if len(syss) == 0 || len(r.cfg.workloads) == 0 {
		return nil, 0, nil
	}
	p := newPlot("Time of each workload relative to native (median of runs)", "time ÷ native time (log scale; left of 1× is faster than native)")
	n := len(r.cfg.workloads)
	rows := make([]string, n)
	values := make([][]float64, len(syss))
	var colors []color.Color
	for j, s := range syss {
		values[j] = make([]float64, n)
		colors = append(colors, sysColors[s])
	}
	// Row 0 is drawn at the bottom: the first workload goes last.
	for k, wn := range r.cfg.workloads {
		i := n - 1 - k
		rows[i] = findWorkload(wn).title
		for j, s := range syss {
			values[j][i] = math.NaN()
			if st := r.ratioStat(wn, s); st.n > 0 {
				values[j][i] = math.Log2(st.med)
			}
		}
	}
	if err := groupedBars(p, syss, colors, values); err != nil {
		return nil, 0, err
	}
	// Goals: a red tick across the workload's row.
	var goals plotter.XYs
	for k, wn := range r.cfg.workloads {
		if w := findWorkload(wn); w.goal > 0 {
			goals = append(goals, plotter.XY{X: math.Log2(w.goal), Y: float64(n - 1 - k)})
		}
	}
	if len(goals) > 0 {
		sc, err := plotter.NewScatter(goals)
		if err != nil {
			return nil, 0, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: goalColor, Radius: vg.Points(5), Shape: draw.PlusGlyph{}}
		p.Add(sc)
		p.Legend.Add("goal for acyclicfs (issue)", sc)
	}
	one, err := plotter.NewLine(plotter.XYs{{X: 0, Y: -0.5}, {X: 0, Y: float64(n) - 0.5}})
	if err != nil {
		return nil, 0, err
	}
	one.LineStyle = draw.LineStyle{Color: nativeColor, Width: vg.Points(1.5)}
	p.Add(one)
	p.Legend.Add("native (1×)", one)
	p.NominalY(padded(rows)...)
	entries := len(syss) + 1 + btoi(len(goals) > 0)
	rowsAxis(p, n, len(syss), entries)
	p.X.Tick.Marker = ratioTicks{}
	return p, rowsHeight(n, len(syss), entries), nil
}

// secs converts a median duration to seconds, NaN when there are none.
func secs(ds []time.Duration) float64 {
	st := durStat(ds)
	if st.n == 0 {
		return math.NaN()
	}
	return st.med
}

// padded prefixes row labels with spaces: gonum right-aligns them against
// the axis from the image's left edge, which clips the first glyph.
func padded(rows []string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = "  " + r
	}
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// timeTicks labels a log10 axis of seconds: 1 ms, 10 ms, 100 ms, 1 s, …
type timeTicks struct{}

func (timeTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(min); e <= math.Ceil(max); e++ {
		v := math.Pow(10, e)
		label := fmtSec(v)
		ts = append(ts, plot.Tick{Value: e, Label: label})
	}
	return ts
}

// log10s maps seconds to the log10 axis of timeTicks (NaN stays NaN).
func log10s(vs []float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = math.NaN()
		if v > 0 {
			// Offset from 0.1 ms so that every bar starts at the axis's left.
			out[i] = math.Log10(v) + 4
		}
	}
	return out
}

// offsetTimeTicks is timeTicks for values shifted by log10s's +4.
type offsetTimeTicks struct{}

func (offsetTimeTicks) Ticks(min, max float64) []plot.Tick {
	ts := timeTicks{}.Ticks(min-4, max-4)
	for i := range ts {
		ts[i].Value += 4
	}
	return ts
}

// timesPlot is a chart of durations (log scale) per row for a few series.
func timesPlot(title string, rows []string, names []string, colors []color.Color, values [][]float64) (*plot.Plot, vg.Length, error) {
	p := newPlot(title, "time, median of runs (log scale)")
	n := len(rows)
	// Row 0 is drawn at the bottom: reverse.
	rev := make([]string, n)
	for i := range rows {
		rev[n-1-i] = rows[i]
	}
	vals := make([][]float64, len(values))
	for j := range values {
		l := log10s(values[j])
		vals[j] = make([]float64, n)
		for i := range l {
			vals[j][n-1-i] = l[i]
		}
	}
	if err := groupedBars(p, names, colors, vals); err != nil {
		return nil, 0, err
	}
	p.NominalY(padded(rev)...)
	rowsAxis(p, n, len(names), len(names))
	p.X.Tick.Marker = offsetTimeTicks{}
	p.X.Min = 0
	return p, rowsHeight(n, len(names), len(names)), nil
}

// forksPlot: fork, cp -a and git worktree add per tree size, and the lease
// end with and without a rebase.
func (r *results) forksPlot() (*plot.Plot, vg.Length, error) {
	if len(r.forks) == 0 {
		return nil, 0, nil
	}
	var rows []string
	vals := make([][]float64, 5)
	for _, f := range r.forks {
		rows = append(rows, fmt.Sprintf("%d files", f.files))
		for j, ds := range [][]time.Duration{f.fork, f.cp, f.worktree, f.capOver, f.rebOver} {
			vals[j] = append(vals[j], secs(ds))
		}
	}
	names := []string{"acyclicfs fork", "cp -a (reference)", "git worktree add (reference)", "acyclicfs lease end: capture of 10 files", "acyclicfs lease end: capture + rebase"}
	colors := []color.Color{sysColors[sysAcyclicfs], refColor, nativeColor, color.RGBA{0x17, 0xbe, 0xcf, 0xff}, color.RGBA{0xbc, 0xbd, 0x22, 0xff}}
	return timesPlot("Forking a workspace and ending a lease, by tree size", rows, names, colors, vals)
}

// gitPlot: the git sections — land against git merge, create --from-git
// against git worktree add, and first git status in a fresh mount
// against native git status.
func (r *results) gitPlot() (*plot.Plot, vg.Length, error) {
	var rows []string
	acy, nat := []float64{}, []float64{}
	if gr := r.gitImport; gr != nil && len(gr.fromGit) > 0 {
		rows = append(rows, "create --from-git (acyclicfs) / git worktree add (native), first run", "first git status in the new workspace's mount / git status")
		acy = append(acy, gr.fromGit[0].Seconds(), secs(gr.status))
		nat = append(nat, secs(gr.worktree[:1]), secs(gr.native))
	}
	if lr := r.land; lr != nil && len(lr.land) > 0 {
		rows = append(rows, "land of a git commit into a moved parent / git merge", "first git status in a fresh fork's mount / git status")
		acy = append(acy, secs(lr.land), secs(lr.status))
		nat = append(nat, secs(lr.native), secs(lr.nativeStatus))
	}
	if gp := r.gitPublish; gp != nil && len(gp.publish) > 0 {
		rows = append(rows, "git publish of 10 changed files / git add -A && git commit")
		acy = append(acy, secs(gp.publish))
		nat = append(nat, secs(gp.native))
	}
	if fm := r.fsmonitor; fm != nil && len(fm.on2) > 0 {
		rows = append(rows, "git status with the mount's fsmonitor hook (2nd) / git status (2nd)",
			"git status with the hook, 1st after a remount / git status (1st)")
		acy = append(acy, secs(fm.on2), secs(fm.onRe1))
		nat = append(nat, secs(fm.native2), secs(fm.native1))
	}
	if sr := r.sandbox; sr != nil && len(sr.total) > 0 {
		rows = append(rows, "ready sandbox: fork + mount + first git status / git worktree add + git status")
		acy = append(acy, secs(sr.total))
		nat = append(nat, secs(sumDur(sr.worktree, sr.worktreeStatus)))
	}
	if len(rows) == 0 {
		return nil, 0, nil
	}
	return timesPlot("Git on the Go source tree (~11.5k files): acyclicfs against native git", rows,
		[]string{"acyclicfs", "native git"}, []color.Color{sysColors[sysAcyclicfs], nativeColor}, [][]float64{acy, nat})
}
