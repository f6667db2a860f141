package main

import (
	"math"

	"github.com/iwarpd/iwarpd/internal/benchreport"
)

// The bench-results/ experiments (internal/benchreport): each is built from
// a scenario's metrics after its rounds, one Point per metric with its
// per-round values, so that ratios pair values of the same round.

// rounds returns m's values with NaN for a missing round.
func rounds(m *metric) []float64 {
	out := make([]float64, len(m.Values))
	for i, v := range m.Values {
		out[i] = math.NaN()
		if v != nil {
			out[i] = *v
		}
	}
	return out
}

// seriesOf returns the series name with one point per (x, metric key) pair
// whose metric exists and has at least one value.
func seriesOf(sc *scenario, name string, xs []float64, keys []string) benchreport.Series {
	s := benchreport.Series{Name: name}
	for i, k := range keys {
		m := sc.byKey[k]
		if m == nil {
			continue
		}
		p := benchreport.NewPoint(xs[i], rounds(m))
		if p.N > 0 {
			s.Points = append(s.Points, p)
		}
	}
	return s
}

// experiment assembles e from its series, keeping those with points; it
// returns false when the baseline (if any) has none.
func experiment(e benchreport.Experiment, series ...benchreport.Series) (benchreport.Experiment, bool) {
	for _, s := range series {
		if len(s.Points) > 0 {
			e.Series = append(e.Series, s)
		}
	}
	if len(e.Series) == 0 {
		return e, false
	}
	if e.Baseline != "" {
		found := false
		for _, s := range e.Series {
			found = found || s.Name == e.Baseline
		}
		if !found {
			return e, false
		}
	}
	return e, true
}

// sweepSeriesOf is series tr of the sweep for test.
func sweepSeriesOf(sc *scenario, cfg *benchConfig, tr sweepSeries, test string) benchreport.Series {
	var xs []float64
	var keys []string
	for _, size := range cfg.sweepSizes(test) {
		if inSweep(tr.key, test, size) {
			xs = append(xs, float64(wireSize(tr.key, size)))
			keys = append(keys, matrixKey(tr.key, test, size))
		}
	}
	return seriesOf(sc, tr.name, xs, keys)
}

func seriesByKey(key string) sweepSeries {
	for _, s := range sweepSeriesList {
		if s.key == key {
			return s
		}
	}
	panic("iwarp-bench: no sweep series " + key)
}

// scenarioExperiments returns the experiments of sc: latency vs size
// (datagram transports against raw UDP; RC against raw TCP), bandwidth vs
// size (against raw TCP), and those the extra runs added (bidirectional
// bandwidth, loss).
func scenarioExperiments(sc *scenario, cfg *benchConfig) []benchreport.Experiment {
	if sc.Skipped != "" {
		return nil
	}
	var out []benchreport.Experiment
	add := func(e benchreport.Experiment, ok bool) {
		if ok {
			out = append(out, e)
		}
	}
	sw := func(key, test string) benchreport.Series { return sweepSeriesOf(sc, cfg, seriesByKey(key), test) }
	add(experiment(benchreport.Experiment{
		Name: sc.Name + "-latency-datagram", Title: "Datagram ping-pong latency vs message size (" + sc.Name + ")",
		XLabel: "message size (octets)", YLabel: "one-way latency, median (µs)", LogX: true, LogY: true,
		Baseline: "raw UDP",
		Note:     "Half the round trip of a ping-pong; raw UDP carries at most 65507 octets (its point at 64 KiB is 65507).",
	}, sw("raw-udp", "lat"), sw("ud", "lat"), sw("rd", "lat")))
	add(experiment(benchreport.Experiment{
		Name: sc.Name + "-latency-rc", Title: "RC ping-pong latency vs message size (" + sc.Name + ")",
		XLabel: "message size (octets)", YLabel: "one-way latency, median (µs)", LogX: true, LogY: true,
		Baseline: "raw TCP",
		Note:     "RC RDMA Write: the receiver polls the last octet of its buffer (ib_write_lat's method).",
	}, sw("raw-tcp", "lat"), sw("rc", "lat"), sw("rc-write", "lat"), sw("rd", "lat")))
	add(experiment(benchreport.Experiment{
		Name: sc.Name + "-bandwidth", Title: "Unidirectional bandwidth vs message size (" + sc.Name + ")",
		XLabel: "message size (octets)", YLabel: "goodput, average (Gb/s)", LogX: true,
		Baseline: "raw TCP",
		Note:     "One stream, a window of outstanding work requests (-window), credits from the receiver.",
	}, sw("raw-tcp", "bw"), sw("raw-udp", "bw"), sw("ud", "bw"), sw("rd", "bw"), sw("rc", "bw"), sw("rc-write", "bw")))
	for _, extra := range sc.extras {
		add(extra(sc, cfg))
	}
	return out
}
