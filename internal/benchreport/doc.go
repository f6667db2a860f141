// Package benchreport writes the results of the benchmark suite (make
// bench → bench-results/): a CSV file per experiment, a Markdown summary and
// PNG plots drawn with gonum.org/v1/plot (latency vs message size, bandwidth
// vs message size, memory vs peers).
//
// The rule of docs/benchmarks.md is kept by construction: every figure of
// the summary and of the plots is a ratio to the experiment's baseline
// series measured in the same run, the median over the rounds with the
// [min – max] spread beside it; absolute numbers appear only in the CSV
// files and in the summary's last section, headed by the machine
// description. An experiment without a baseline (memory vs peers) has no
// ratio table and is plotted in absolute values.
//
// Ratios are per round when both points carry Rounds of the same length
// (round i of the series over round i of the baseline, then the median,
// min and max of those quotients: what iwarp-bench's ratio does); otherwise
// they are the ratio of the medians, with the widest range the two spreads
// allow (Min/baseline.Max to Max/baseline.Min), marked "*" in the summary.
// Points pair with the baseline point at the same X within 0.1 % (raw UDP's
// 65507-octet datagrams pair with 65536).
//
// # Use from cmd/iwarp-bench
//
// The program's results map one to one: a metric (Values []*float64, one
// per round, nil when missing) becomes a Point, a ratio's denominator
// metric becomes the Baseline series, and a sweep over message sizes or
// peers is the X axis. For example:
//
//	rounds := make([]float64, len(m.Values))
//	for i, v := range m.Values {
//		rounds[i] = math.NaN()
//		if v != nil {
//			rounds[i] = *v
//		}
//	}
//	lat := benchreport.Experiment{
//		Name: "loopback-latency", Title: "UD latency vs message size (loopback)",
//		XLabel: "message size (octets)", YLabel: "one-way latency (µs)",
//		LogX: true, Baseline: "raw UDP",
//		Series: []benchreport.Series{
//			{Name: "raw UDP", Points: []benchreport.Point{benchreport.NewPoint(64, rawRounds)}},
//			{Name: "UD", Points: []benchreport.Point{benchreport.NewPoint(64, rounds)}},
//		},
//	}
//	err := benchreport.WriteAll("bench-results", benchreport.Machine{
//		Description: doc.Machine, Tree: doc.Tree, Config: doc.Config.describe(),
//	}, []benchreport.Experiment{lat})
//
// Use NewPoint with the per-round values (NaN for a missing round) rather
// than filling Median/Min/Max by hand, so that ratios are paired by round.
// Write nothing in a test that asserts a time: these writers only format.
//
// Imports: the standard library and gonum.org/v1/plot (only this package
// of the module may import it, see layout_test.go). It never logs.
package benchreport
