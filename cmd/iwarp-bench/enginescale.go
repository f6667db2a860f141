package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/iwarpd/iwarpd/internal/benchreport"
)

// Engines per core (issue 12 item 4; docs/engines.md, docs/benchmarks.md
// "Engines"): one daemon on 127.0.0.1, unbound, serving K independent
// streams at once — K pairs of iwarp-perf processes, RD or RC Send, 64 KiB
// bandwidth, clients blocking on their completion channels (-poll-window
// 0) so that the daemon owns the cores — with -engines 1, then with
// -engines 2 (a fresh daemon each). The figure is the aggregate goodput
// (the sum of the streams' rates) with two engines ÷ with one, round by
// round, both measured in the same round.

// engineScaleResult is the aggregate goodput (Gbit/s) per round of each
// (engines, transport, streams).
type engineScaleResult struct {
	Agg map[string][]float64 `json:"aggregate_gbps"` // key engineScaleKey
}

func engineScaleKey(engines int, tr string, streams int) string {
	return fmt.Sprintf("engines%d_%s_%d", engines, tr, streams)
}

var engineScaleTransports = []string{"rd", "rc"}

// runEngineScale runs the experiment for cfg.EngineStreams, cfg.EngineRounds
// rounds; each round runs -engines 1 then -engines 2.
func runEngineScale(s *session, cfg *benchConfig, progress io.Writer) (engineScaleResult, error) {
	res := engineScaleResult{Agg: map[string][]float64{}}
	dir, err := os.MkdirTemp("", "iwarp-bench-engines-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	bc := *cfg
	bc.PollWindow = 0 // the clients block on their completion channels
	nextRD := 0       // RD ports: server cfg.Ports.RDA+i, client +rdPortsLen/2 (never reused: docs/rd.md)
	for round := range cfg.EngineRounds {
		for _, engines := range []int{1, 2} {
			n := &node{name: "engines" + strconv.Itoa(engines), cpu: -1, addr: "127.0.0.1",
				socket: filepath.Join(dir, fmt.Sprintf("e%d-r%d.sock", engines, round)), rdBase: cfg.Ports.RDA}
			// Node A's ports of the plan (ports.go): its daemon has stopped.
			rd := fmt.Sprintf("%d-%d", cfg.Ports.RDA, cfg.Ports.RDA+rdPortsLen-1)
			args := append([]string{"-rd-ports", rd, "-engines", strconv.Itoa(engines)}, cfg.DaemonArgs...)
			if err := s.startDaemon(cfg.daemonBin(), n, udRange(cfg.Ports.UDA), args); err != nil {
				return res, err
			}
			for _, tr := range engineScaleTransports {
				for _, k := range cfg.EngineStreams {
					agg, err := engineStreams(s, &bc, n, tr, k, &nextRD)
					if err != nil {
						n.daemon.stop()
						return res, fmt.Errorf("round %d, -engines %d, %d %s streams: %w", round+1, engines, k, tr, err)
					}
					key := engineScaleKey(engines, tr, k)
					res.Agg[key] = append(res.Agg[key], agg)
					fmt.Fprintf(progress, "[engines] round %d: -engines %d, %d %s streams: %.2f Gbit/s aggregate\n", round+1, engines, k, tr, agg)
				}
			}
			n.daemon.stop()
		}
	}
	for _, tr := range engineScaleTransports {
		for _, k := range cfg.EngineStreams {
			r := res.ratios(tr, k)
			fmt.Fprintf(progress, "[engines] %d %s streams: -engines 2 / -engines 1 = %s (median %.2f×)\n", k, tr, ratioList(r), median(r))
		}
	}
	return res, nil
}

// engineStreams runs k streams at once on daemon n and returns the sum of
// their goodputs.
func engineStreams(s *session, cfg *benchConfig, n *node, tr string, k int, nextRD *int) (float64, error) {
	var wg sync.WaitGroup
	rates := make([]float64, k)
	errs := make([]error, k)
	for i := range k {
		t := perfTest{label: fmt.Sprintf("%s bw 64 KiB", tr), transport: tr, test: "bw", size: bwSize, iters: cfg.EngineN}
		if tr == "rd" {
			p := *nextRD % (rdPortsLen / 2)
			*nextRD++
			t.rdPorts = [2]int{cfg.Ports.RDA + p, cfg.Ports.RDA + rdPortsLen/2 + p}
		}
		wg.Go(func() {
			rep, err := s.runPerf(cfg, n, n, t)
			if err == nil && (len(rep.Results) == 0 || rep.Results[0].Bandwidth == nil) {
				err = fmt.Errorf("stream %d: no bandwidth in the report", i)
			}
			if err != nil {
				errs[i] = err
				return
			}
			rates[i] = rep.Results[0].Bandwidth.AvgGbps
		})
	}
	wg.Wait()
	sum := 0.0
	for i := range k {
		if errs[i] != nil {
			return 0, errs[i]
		}
		sum += rates[i]
	}
	return sum, nil
}

// ratios are the per-round ratios -engines 2 / -engines 1 of (tr, k).
func (r engineScaleResult) ratios(tr string, k int) []float64 {
	one, two := r.Agg[engineScaleKey(1, tr, k)], r.Agg[engineScaleKey(2, tr, k)]
	var out []float64
	for i := range min(len(one), len(two)) {
		if one[i] > 0 {
			out = append(out, two[i]/one[i])
		}
	}
	return out
}

func ratioList(r []float64) string {
	s := make([]string, len(r))
	for i, v := range r {
		s[i] = fmt.Sprintf("%.2f", v)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// engineScaleExperiment plots the ratios against the number of streams.
func engineScaleExperiment(r engineScaleResult, cfg *benchConfig) benchreport.Experiment {
	e := benchreport.Experiment{
		Name: "engines-scaling", Title: "Engines per core: aggregate goodput, -engines 2 ÷ -engines 1 (loopback)",
		XLabel: "independent streams", YLabel: "aggregate goodput ratio",
		Note: fmt.Sprintf("One daemon, unbound; K pairs of iwarp-perf (64 KiB Send, %d messages, window %d, clients blocking on "+
			"completion channels: -poll-window 0) at once; the sum of the streams' rates with -engines 2 ÷ with -engines 1, "+
			"each round measuring both. Target ≥ 1.5.", cfg.EngineN, cfg.Window),
	}
	for _, tr := range engineScaleTransports {
		sr := benchreport.Series{Name: strings.ToUpper(tr)}
		for _, k := range cfg.EngineStreams {
			if v := r.ratios(tr, k); len(v) > 0 {
				sr.Points = append(sr.Points, benchreport.NewPoint(float64(k), v))
			}
		}
		e.Series = append(e.Series, sr)
	}
	return e
}
