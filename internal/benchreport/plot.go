package benchreport

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The size of every PNG: 8 × 5 inches at gonum's default 96 dpi, that is
// 768 × 480 pixels.
const (
	PNGWidth  = 768
	PNGHeight = 480
	pngDPI    = 96
)

// errPoints is one series as plotted: its medians with min–max error bars.
type errPoints struct {
	x, y, lo, hi []float64
}

func (e *errPoints) Len() int                        { return len(e.x) }
func (e *errPoints) XY(i int) (float64, float64)     { return e.x[i], e.y[i] }
func (e *errPoints) YError(i int) (float64, float64) { return e.y[i] - e.lo[i], e.hi[i] - e.y[i] }

func (e *errPoints) add(x, y, lo, hi float64, logX, logY bool) {
	if !finite(x) || !finite(y) || (logX && x <= 0) || (logY && y <= 0) {
		return // cannot be drawn
	}
	if !finite(lo) || lo > y || (logY && lo <= 0) {
		lo = y
	}
	if !finite(hi) || hi < y {
		hi = y
	}
	e.x, e.y, e.lo, e.hi = append(e.x, x), append(e.y, y), append(e.lo, lo), append(e.hi, hi)
}

// autoLogTicks labels a log axis by decades when it spans one, else like a
// linear axis (plot.LogTicks gives no tick at all within one decade).
type autoLogTicks struct{}

func (autoLogTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi/lo >= 10 {
		return plot.LogTicks{Prec: -1}.Ticks(lo, hi)
	}
	return plot.DefaultTicks{}.Ticks(lo, hi)
}

// newPlot builds the figure of e: with a baseline, every other series as
// its ratio to the baseline (median, min–max bars) and the baseline as a
// dashed line at 1; without one, every series in absolute values.
func newPlot(e Experiment) (*plot.Plot, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	p := plot.New()
	p.Title.Text = title(&e)
	p.X.Label.Text = e.XLabel
	p.Y.Label.Text = e.YLabel
	ratio := e.baselineOf() != nil
	if ratio {
		p.Y.Label.Text = fmt.Sprintf("%s, ratio to %s (same run)", e.YLabel, e.Baseline)
	}
	if e.LogX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, autoLogTicks{}
	}
	if e.LogY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, autoLogTicks{}
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.XOffs, p.Legend.YOffs = -vg.Points(6), -vg.Points(4)

	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	drawn := 0
	for i, s := range e.Series {
		if ratio && s.Name == e.Baseline {
			continue
		}
		var pts errPoints
		for _, pt := range s.Points {
			if ratio {
				if r, ok := e.RatioAt(pt); ok {
					pts.add(pt.X, r.Median, r.Min, r.Max, e.LogX, e.LogY)
				}
			} else {
				pts.add(pt.X, pt.Median, pt.Min, pt.Max, e.LogX, e.LogY)
			}
		}
		if pts.Len() == 0 {
			continue
		}
		line, scatter, err := plotter.NewLinePoints(&pts)
		if err != nil {
			return nil, fmt.Errorf("benchreport: plot %s: series %s: %w", e.Name, s.Name, err)
		}
		bars, err := plotter.NewYErrorBars(&pts)
		if err != nil {
			return nil, fmt.Errorf("benchreport: plot %s: series %s: %w", e.Name, s.Name, err)
		}
		c := plotutil.Color(i)
		line.Color, scatter.Color, bars.Color = c, c, c
		scatter.Shape = plotutil.Shape(i)
		p.Add(line, scatter, bars)
		p.Legend.Add(s.Name, line, scatter)
		for k := range pts.x {
			xmin, xmax = math.Min(xmin, pts.x[k]), math.Max(xmax, pts.x[k])
			ymin, ymax = math.Min(ymin, pts.lo[k]), math.Max(ymax, pts.hi[k])
		}
		drawn++
	}
	if drawn == 0 {
		p.Title.Text += " (no data)"
		xmin, xmax, ymin, ymax = 1, 10, 1, 10
	}
	if ratio && drawn > 0 {
		ymin, ymax = math.Min(ymin, 1), math.Max(ymax, 1)
		lo, hi := widen(xmin, xmax, e.LogX)
		one, err := plotter.NewLine(plotter.XYs{{X: lo, Y: 1}, {X: hi, Y: 1}})
		if err != nil {
			return nil, fmt.Errorf("benchreport: plot %s: baseline: %w", e.Name, err)
		}
		one.Color = color.Gray{Y: 80}
		one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(one)
		p.Legend.Add(e.Baseline+" = 1", one)
	}
	p.X.Min, p.X.Max = widen(xmin, xmax, e.LogX)
	p.Y.Min, p.Y.Max = widen(ymin, ymax, e.LogY)
	if !e.LogY && !ratio && p.Y.Min > 0 && ymin >= 0 {
		p.Y.Min = 0 // absolute linear values from zero
	}
	// Head room for the legend (top right).
	if e.LogY {
		p.Y.Max *= math.Pow(p.Y.Max/p.Y.Min, 0.15)
	} else {
		p.Y.Max += 0.15 * (p.Y.Max - p.Y.Min)
	}
	return p, nil
}

// widen pads [lo, hi] by 5 % (a factor on a log axis), and opens a zero
// width range so that the axis has a scale.
func widen(lo, hi float64, log bool) (float64, float64) {
	if log {
		if lo == hi {
			return lo / 2, hi * 2
		}
		f := math.Pow(hi/lo, 0.05)
		return lo / f, hi * f
	}
	if lo == hi {
		d := math.Max(math.Abs(lo)*0.1, 1)
		return lo - d, hi + d
	}
	d := (hi - lo) * 0.05
	return lo - d, hi + d
}

// RenderPNG draws e (see WritePNG) as a PNG image of PNGWidth × PNGHeight
// pixels to w.
func RenderPNG(w io.Writer, e Experiment) error {
	p, err := newPlot(e)
	if err != nil {
		return err
	}
	wt, err := p.WriterTo(vg.Length(PNGWidth)*vg.Inch/pngDPI, vg.Length(PNGHeight)*vg.Inch/pngDPI, "png")
	if err != nil {
		return fmt.Errorf("benchreport: plot %s: %w", e.Name, err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("benchreport: plot %s: %w", e.Name, err)
	}
	return nil
}

// WritePNG writes the figure of e to path: with a baseline, each other
// series as its ratio to the baseline at each X (lines through the medians,
// error bars from min to max) and a dashed line at 1; without a baseline,
// the absolute values. LogX/LogY choose log axes (use LogX for message
// sizes); points that cannot be drawn on a log axis (≤ 0) are left out.
func WritePNG(path string, e Experiment) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("benchreport: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("benchreport: %w", cerr)
		}
	}()
	return RenderPNG(f, e)
}
