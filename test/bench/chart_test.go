package main

import (
	"bytes"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

// chartResults is a small report: two workloads on three systems, one fork
// size, the git sections.
func chartResults(t *testing.T) *results {
	t.Helper()
	cfg, err := parseFlags([]string{"-runs", "1", "-systems", "native,loopback,acyclicfs", "-workloads", "untar,git-status"})
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	return &results{cfg: cfg,
		samples: map[string]map[string][]sample{
			"untar":      {sysNative: {{work: 400 * ms}}, sysLoopback: {{work: 4000 * ms}}, sysAcyclicfs: {{work: 1200 * ms}}},
			"git-status": {sysNative: {{work: 70 * ms}}, sysLoopback: {{work: 500 * ms}}, sysAcyclicfs: {{work: 60 * ms}}},
		},
		forks:      []*forkResult{{files: 1000, fork: []time.Duration{9 * ms}, cp: []time.Duration{300 * ms}, worktree: []time.Duration{200 * ms}, capOver: []time.Duration{40 * ms}, rebOver: []time.Duration{60 * ms}}},
		gitImport:  &gitImportResult{fromGit: []time.Duration{2 * time.Second}, worktree: []time.Duration{1500 * ms}, status: []time.Duration{100 * ms}, native: []time.Duration{60 * ms}},
		gitPublish: &gitPublishResult{publish: []time.Duration{200 * ms}, native: []time.Duration{150 * ms}},
		fsmonitor:  &fsmonitorGit{on2: []time.Duration{20 * ms}, onRe1: []time.Duration{100 * ms}, native1: []time.Duration{38 * ms}, native2: []time.Duration{32 * ms}},
		land:       &landResult{land: []time.Duration{114 * ms}, native: []time.Duration{55 * ms}, status: []time.Duration{190 * ms}, nativeStatus: []time.Duration{60 * ms}},
		sandbox:    &sandboxResult{total: []time.Duration{90 * ms}, worktree: []time.Duration{900 * ms}, worktreeStatus: []time.Duration{40 * ms}},
	}
}

// TestCharts: every chart renders to a PNG of the expected size that is
// not blank, and its text (title, axis titles, tick labels, the legend
// naming each system and the goal mark) is there: the same plot rendered
// as SVG carries every label as text.
func TestCharts(t *testing.T) {
	r := chartResults(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "benchmarks.png")
	if err := r.writePNG(path); err != nil {
		t.Fatal(err)
	}
	forks, git := chartFiles(path)
	for _, c := range []struct {
		file string
		mk   func() (*plot.Plot, vg.Length, error)
		text []string
	}{
		{path, r.ratioPlot, []string{"relative to native", "time ÷ native time", "loopback", "acyclicfs", "goal for acyclicfs", "native (1×)", "untar Go src", "git status", "1×", "8×"}},
		{forks, r.forksPlot, []string{"by tree size", "1000 files", "acyclicfs fork", "cp -a", "git worktree add", "capture + rebase", "100.0 ms"}},
		{git, r.gitPlot, []string{"native git", "create --from-git", "land of a git commit", "git publish of 10", "fsmonitor hook", "ready sandbox", "1.00 s"}},
	} {
		f, err := os.Open(c.file)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		p, h, err := c.mk()
		if err != nil {
			t.Fatal(err)
		}
		b := img.Bounds()
		if want := int(9 * vg.Inch / vg.Inch * 96); b.Dx() != want || b.Dy() != int(h/vg.Inch*96+0.5) && b.Dy() != int(h/vg.Inch*96) {
			t.Errorf("%s: %dx%d pixels, want %d wide and %v tall", c.file, b.Dx(), b.Dy(), want, h/vg.Inch*96)
		}
		if colors := distinctColors(img); colors < 4 {
			t.Errorf("%s: %d distinct colors: blank", c.file, colors)
		}
		wt, err := p.WriterTo(9*vg.Inch, h, "svg")
		if err != nil {
			t.Fatal(err)
		}
		var svg bytes.Buffer
		if _, err := wt.WriteTo(&svg); err != nil {
			t.Fatal(err)
		}
		for _, want := range c.text {
			if !strings.Contains(svg.String(), want) {
				t.Errorf("%s: no text %q", c.file, want)
			}
		}
	}
}

func distinctColors(img image.Image) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
		}
	}
	return len(seen)
}
