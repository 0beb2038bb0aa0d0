package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
)

// The chart has no text (only the standard library is available to draw
// it); the legend lives in the markdown next to it.
var sysColors = map[string]color.RGBA{
	sysLoopback:  {0x1f, 0x77, 0xb4, 0xff},
	sysOverlay:   {0xff, 0x7f, 0x0e, 0xff},
	sysPassHP:    {0x94, 0x67, 0xbd, 0xff},
	sysAcyclicfs: {0x2c, 0xa0, 0x2c, 0xff},
}

func colorName(sys string) string {
	switch sys {
	case sysLoopback:
		return "blue"
	case sysOverlay:
		return "orange"
	case sysPassHP:
		return "purple"
	case sysAcyclicfs:
		return "green"
	}
	return "grey"
}

const (
	chartW      = 900
	chartPad    = 20
	barH        = 14
	groupGap    = 14
	chartMinLog = -1.0 // log2(0.5)
	chartMaxLog = 6.0  // log2(64)
)

// writePNG draws one group of horizontal bars per workload: the median
// ratio to native of every non-native system, on a log2 scale.
func (r *results) writePNG(path string) error {
	var syss []string
	for _, s := range r.cfg.systems {
		if s != sysNative {
			syss = append(syss, s)
		}
	}
	if len(syss) == 0 {
		return nil
	}
	groupH := len(syss)*barH + groupGap
	h := 2*chartPad + len(r.cfg.workloads)*groupH
	img := image.NewRGBA(image.Rect(0, 0, chartW, h))
	draw.Draw(img, img.Bounds(), &image.Uniform{color.White}, image.Point{}, draw.Src)
	plotW := chartW - 2*chartPad
	xOf := func(ratio float64) int {
		l := math.Log2(math.Max(ratio, math.Exp2(chartMinLog)))
		l = math.Min(l, chartMaxLog)
		return chartPad + int((l-chartMinLog)/(chartMaxLog-chartMinLog)*float64(plotW))
	}
	grey := color.RGBA{0xcc, 0xcc, 0xcc, 0xff}
	for _, g := range []float64{2, 4, 8, 16, 32} {
		fill(img, xOf(g), chartPad/2, 1, h-chartPad, grey)
	}
	for i, wn := range r.cfg.workloads {
		y0 := chartPad + i*groupH
		for j, s := range syss {
			st := r.ratioStat(wn, s)
			if st.n == 0 {
				continue
			}
			y := y0 + j*barH
			fill(img, chartPad, y+2, xOf(st.med)-chartPad, barH-4, sysColors[s])
			if s == sysAcyclicfs {
				if w := findWorkload(wn); w.goal > 0 {
					fill(img, xOf(w.goal)-1, y, 3, barH, color.RGBA{0xd6, 0x27, 0x28, 0xff})
				}
			}
		}
	}
	fill(img, xOf(1), chartPad/2, 2, h-chartPad, color.Black)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return f.Close()
}

func fill(img *image.RGBA, x, y, w, h int, c color.Color) {
	if w <= 0 || h <= 0 {
		return
	}
	draw.Draw(img, image.Rect(x, y, x+w, y+h), &image.Uniform{c}, image.Point{}, draw.Src)
}
