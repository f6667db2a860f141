package main

import (
	"fmt"

	"github.com/iwarpd/iwarpd/internal/benchreport"
)

// Bidirectional bandwidth: two iwarp-perf pairs at once in opposite
// directions (server on A and client on B; server on B and client on A),
// through the same two daemons; the figure is the sum of the two average
// goodputs, against raw TCP measured the same way in the same round.

var (
	// 2 KiB is the size at which the datagram-iWARP research reports
	// UD bidirectional bandwidth about 40% above RC (seed-digest §3).
	fullBidirSizes  = []int{2048, 65536, 1 << 20}
	quickBidirSizes = []int{65536}
	bidirSeries     = []string{"raw-tcp", "ud", "rd", "rc", "rc-write"}
)

// inBidir: UD runs bidirectionally only up to 64 KiB: at 1 MiB (713
// datagrams a message, both ways at once) a lost datagram stalls the run.
func inBidir(tr string, size int) bool { return tr != "ud" || size <= 65536 }

func bidirKey(tr string, size int) string { return fmt.Sprintf("bidir_%s_%d", tr, size) }

func (c *benchConfig) bidirSizes() []int {
	if !c.Bidir {
		return nil
	}
	if c.Quick {
		return quickBidirSizes
	}
	return fullBidirSizes
}

func init() {
	for _, tr := range bidirSeries {
		for _, size := range fullBidirSizes {
			knownRuns[bidirKey(tr, size)] = true
		}
	}
}

func bidirMetrics(sc *scenario, cfg *benchConfig) {
	for _, size := range cfg.bidirSizes() {
		for _, tr := range bidirSeries {
			if !inBidir(tr, size) {
				continue
			}
			sc.addMetric(bidirKey(tr, size), fmt.Sprintf("%s bw %s bidirectional (sum of both ways)", seriesByKey(tr).name, sizeLabel(size)), "Gb/s", false)
		}
		for _, tr := range bidirSeries[1:] {
			if !inBidir(tr, size) {
				continue
			}
			sc.addRatio(fmt.Sprintf("%s / raw TCP bidirectional bw %s", transportLabel[tr], sizeLabel(size)),
				bidirKey(tr, size), bidirKey("raw-tcp", size), "", 0)
		}
		if inBidir("ud", size) {
			sc.addRatio(fmt.Sprintf("UD / RC Send bidirectional bw %s (research: about 1.4× at 2 KiB)", sizeLabel(size)),
				bidirKey("ud", size), bidirKey("rc", size), "", 0)
		}
	}
}

// bidirSteps returns one step per size and series, each running its two
// pairs at once.
func bidirSteps(s *session, cfg *benchConfig, sc *scenario, a, b *node) []step {
	var steps []step
	for _, size := range cfg.bidirSizes() {
		for _, tr := range bidirSeries {
			if !inBidir(tr, size) {
				continue
			}
			ser := seriesByKey(tr)
			t := perfTest{label: fmt.Sprintf("%s bw %s bidirectional", ser.name, sizeLabel(size)), transport: ser.transport,
				op: ser.op, test: "bw", size: size, iters: sweepIters(cfg, "bw", size)}
			key := bidirKey(tr, size)
			steps = append(steps, step{key: key, label: t.label, run: func(r int) (string, error) {
				type res struct {
					rep *perfReport
					err error
				}
				rev := make(chan res, 1)
				go func() {
					rep, err := s.runPerf(cfg, b, a, t)
					rev <- res{rep, err}
				}()
				fwd, err := s.runPerf(cfg, a, b, t)
				back := <-rev
				if err != nil {
					return "", fmt.Errorf("run from B to A: %w", err)
				}
				if back.err != nil {
					return "", fmt.Errorf("run from A to B: %w", back.err)
				}
				g1, g2 := fwd.Results[0].Bandwidth.AvgGbps, back.rep.Results[0].Bandwidth.AvgGbps
				sc.record(key, r, g1+g2)
				return fmt.Sprintf("%.2f Gb/s (%.2f B→A + %.2f A→B)", g1+g2, g1, g2), nil
			}})
		}
	}
	return steps
}

// bidirExperiment is the bidirectional goodput against the size.
func bidirExperiment(sc *scenario, cfg *benchConfig) (benchreport.Experiment, bool) {
	var series []benchreport.Series
	for _, tr := range bidirSeries {
		var xs []float64
		var keys []string
		for _, size := range cfg.bidirSizes() {
			if !inBidir(tr, size) {
				continue
			}
			xs = append(xs, float64(size))
			keys = append(keys, bidirKey(tr, size))
		}
		series = append(series, seriesOf(sc, seriesByKey(tr).name, xs, keys))
	}
	return experiment(benchreport.Experiment{
		Name: sc.Name + "-bandwidth-bidir", Title: "Bidirectional bandwidth vs message size (" + sc.Name + ")",
		XLabel: "message size (octets)", YLabel: "goodput, both ways summed (Gb/s)", LogX: true, Baseline: "raw TCP",
		Note: "Two pairs at once in opposite directions through the same two daemons; the sum of their average goodputs.",
	}, series...)
}
