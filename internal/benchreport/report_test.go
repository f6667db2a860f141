package benchreport

import (
	"bytes"
	"errors"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

var nan = math.NaN()

// latency is a small experiment with known figures: raw is the baseline,
// ud has per-round values (ratios paired by round), fi only a summary.
func latency() Experiment {
	return Experiment{
		Name: "latency", Title: "Latency vs message size", XLabel: "size (B)", YLabel: "one-way latency (µs)",
		LogX: true, Baseline: "raw",
		Series: []Series{
			{Name: "raw", Points: []Point{
				NewPoint(64, []float64{10, 12, nan, 11}),
				NewPoint(65507, []float64{20, 20, 22, 21}),
			}},
			{Name: "ud", Points: []Point{
				NewPoint(64, []float64{20, 30, 25, 22}),
				NewPoint(65536, []float64{40, 44, 66, 63}),
			}},
			{Name: "fi", Points: []Point{{X: 64, Median: 33, Min: 24, Max: 40}}},
		},
	}
}

// memory has no baseline.
func memory() Experiment {
	return Experiment{
		Name: "memory", Title: "Memory vs peers", XLabel: "peers", YLabel: "RSS (MiB)",
		Series: []Series{{Name: "iwarpd", Points: []Point{
			NewPoint(1, []float64{100, 102}),
			NewPoint(16, []float64{400, 420}),
			NewPoint(1048576, []float64{1.5e6, 2.5e6, 3e7}), // plain decimals in the CSV, not 2.5e+06
		}}},
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		in          []float64
		med, lo, hi float64
		n           int
	}{
		{[]float64{3, 1, 2}, 2, 1, 3, 3},
		{[]float64{4, 1, nan, 2, 3}, 2.5, 1, 4, 4},
		{[]float64{7}, 7, 7, 7, 1},
		{[]float64{math.Inf(1), 5, 6}, 5.5, 5, 6, 2},
	}
	for _, tt := range tests {
		med, lo, hi, n := Summarize(tt.in)
		if med != tt.med || lo != tt.lo || hi != tt.hi || n != tt.n {
			t.Errorf("Summarize(%v) = %v %v %v %d, want %v %v %v %d", tt.in, med, lo, hi, n, tt.med, tt.lo, tt.hi, tt.n)
		}
	}
	if med, _, _, n := Summarize([]float64{nan}); n != 0 || !math.IsNaN(med) {
		t.Errorf("Summarize(NaN) = %v, %d; want NaN, 0", med, n)
	}
	p := NewPoint(8, []float64{1, nan, 3})
	if p.X != 8 || p.Median != 2 || p.Min != 1 || p.Max != 3 || p.N != 2 || len(p.Rounds) != 3 {
		t.Errorf("NewPoint = %+v", p)
	}
}

func TestRatioOf(t *testing.T) {
	tests := []struct {
		name   string
		p, b   Point
		want   Ratio
		wantOK bool
	}{
		{
			// Per round: 10/1, 2/2, 30/3 = 10, 1, 10 → median 10. The
			// ratio of the medians would be 10/2 = 5: pairing matters.
			name: "per round", p: NewPoint(1, []float64{10, 2, 30}), b: NewPoint(1, []float64{1, 2, 3}),
			want: Ratio{Median: 10, Min: 1, Max: 10, N: 3, PerRound: true}, wantOK: true,
		},
		{
			name: "missing rounds and zero baseline skipped",
			p:    NewPoint(1, []float64{nan, 8, 9, 12}), b: NewPoint(1, []float64{1, 4, 0, 3}),
			want: Ratio{Median: 3, Min: 2, Max: 4, N: 2, PerRound: true}, wantOK: true,
		},
		{
			name: "no pair", p: NewPoint(1, []float64{1, nan}), b: NewPoint(1, []float64{nan, 1}),
			wantOK: false,
		},
		{
			name: "medians", p: Point{Median: 6, Min: 4, Max: 12}, b: Point{Median: 2, Min: 1, Max: 4},
			want: Ratio{Median: 3, Min: 1, Max: 12}, wantOK: true,
		},
		{
			name: "rounds of different length fall back to medians",
			p:    NewPoint(1, []float64{6}), b: NewPoint(1, []float64{2, 2}),
			want: Ratio{Median: 3, Min: 3, Max: 3}, wantOK: true,
		},
		{name: "zero baseline", p: Point{Median: 1, Min: 1, Max: 1}, b: Point{}, wantOK: false},
	}
	for _, tt := range tests {
		got, ok := RatioOf(tt.p, tt.b)
		if ok != tt.wantOK || (ok && got != tt.want) {
			t.Errorf("%s: RatioOf = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestRatioAtPairsX(t *testing.T) {
	e := latency()
	// ud at 65536 pairs with raw at 65507: 40/20, 44/20, 66/22, 63/21.
	r, ok := e.RatioAt(e.Series[1].Points[1])
	if !ok || !r.PerRound || r.N != 4 || r.Min != 2 || r.Max != 3 || math.Abs(r.Median-2.6) > 1e-12 {
		t.Errorf("RatioAt(ud 65536) = %+v, %v; want median 2.6 [2 – 3] over 4 rounds", r, ok)
	}
	if _, ok := e.RatioAt(Point{X: 128, Median: 1}); ok {
		t.Error("RatioAt at an X the baseline lacks: ok")
	}
	if _, ok := memory().RatioAt(Point{X: 1, Median: 1}); ok {
		t.Error("RatioAt without baseline: ok")
	}
}

func TestValidate(t *testing.T) {
	bad := map[string]func(*Experiment){
		"empty name":        func(e *Experiment) { e.Name = "" },
		"dot name":          func(e *Experiment) { e.Name = ".hidden" },
		"slash in name":     func(e *Experiment) { e.Name = "../x" },
		"space in name":     func(e *Experiment) { e.Name = "a b" },
		"no series":         func(e *Experiment) { e.Series = nil },
		"repeated series":   func(e *Experiment) { e.Series[2].Name = "ud" },
		"empty series name": func(e *Experiment) { e.Series[2].Name = "" },
		"unknown baseline":  func(e *Experiment) { e.Baseline = "tcp" },
		"NaN x":             func(e *Experiment) { e.Series[0].Points[0].X = nan },
	}
	for name, mutate := range bad {
		e := latency()
		mutate(&e)
		if err := e.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
		if err := WriteCSV(&bytes.Buffer{}, e); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: WriteCSV = %v, want ErrInvalid", name, err)
		}
	}
	for _, e := range []Experiment{latency(), memory()} {
		if err := e.Validate(); err != nil {
			t.Errorf("%s: %v", e.Name, err)
		}
	}
}

// decodePNG renders e and decodes it, checking the size.
func decodePNG(t *testing.T, e Experiment) image.Image {
	t.Helper()
	var b bytes.Buffer
	if err := RenderPNG(&b, e); err != nil {
		t.Fatalf("%s: RenderPNG: %v", e.Name, err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatalf("%s: png.Decode: %v", e.Name, err)
	}
	if got := img.Bounds().Size(); got.X != PNGWidth || got.Y != PNGHeight {
		t.Fatalf("%s: size %v, want %dx%d", e.Name, got, PNGWidth, PNGHeight)
	}
	return img
}

// pixelCounts returns the number of pixels that are not the white
// background, and of those that are coloured (not grey: a series).
func pixelCounts(img image.Image) (ink, colour int) {
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				ink++
			}
			hi, lo := max(r, g, bl), min(r, g, bl)
			if hi-lo > 0x4000 {
				colour++
			}
		}
	}
	return ink, colour
}

func TestPNG(t *testing.T) {
	single := Experiment{Name: "single", Title: "one point", XLabel: "size", YLabel: "µs", LogX: true, LogY: true,
		Baseline: "a", Series: []Series{
			{Name: "a", Points: []Point{NewPoint(64, []float64{2, 2})}},
			{Name: "b", Points: []Point{NewPoint(64, []float64{3, 3})}},
		}}
	for _, e := range []Experiment{latency(), memory(), single} {
		ink, colour := pixelCounts(decodePNG(t, e))
		// Axes, labels and a legend are a few thousand pixels; the series
		// are drawn in colour.
		if ink < 2000 || colour < 20 {
			t.Errorf("%s: %d non-background pixels, %d coloured: blank plot?", e.Name, ink, colour)
		}
	}
	empty := memory()
	empty.Series[0].Points = []Point{NewPoint(1, []float64{nan})}
	ink, colour := pixelCounts(decodePNG(t, empty))
	if ink < 1000 || colour != 0 {
		t.Errorf("no data: %d non-background pixels, %d coloured; want axes only", ink, colour)
	}
}

func TestWriteAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bench-results")
	exps := []Experiment{latency(), memory()}
	if err := WriteAll(dir, Machine{Description: "test machine"}, exps); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"latency.csv", "latency.png", "memory.csv", "memory.png", SummaryFile} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: %v (size %v)", name, err, st)
		}
	}
	f, err := os.Open(filepath.Join(dir, "latency.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if cfg, err := png.DecodeConfig(f); err != nil || cfg.Width != PNGWidth || cfg.Height != PNGHeight {
		t.Errorf("latency.png: %+v, %v", cfg, err)
	}
	var want bytes.Buffer
	if err := WriteCSV(&want, latency()); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "latency.csv")); !bytes.Equal(got, want.Bytes()) {
		t.Errorf("latency.csv differs from WriteCSV")
	}

	for _, bad := range [][]Experiment{{latency(), latency()}, {{Name: "summary", Series: memory().Series}}} {
		d := filepath.Join(t.TempDir(), "out")
		if err := WriteAll(d, Machine{}, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("WriteAll(%s...) = %v, want ErrInvalid", bad[0].Name, err)
		}
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("WriteAll with invalid experiments created %s", d)
		}
	}
}

// FuzzRatioOf: per-round ratios never panic and are ordered min ≤ median ≤
// max; the Markdown and CSV writers accept whatever values come out.
func FuzzRatioOf(f *testing.F) {
	f.Add(10.0, 2.0, 30.0, 1.0, 2.0, 3.0)
	f.Add(nan, 8.0, 0.0, 1.0, 0.0, -3.0)
	f.Fuzz(func(t *testing.T, p0, p1, p2, b0, b1, b2 float64) {
		p, b := NewPoint(1, []float64{p0, p1, p2}), NewPoint(1, []float64{b0, b1, b2})
		if r, ok := RatioOf(p, b); ok && !(r.Min <= r.Median && r.Median <= r.Max) {
			t.Fatalf("RatioOf = %+v", r)
		}
		e := Experiment{Name: "f", Baseline: "b", Series: []Series{{Name: "b", Points: []Point{b}}, {Name: "p", Points: []Point{p}}}}
		if err := WriteCSV(&bytes.Buffer{}, e); err != nil {
			t.Fatal(err)
		}
		if err := WriteMarkdown(&bytes.Buffer{}, Machine{}, []Experiment{e}); err != nil {
			t.Fatal(err)
		}
	})
}
