package main

import (
	"fmt"

	"github.com/iwarpd/iwarpd/internal/benchreport"
)

// RD against UD, RC and the raw sockets (loopback), RD under loss (veth with
// nftables), and RD latency against fi_pingpong's rxd (docs/benchmarks.md).

// Metric keys of the RD runs outside the size sweep (sweep.go).
const (
	kRDLatMean = "rd_lat_mean" // RD Send lat 64 B, mean (against fi rxd)
)

// perfStep is one iwarp-perf run recording its median latency (and mean,
// under meanKey) or its average bandwidth under key.
func perfStep(s *session, cfg *benchConfig, sc *scenario, a, b *node, key, meanKey string, t perfTest) step {
	return step{key: key, label: t.label, run: func(r int) (string, error) {
		rep, err := s.runPerf(cfg, a, b, t)
		if err != nil {
			return "", udContext(cfg, err, t.transport, a, b)
		}
		if t.test == "lat" {
			l := rep.Results[0].Latency
			sc.record(key, r, l.MedianUS)
			if meanKey != "" {
				sc.record(meanKey, r, l.AvgUS)
			}
			return fmt.Sprintf("median %.2f µs, mean %.2f µs, p99 %.2f µs one way", l.MedianUS, l.AvgUS, l.P99US), nil
		}
		w := rep.Results[0].Bandwidth
		sc.record(key, r, w.AvgGbps)
		return fmt.Sprintf("%.2f Gb/s average, %.2f Gb/s peak", w.AvgGbps, w.PeakGbps), nil
	}}
}

// lossKey is the metric of series tr ("rd" or "raw-tcp") at loss pct %.
func lossKey(tr string, pct int) string { return fmt.Sprintf("loss_%s_%d", tr, pct) }

// lossSize is the message size of the loss runs: -loss-size, 64 KiB if
// not positive.
func lossSize(cfg *benchConfig) int {
	if cfg.LossSize <= 0 {
		return bwSize
	}
	return cfg.LossSize
}

// lossMetrics declares the veth loss runs: RD Send bw at -loss-size and its
// raw TCP baseline at each loss rate of -loss, and RD's goodput under loss
// as a ratio to its own without loss (target >= 0.7 at 1 %).
func lossMetrics(sc *scenario, cfg *benchConfig) {
	size := sizeLabel(lossSize(cfg))
	for _, pct := range cfg.Loss {
		sc.addMetric(lossKey("raw-tcp", pct), fmt.Sprintf("raw TCP bw %s, loss %d %% each way", size, pct), "Gb/s", false)
		sc.addMetric(lossKey("rd", pct), fmt.Sprintf("RD Send bw %s, loss %d %% each way", size, pct), "Gb/s", false)
	}
	if !contains(cfg.Loss, 0) {
		return
	}
	for _, pct := range cfg.Loss {
		if pct == 0 {
			continue
		}
		op, target := "", 0.0
		if pct == 1 {
			op, target = ">=", 0.7
		}
		sc.addRatio(fmt.Sprintf("RD bw with %d %% loss / without", pct), lossKey("rd", pct), lossKey("rd", 0), op, target)
		sc.addRatio(fmt.Sprintf("RD bw / raw TCP bw, %d %% loss", pct), lossKey("rd", pct), lossKey("raw-tcp", pct), "", 0)
	}
}

// lossSteps returns, for each loss rate, a raw TCP then an RD bandwidth run
// with that loss set (nftables) for their duration.
func lossSteps(s *session, cfg *benchConfig, sc *scenario, a, b *node) []step {
	var steps []step
	for _, pct := range cfg.Loss {
		for _, tr := range []string{"raw-tcp", "rd"} {
			size := lossSize(cfg)
			t := perfTest{label: fmt.Sprintf("%s bw %s (veth, loss %d %%)", transportLabel[tr], sizeLabel(size), pct), transport: tr,
				test: "bw", size: size, iters: cfg.BWIters}
			if tr == "rd" {
				t.op = "send"
			} else {
				// raw TCP without GSO/TSO under loss moves 0.1–0.3 Gb/s
				// here: a tenth of the messages keeps each run to seconds.
				t.iters = max(cfg.BWIters/10, 100)
			}
			st := perfStep(s, cfg, sc, a, b, lossKey(tr, pct), "", t)
			run := st.run
			st.run = func(r int) (string, error) {
				if err := setWirePackets(a.netns, b.netns, true); err != nil {
					return "", err
				}
				if err := setLoss(a.netns, b.netns, pct); err != nil {
					return "", err
				}
				what, err := run(r)
				if cerr := setLoss(a.netns, b.netns, 0); cerr != nil && err == nil {
					err = cerr
				}
				if cerr := setWirePackets(a.netns, b.netns, false); cerr != nil && err == nil {
					err = cerr
				}
				return what, err
			}
			steps = append(steps, st)
		}
	}
	return steps
}

// lossExperiment is goodput against the loss rate, RD against raw TCP
// under the same loss.
func lossExperiment(sc *scenario, cfg *benchConfig) (benchreport.Experiment, bool) {
	xs := make([]float64, len(cfg.Loss))
	var rdKeys, tcpKeys []string
	for i, pct := range cfg.Loss {
		xs[i] = float64(pct)
		rdKeys = append(rdKeys, lossKey("rd", pct))
		tcpKeys = append(tcpKeys, lossKey("raw-tcp", pct))
	}
	return experiment(benchreport.Experiment{
		Name: sc.Name + "-loss", Title: "Goodput under packet loss, " + sizeLabel(lossSize(cfg)) + " messages (" + sc.Name + ")",
		XLabel: "loss each way (%)", YLabel: "goodput, average (Gb/s)", Baseline: "raw TCP",
		Note: "Loss made with nftables in each namespace (input hook, numgen random, TCP and UDP alike; veth gso_max_segs 1, so per wire packet): " +
			"the kernel has no netem. RD recovers losses itself; raw TCP is the kernel's recovery.",
	}, seriesOf(sc, "raw TCP", xs, tcpKeys), seriesOf(sc, "RD Send", xs, rdKeys))
}

// The loss runs are -only keys too: loss_rd_P and loss_raw-tcp_P.
func init() {
	for pct := 0; pct <= 50; pct++ {
		knownRuns[lossKey("rd", pct)] = true
		knownRuns[lossKey("raw-tcp", pct)] = true
	}
}
