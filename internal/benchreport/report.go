package benchreport

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Machine describes where the numbers were measured. Absolute numbers are
// printed only beside it.
type Machine struct {
	Description string // CPU, cores, kernel, virtualisation: one line
	Tree        string // git commit of the tree measured, "" when unknown
	Config      string // benchmark configuration, one line ("" for none)
	// Missed lists the experiments that did not run here (a missing tool,
	// no root for network namespaces): WriteMarkdown prints a MISS line for
	// each, so that a skipped experiment is never silent.
	Missed []Miss
}

// Miss is one experiment (or part of one) that did not run, and why.
type Miss struct {
	Experiment string // what did not run, e.g. "veth-loss"
	Reason     string // why, and what a user can do about it
}

// Point is one measured quantity at one X (a message size, a number of
// peers): the median and range over the rounds that produced it.
//
// Rounds, when set, holds one value per round, NaN for a round without a
// value; round i of every series of an experiment must come from the same
// round of the run, so that ratios pair values by round (see RatioOf).
// NewPoint fills Median, Min, Max and N from Rounds.
type Point struct {
	X                float64
	Median, Min, Max float64
	N                int       // rounds with a value; 0 = unknown (no Rounds) or no data
	Rounds           []float64 // optional, NaN = missing round
}

// NewPoint returns the point at x summarising rounds (NaN = missing). With
// no value at all, Median, Min and Max are NaN and N is 0.
func NewPoint(x float64, rounds []float64) Point {
	med, lo, hi, n := Summarize(rounds)
	return Point{X: x, Median: med, Min: lo, Max: hi, N: n, Rounds: append([]float64(nil), rounds...)}
}

