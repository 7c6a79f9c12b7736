package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The tail plot draws what the stream tables say the way the field's
// papers do: per target a line at the average stream time, a box up to
// the p99 and a whisker up to the slowest stream, one panel per op. A
// target that adds a tail of its own shows a tall box, which a table of
// twenty rows hides.

var (
	rawColor  = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	kaonColor = color.RGBA{R: 70, G: 130, B: 200, A: 255}
)

// tails is a plot.Plotter of the rows of one op, at x = 0, 1, ...
type tails struct {
	rows  []Row
	width vg.Length // of a box
}

var _ plot.DataRanger = tails{}

// DataRange spans every row from 0 s to its slowest stream.
func (t tails) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = -0.5, float64(len(t.rows))-0.5
	for _, r := range t.rows {
		ymax = math.Max(ymax, r.Max.Seconds())
	}
	return xmin, xmax, 0, ymax
}

// Plot draws, per row, the box from the average to the p99 (filled,
// the row's kind's colour), a thick line at the average and a whisker
// from the p99 to the maximum with a cap.
func (t tails) Plot(c draw.Canvas, p *plot.Plot) {
	x, y := p.Transforms(&c)
	line := draw.LineStyle{Color: color.Black, Width: vg.Points(0.8)}
	thick := draw.LineStyle{Color: color.Black, Width: vg.Points(2.5)}
	for i, r := range t.rows {
		cx := x(float64(i))
		half := t.width / 2
		avg, p99, mx := y(r.Mean.Seconds()), y(r.P99.Seconds()), y(r.Max.Seconds())
		fill := kaonColor
		if r.Raw {
			fill = rawColor
		}
		c.FillPolygon(fill, c.ClipPolygonY([]vg.Point{{X: cx - half, Y: avg}, {X: cx + half, Y: avg}, {X: cx + half, Y: p99}, {X: cx - half, Y: p99}}))
		c.StrokeLines(line, c.ClipLinesY([]vg.Point{{X: cx - half, Y: avg}, {X: cx + half, Y: avg}, {X: cx + half, Y: p99}, {X: cx - half, Y: p99}, {X: cx - half, Y: avg}})...)
		c.StrokeLines(line, c.ClipLinesY([]vg.Point{{X: cx, Y: p99}, {X: cx, Y: mx}}, []vg.Point{{X: cx - half/2, Y: mx}, {X: cx + half/2, Y: mx}})...)
		c.StrokeLines(thick, c.ClipLinesY([]vg.Point{{X: cx - half, Y: avg}, {X: cx + half, Y: avg}})...)
	}
}

// tailPlot makes the panel of one op.
func tailPlot(title string, rows []Row) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "seconds per stream"
	p.Y.Min = 0
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = r.Target
	}
	p.Add(tails{rows: rows, width: vg.Points(14)})
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
	p.Y.Tick.Marker = plot.DefaultTicks{}
	return p
}

// PlotTails writes the tail plot of rows to file (PNG, SVG or PDF by its
// extension): one panel per op, in the order of the rows (Stream gives
// each raw row followed by the rows compared with it).
func PlotTails(file string, cfg StreamConfig, rows []Row) error {
	var ops []string
	byOp := map[string][]Row{}
	for _, r := range rows {
		if _, ok := byOp[r.Op]; !ok {
			ops = append(ops, r.Op)
		}
		byOp[r.Op] = append(byOp[r.Op], r)
	}
	if len(ops) == 0 {
		return fmt.Errorf("plot %s: no rows", file)
	}
	n := len(byOp[ops[0]])
	w := vg.Length(math.Max(420, float64(90+28*n))) // points
	h := vg.Length(300 * len(ops))
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(file)), ".")
	if format == "" {
		return fmt.Errorf("plot %s: no extension to tell the format by", file)
	}
	cv, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return fmt.Errorf("plot %s: %w", file, err)
	}
	dc := draw.New(cv)
	plots := make([][]*plot.Plot, len(ops))
	for i, op := range ops {
		title := fmt.Sprintf("%s: %d streams x %d MiB", op, cfg.Streams, cfg.Size>>20)
		if cfg.Rounds > 1 {
			title += fmt.Sprintf(", medians of %d rounds", cfg.Rounds)
		}
		title += "\nline: average, box: to p99, whisker: to max"
		plots[i] = []*plot.Plot{tailPlot(title, byOp[op])}
	}
	tiles := draw.Tiles{Rows: len(ops), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(10)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := cv.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", file, err)
	}
	return f.Close()
}
