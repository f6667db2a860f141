package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/iwarpd/iwarpd/internal/benchreport"
)

// summary is the median and range of one quantity over the rounds that
// produced it.
type summary struct {
	N      int     `json:"n"` // rounds with a value
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// summarize returns the summary of the non-nil values (N = 0 when none).
func summarize(values []*float64) summary {
	var v []float64
	for _, p := range values {
		if p != nil {
			v = append(v, *p)
		}
	}
	if len(v) == 0 {
		return summary{}
	}
	sort.Float64s(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return summary{N: len(v), Median: med, Min: v[0], Max: v[len(v)-1]}
}

// metric is one measured quantity of a scenario, one value per round (nil
// for a round in which its run failed or was not made).
type metric struct {
	Key     string     `json:"key"`
	Name    string     `json:"name"`
	Unit    string     `json:"unit"` // "us" (one way) or "Gb/s"
	Values  []*float64 `json:"values"`
	Summary summary    `json:"summary"`
	// Reference marks a metric measured with another program (fi_pingpong):
	// its failures are warnings, never a failure of the benchmark.
	Reference bool `json:"reference,omitempty"`
}

// ratio relates a metric to its baseline round by round (both from the same
// round), with an informational target.
type ratio struct {
	Name    string     `json:"name"`
	Num     string     `json:"numerator"`   // metric key
	Den     string     `json:"denominator"` // metric key
	Values  []*float64 `json:"values"`      // per round: num/den
	Summary summary    `json:"summary"`
	// Op is "<=" or ">=" against Target; "" means no target (shown for
	// information only).
	Op      string  `json:"op,omitempty"`
	Target  float64 `json:"target,omitempty"`
	Verdict string  `json:"verdict"` // PASS, MISS, or n/a (no target or no data)
}

// ratioSpec says which ratios a scenario reports.
type ratioSpec struct {
	name     string
	num, den string
	op       string
	target   float64
}

// scenario is what one scenario produced.
type scenario struct {
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Skipped     string    `json:"skipped,omitempty"` // why it did not run
	Rounds      int       `json:"rounds"`
	Metrics     []*metric `json:"metrics"`
	Ratios      []*ratio  `json:"ratios"`
	Failures    []string  `json:"failures,omitempty"` // runs that failed or data that was wrong
	Warnings    []string  `json:"warnings,omitempty"` // reference runs that failed, and the like
	// Missed are the parts of the scenario that did not run here (a missing
	// tool): a MISS line on stdout and in summary.md, never silence.
	Missed []benchreport.Miss `json:"missed,omitempty"`

	ratioSpecs []ratioSpec
	byKey      map[string]*metric
	// extras build the bench-results/ experiments beyond the size sweeps
	// (report.go), after finish.
	extras []func(*scenario, *benchConfig) (benchreport.Experiment, bool)
}

func newScenario(name, description string, rounds int) *scenario {
	return &scenario{Name: name, Description: description, Rounds: rounds, byKey: map[string]*metric{}}
}

// addMetric declares a metric (in table order).
func (s *scenario) addMetric(key, name, unit string, reference bool) *metric {
	m := &metric{Key: key, Name: name, Unit: unit, Values: make([]*float64, s.Rounds), Reference: reference}
	s.Metrics = append(s.Metrics, m)
	s.byKey[key] = m
	return m
}

// record stores the value of metric key in round r (0-based).
func (s *scenario) record(key string, r int, v float64) {
	m := s.byKey[key]
	if m == nil || r < 0 || r >= len(m.Values) {
		panic(fmt.Sprintf("iwarp-bench: record %q round %d: no such metric or round", key, r))
	}
	m.Values[r] = &v
}

// addRatio declares a ratio num/den with an optional target.
func (s *scenario) addRatio(name, num, den, op string, target float64) {
	s.ratioSpecs = append(s.ratioSpecs, ratioSpec{name: name, num: num, den: den, op: op, target: target})
}

// finish computes the summaries and ratios.
func (s *scenario) finish() {
	for _, m := range s.Metrics {
		m.Summary = summarize(m.Values)
	}
	s.Ratios = s.Ratios[:0]
	for _, spec := range s.ratioSpecs {
		num, den := s.byKey[spec.num], s.byKey[spec.den]
		if num == nil || den == nil {
			continue
		}
		r := &ratio{Name: spec.name, Num: spec.num, Den: spec.den, Op: spec.op, Target: spec.target,
			Values: make([]*float64, s.Rounds)}
		for i := range r.Values {
			if num.Values[i] != nil && den.Values[i] != nil && *den.Values[i] > 0 {
				q := *num.Values[i] / *den.Values[i]
				r.Values[i] = &q
			}
		}
		r.Summary = summarize(r.Values)
		r.Verdict = verdict(r.Summary, spec.op, spec.target)
		s.Ratios = append(s.Ratios, r)
	}
}

// verdict compares the median ratio with its target.
func verdict(sum summary, op string, target float64) string {
	if sum.N == 0 || op == "" {
		return "n/a"
	}
	ok := false
	switch op {
	case "<=":
		ok = sum.Median <= target
	case ">=":
		ok = sum.Median >= target
	}
	if ok {
		return "PASS"
	}
	return "MISS"
}

// document is the whole -json output.
type document struct {
	Machine   string             `json:"machine"`
	Tree      string             `json:"tree,omitempty"` // git commit of the working tree, when known
	Config    benchConfig        `json:"config"`
	Scenarios []*scenario        `json:"scenarios"`
	Idle      *idleResult        `json:"idle_cpu_percent,omitempty"`
	Engines   *engineScaleResult `json:"engines_per_core,omitempty"`
	Failures  []string           `json:"failures,omitempty"` // outside the scenarios (idle cost, memory)
	OK        bool               `json:"ok"`                 // no run failed and every message was intact
}

func writeJSON(w io.Writer, doc *document) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// formatValue prints v in unit with sensible precision.
func formatValue(v float64, unit string) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "-"
	case unit == "x":
		return fmt.Sprintf("%.2f×", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func unitLabel(unit string) string {
	if unit == "us" {
		return "µs"
	}
	return unit
}

func formatSummary(sum summary, unit string) (median, span string) {
	if sum.N == 0 {
		return "-", "(no data)"
	}
	return formatValue(sum.Median, unit), fmt.Sprintf("[%s – %s]", formatValue(sum.Min, unit), formatValue(sum.Max, unit))
}

func targetLabel(op string, target float64) string {
	switch op {
	case "<=":
		return fmt.Sprintf("≤ %.2g×", target)
	case ">=":
		return fmt.Sprintf("≥ %.2g×", target)
	}
	return "—"
}

// writeTables prints every scenario as a table: the metrics with their
// medians and ranges over the rounds, then the ratios with their targets.
func writeTables(w io.Writer, doc *document) error {
	fmt.Fprintf(w, "machine: %s\n", doc.Machine)
	if doc.Tree != "" {
		fmt.Fprintf(w, "tree:    %s\n", doc.Tree)
	}
	fmt.Fprintf(w, "config:  %s\n", doc.Config.describe())
	for _, s := range doc.Scenarios {
		fmt.Fprintf(w, "\n== %s: %s\n", s.Name, s.Description)
		if s.Skipped != "" {
			fmt.Fprintf(w, "   MISS (not run): %s\n", oneLine(s.Skipped))
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "   metric\tmedian\t[min – max] over %d rounds\tunit\t\n", s.Rounds)
		for _, m := range s.Metrics {
			med, span := formatSummary(m.Summary, m.Unit)
			fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t\n", m.Name, med, span, unitLabel(m.Unit))
		}
		fmt.Fprintln(tw, "   \t\t\t\t")
		fmt.Fprintf(tw, "   ratio (per round, same run)\tmedian\t[min – max]\ttarget\tverdict\n")
		for _, r := range s.Ratios {
			med, span := formatSummary(r.Summary, "x")
			fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%s\n", r.Name, med, span, targetLabel(r.Op, r.Target), r.Verdict)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, f := range s.Failures {
			fmt.Fprintf(w, "   FAILED: %s\n", oneLine(f))
		}
		for _, f := range s.Warnings {
			fmt.Fprintf(w, "   warning: %s\n", oneLine(f))
		}
		for _, ms := range s.Missed {
			fmt.Fprintf(w, "   MISS (not run) %s: %s\n", ms.Experiment, oneLine(ms.Reason))
		}
	}
	if doc.Idle != nil {
		fmt.Fprintf(w, "\n== idle cost (loopback): iwarpd CPU %.2f %% alone, %.2f %% with one idle client (of one CPU, over %v each)\n",
			doc.Idle.Alone, doc.Idle.WithClient, doc.Config.Idle)
	}
	if doc.Engines != nil {
		fmt.Fprintf(w, "\n== engines per core (loopback, one daemon, clients blocking): aggregate goodput -engines 2 / -engines 1\n")
		for _, tr := range engineScaleTransports {
			for _, k := range doc.Config.EngineStreams {
				r := doc.Engines.ratios(tr, k)
				fmt.Fprintf(w, "   %d %s streams: %.2f× median %s (target ≥ 1.5×)\n", k, strings.ToUpper(tr), median(r), ratioList(r))
			}
		}
	}
	for _, f := range doc.Failures {
		fmt.Fprintf(w, "   FAILED: %s\n", oneLine(f))
	}
	verdictLine := "all runs completed, every message intact"
	if !doc.OK {
		verdictLine = "SOME RUNS FAILED (see FAILED lines)"
	}
	_, err := fmt.Fprintf(w, "\n%s; targets are informational (PASS/MISS never changes the exit status)\n", verdictLine)
	return err
}

// miss records that what did not run in s, and why, with a progress line.
func (s *scenario) miss(what, why string, progress io.Writer) {
	s.Missed = append(s.Missed, benchreport.Miss{Experiment: what, Reason: why})
	fmt.Fprintf(progress, "[%s] MISS %s: %s\n", s.Name, what, why)
}

// missedOf lists what did not run in doc: every skipped scenario as a
// whole, then the parts of the others, for summary.md.
func missedOf(doc *document) []benchreport.Miss {
	var out []benchreport.Miss
	for _, s := range doc.Scenarios {
		if s.Skipped != "" {
			out = append(out, benchreport.Miss{Experiment: s.Name + " (every run)", Reason: s.Skipped})
		}
		out = append(out, s.Missed...)
	}
	return out
}

// oneLine squeezes a multi-line error into one line for the table.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}
