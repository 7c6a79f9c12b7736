package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one line of a latency plot: durations, sorted.
type Series struct {
	Name string
	Ds   []time.Duration
}

// exceedance gives, per duration of sorted ds, the fraction of the
// samples at least as slow: the curve whose right end is the tail (p99
// at 0.01, p99.9 at 0.001), on log axes.
func exceedance(ds []time.Duration) plotter.XYs {
	xys := make(plotter.XYs, 0, len(ds))
	n := float64(len(ds))
	for i, d := range ds {
		x := math.Max(d.Seconds()*1e3, 1e-3) // ms, at least 1 µs for the log axis
		xys = append(xys, plotter.XY{X: x, Y: (n - float64(i)) / n})
	}
	return xys
}

// PlotLatency writes the latency distributions of series to file (PNG,
// SVG or PDF by its extension) as exceedance curves on log axes: the
// fraction of samples (y) slower than a latency (x, ms), so the median is
// where a curve crosses 0.5 and the tail is its right end.
func PlotLatency(file, title string, series []Series) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(file)), ".")
	if format == "" {
		return fmt.Errorf("plot %s: no extension to tell the format by", file)
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "latency (ms)"
	p.Y.Label.Text = "fraction slower"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	colors := []color.Color{kaonColor, color.RGBA{R: 220, G: 100, B: 40, A: 255}, color.RGBA{R: 60, G: 160, B: 80, A: 255}, rawColor,
		color.RGBA{R: 150, G: 60, B: 170, A: 255}, color.RGBA{R: 200, G: 170, B: 20, A: 255}}
	for i, s := range series {
		if len(s.Ds) == 0 {
			continue
		}
		l, err := plotter.NewLine(exceedance(s.Ds))
		if err != nil {
			return fmt.Errorf("plot %s: %w", file, err)
		}
		l.Color, l.Width = colors[i%len(colors)], vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (median %v, p99 %v)", s.Name, Percentile(s.Ds, 0.5).Round(time.Microsecond), Percentile(s.Ds, 0.99).Round(time.Microsecond)), l)
	}
	p.Legend.Top = true
	cv, err := draw.NewFormattedCanvas(vg.Points(560), vg.Points(380), format)
	if err != nil {
		return fmt.Errorf("plot %s: %w", file, err)
	}
	p.Draw(draw.New(cv))
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := cv.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
