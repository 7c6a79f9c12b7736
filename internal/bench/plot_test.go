package bench

import (
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"
)

func tailRows() []Row {
	return []Row{
		{Target: "raw:rep-4M", Raw: true, Op: "write", Summary: Summary{Mean: secs(10)[0], P99: secs(14)[0], Max: secs(15)[0]}},
		{Target: "cephfs-rep-4M", Op: "write", Summary: Summary{Mean: secs(10)[0], P99: secs(27)[0], Max: secs(30)[0]}},
		{Target: "rados-rep-4M", Op: "write", Summary: Summary{Mean: secs(8)[0], P99: secs(9)[0], Max: secs(20)[0]}},
	}
}

// TestTailMarks draws the tails onto a recording canvas and reads the
// figure back in data units: per row a box from the average to the p99 in
// the row's colour, and a stroke reaching the maximum.
func TestTailMarks(t *testing.T) {
	rows := tailRows()
	p := plot.New()
	tl := tails{rows: rows, width: vg.Points(10)}
	p.Add(tl)
	xmin, xmax, ymin, ymax := tl.DataRange()
	if xmin != -0.5 || xmax != 2.5 || ymin != 0 || ymax != 30 {
		t.Fatalf("data range %v %v %v %v", xmin, xmax, ymin, ymax)
	}
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = xmin, xmax, ymin, ymax
	rec := &recorder.Canvas{}
	c := draw.Canvas{Canvas: rec, Rectangle: vg.Rectangle{Max: vg.Point{X: 300, Y: 300}}}
	tl.Plot(c, p)
	// Back from canvas to data units: the canvas spans the data range.
	sec := func(y vg.Length) float64 { return float64(y) / 300 * 30 }
	idx := func(x vg.Length) int { return int(math.Floor(float64(x) / 100)) }

	type box struct{ lo, hi float64 }
	boxes := map[int]box{}
	colors := map[int]color.Color{}
	top := map[int]float64{}
	var cur color.Color
	for _, a := range rec.Actions {
		switch a := a.(type) {
		case *recorder.SetColor:
			cur = a.Color
		case *recorder.Fill:
			lo, hi := math.Inf(1), math.Inf(-1)
			x := vg.Length(0)
			for _, pc := range a.Path {
				if pc.Type == vg.LineComp || pc.Type == vg.MoveComp {
					lo, hi = math.Min(lo, sec(pc.Pos.Y)), math.Max(hi, sec(pc.Pos.Y))
					x = pc.Pos.X
				}
			}
			boxes[idx(x)] = box{lo, hi}
			colors[idx(x)] = cur
		case *recorder.Stroke:
			for _, pc := range a.Path {
				if pc.Type == vg.LineComp || pc.Type == vg.MoveComp {
					i := idx(pc.Pos.X)
					top[i] = math.Max(top[i], sec(pc.Pos.Y))
				}
			}
		}
	}
	if len(boxes) != len(rows) {
		t.Fatalf("%d boxes for %d rows", len(boxes), len(rows))
	}
	for i, r := range rows {
		b := boxes[i]
		if math.Abs(b.lo-r.Mean.Seconds()) > 0.01 || math.Abs(b.hi-r.P99.Seconds()) > 0.01 {
			t.Errorf("row %s: box %.2f..%.2f s, want average %.2f to p99 %.2f", r.Target, b.lo, b.hi, r.Mean.Seconds(), r.P99.Seconds())
		}
		if math.Abs(top[i]-r.Max.Seconds()) > 0.01 {
			t.Errorf("row %s: whisker up to %.2f s, want max %.2f", r.Target, top[i], r.Max.Seconds())
		}
		want := color.Color(kaonColor)
		if r.Raw {
			want = rawColor
		}
		if colors[i] != want {
			t.Errorf("row %s: box colour %v, want %v", r.Target, colors[i], want)
		}
	}
}

// TestPlotTailsPNG writes a two-panel PNG that decodes, at the size the
// rows ask for.
func TestPlotTailsPNG(t *testing.T) {
	rows := tailRows()
	for _, r := range tailRows() {
		r.Op = "read"
		rows = append(rows, r)
	}
	file := filepath.Join(t.TempDir(), "tails.png")
	if err := PlotTails(file, StreamConfig{Streams: 32, Size: 64 << 20, Rounds: 3}, rows); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	// 420 x 600 points at vgimg's 96 dpi.
	if b := img.Bounds(); b.Dx() != 560 || b.Dy() != 800 {
		t.Fatalf("image %v", b)
	}
	if err := PlotTails(filepath.Join(t.TempDir(), "tails"), StreamConfig{}, rows); err == nil {
		t.Fatal("a file name without an extension was accepted")
	}
	if err := PlotTails(filepath.Join(t.TempDir(), "t.png"), StreamConfig{}, nil); err == nil {
		t.Fatal("no rows plotted without an error")
	}
}

// TestExceedance: the curve starts at 1 (every sample at least as slow as
// the fastest) and ends at 1/n, the median crossing 0.5.
func TestExceedance(t *testing.T) {
	ds := secs(1, 2, 3, 4)
	xys := exceedance(ds)
	if len(xys) != 4 || xys[0].Y != 1 || xys[3].Y != 0.25 || xys[2].Y != 0.5 || xys[2].X != 3000 {
		t.Fatalf("exceedance: %v", xys)
	}
	file := filepath.Join(t.TempDir(), "lat.png")
	if err := PlotLatency(file, "test", []Series{{Name: "a", Ds: ds}}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("%s is not a PNG: %v", file, err)
	}
}