// Summarize returns the median, minimum, maximum and count of the finite
// values (NaN and ±Inf are skipped); the median of an even count is the
// mean of the two middle values, as iwarp-bench's summarize. With no finite
// value it returns NaN, NaN, NaN, 0.
func Summarize(values []float64) (median, lo, hi float64, n int) {
	v := make([]float64, 0, len(values))
	for _, x := range values {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		nan := math.NaN()
		return nan, nan, nan, 0
	}
	sort.Float64s(v)
	median = v[len(v)/2]
	if len(v)%2 == 0 {
		median = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return median, v[0], v[len(v)-1], len(v)
}

// Series is one line of an experiment (one program or configuration), its
// points in increasing X.
type Series struct {
	Name   string
	Points []Point
}

// Experiment is one figure: a CSV file, a PNG plot and a table of the
// summary. Name is the file name stem (letters, digits, '-', '_', '.').
// Baseline names the series every other series is divided by; "" means the
// experiment has no baseline (memory vs peers, say): its ratio columns are
// empty and its plot shows absolute values.
type Experiment struct {
	Name, Title, XLabel, YLabel string
	LogX, LogY                  bool
	Baseline                    string
	Note                        string // optional paragraph under the Markdown heading
	Series                      []Series
}

// Ratio is a point divided by its baseline point.
type Ratio struct {
	Median, Min, Max float64
	N                int  // rounds paired (PerRound), else 0
	PerRound         bool // computed round by round
}

// ErrInvalid is wrapped by every error about a malformed Experiment.
var ErrInvalid = errors.New("invalid experiment")

// RatioOf divides p by its baseline point b. When both carry Rounds of the
// same length, the ratio is computed round by round (p.Rounds[i] /
// b.Rounds[i], both from round i, skipping rounds where either is missing or
// the baseline is not positive) and summarised like a point: the median of
// the per-round ratios, with their min and max. Otherwise it is
// p.Median/b.Median, with the widest range the two spreads allow:
// p.Min/b.Max to p.Max/b.Min. ok is false when no ratio can be formed.
func RatioOf(p, b Point) (r Ratio, ok bool) {
	if len(p.Rounds) > 0 && len(p.Rounds) == len(b.Rounds) {
		q := make([]float64, len(p.Rounds))
		for i := range q {
			q[i] = math.NaN()
			if den := b.Rounds[i]; den > 0 && !math.IsInf(den, 0) {
				q[i] = p.Rounds[i] / den
			}
		}
		med, lo, hi, n := Summarize(q)
		if n == 0 {
			return Ratio{}, false
		}
		return Ratio{Median: med, Min: lo, Max: hi, N: n, PerRound: true}, true
	}
	if !(b.Median > 0) || !finite(p.Median) || math.IsInf(b.Median, 0) {
		return Ratio{}, false
	}
	r = Ratio{Median: p.Median / b.Median, Min: math.NaN(), Max: math.NaN()}
	if b.Max > 0 && finite(p.Min) && finite(b.Max) {
		r.Min = p.Min / b.Max
	}
	if b.Min > 0 && finite(p.Max) && finite(b.Min) {
		r.Max = p.Max / b.Min
	}
	return r, true
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// xTolerance is the relative difference under which two X values are the
// same point: 65507 (the largest UDP datagram, raw UDP's bandwidth size)
// pairs with 65536.
const xTolerance = 1e-3

// sameX reports whether a and b are the same X within xTolerance.
func sameX(a, b float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= xTolerance*math.Max(math.Abs(a), math.Abs(b))
}

// baselineOf returns the baseline series of e, nil when it has none.
func (e *Experiment) baselineOf() *Series {
	if e.Baseline == "" {
		return nil
	}
	for i := range e.Series {
		if e.Series[i].Name == e.Baseline {
			return &e.Series[i]
		}
	}
	return nil
}

// RatioAt returns the ratio of point p of a series of e to the baseline
// point at the same X. ok is false when e has no baseline, the baseline has
// no point at p.X, or no ratio can be formed.
func (e Experiment) RatioAt(p Point) (Ratio, bool) {
	base := e.baselineOf()
	if base == nil {
		return Ratio{}, false
	}
	for _, b := range base.Points {
		if sameX(b.X, p.X) {
			return RatioOf(p, b)
		}
	}
	return Ratio{}, false
}

// Validate checks what the writers rely on: a usable file name, a title,
// unique non-empty series names, a baseline that names one of them, and
// finite X values.
func (e Experiment) Validate() error {
	if e.Name == "" || e.Name[0] == '.' {
		return fmt.Errorf("benchreport: experiment %q: bad name: %w", e.Name, ErrInvalid)
	}
	for _, c := range e.Name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return fmt.Errorf("benchreport: experiment %q: name may hold only letters, digits, '-', '_', '.': %w", e.Name, ErrInvalid)
		}
	}
	if len(e.Series) == 0 {
		return fmt.Errorf("benchreport: experiment %q: no series: %w", e.Name, ErrInvalid)
	}
	seen := map[string]bool{}
	for _, s := range e.Series {
		if s.Name == "" || seen[s.Name] {
			return fmt.Errorf("benchreport: experiment %q: empty or repeated series name %q: %w", e.Name, s.Name, ErrInvalid)
		}
		seen[s.Name] = true
		for _, p := range s.Points {
			if !finite(p.X) {
				return fmt.Errorf("benchreport: experiment %q: series %q: x %v: %w", e.Name, s.Name, p.X, ErrInvalid)
			}
		}
	}
	if e.Baseline != "" && !seen[e.Baseline] {
		return fmt.Errorf("benchreport: experiment %q: baseline %q is not a series: %w", e.Name, e.Baseline, ErrInvalid)
	}
	return nil
}

// xs returns the sorted distinct X values of every series of e (within
// xTolerance; the largest stands for its group, so 65507 and 65536 print
// as 65536).
func (e *Experiment) xs() []float64 {
	var out []float64
	for _, s := range e.Series {
		for _, p := range s.Points {
			found := false
			for i, x := range out {
				if sameX(x, p.X) {
					out[i] = math.Max(x, p.X)
					found = true
					break
				}
			}
			if !found {
				out = append(out, p.X)
			}
		}
	}
	sort.Float64s(out)
	return out
}

// pointAt returns the point of s at x (within xTolerance).
func (s *Series) pointAt(x float64) (Point, bool) {
	for _, p := range s.Points {
		if sameX(p.X, x) {
			return p, true
		}
	}
	return Point{}, false
}
