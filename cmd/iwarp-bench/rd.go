package main

import (
	"fmt"
	"strconv"
)

// RD against UD, RC and the raw sockets (loopback), RD under loss (veth with
// netem), and RD latency against fi_pingpong's rxd (docs/benchmarks.md).

// Metric keys of the RD runs outside the size matrix.
const (
	kRDLatMean = "rd_lat_mean"     // RD Send lat 64 B, mean (against fi rxd)
	kRDBWClean = "rd_bw_veth"      // veth, RD Send bw 64 KiB, no loss
	kRDBWLoss  = "rd_bw_veth_loss" // veth with netem loss 1%
	lossRate   = "1%"
)

// matrixSizes are the message sizes of the RD/UD/RC comparison.
var matrixSizes = []int{64, 4096, 65536, 1 << 20}

// matrixTransports are compared at each size: raw UDP only up to 4 KiB
// (its largest datagram is 65507 octets), UD up to 64 KiB.
var matrixTransports = []string{"raw-udp", "raw-tcp", "ud", "rc", "rd"}

func inMatrix(transport string, size int) bool {
	switch transport {
	case "raw-udp":
		return size <= 4096
	case "ud":
		return size <= 65536
	}
	return true
}

func sizeLabel(size int) string {
	switch {
	case size >= 1<<20:
		return strconv.Itoa(size>>20) + " MiB"
	case size >= 1<<10:
		return strconv.Itoa(size>>10) + " KiB"
	}
	return strconv.Itoa(size) + " B"
}

func matrixKey(transport, test string, size int) string {
	return fmt.Sprintf("m_%s_%s_%d", transport, test, size)
}

var transportLabel = map[string]string{"raw-udp": "raw UDP", "raw-tcp": "raw TCP", "ud": "UD", "rc": "RC", "rd": "RD"}

// matrixIters scales the iterations down with the size: latency runs take
// -n up to 4 KiB, -n/16 at 64 KiB, -n/256 at 1 MiB (at least 20); bandwidth
// runs -bw-n up to 64 KiB, -bw-n/16 at 1 MiB (at least 100).
func matrixIters(cfg *benchConfig, test string, size int) int {
	if test == "lat" {
		return max(cfg.LatIters*4096/max(size, 4096), 20)
	}
	return max(cfg.BWIters*65536/max(size, 65536), 100)
}

func init() {
	for _, tr := range matrixTransports {
		for _, test := range []string{"lat", "bw"} {
			for _, size := range matrixSizes {
				if inMatrix(tr, size) {
					knownRuns[matrixKey(tr, test, size)] = true
				}
			}
		}
	}
	knownRuns[kRDBWClean] = true
	knownRuns[kRDBWLoss] = true
}

// matrixMetrics declares the matrix's metrics and ratios on sc: at each
// size RD / UD, RD / RC and RD / the raw socket that fits (UDP up to 4 KiB,
// TCP above), latency medians and average bandwidths. No targets: RD's
// reliability costs, and these rows say how much.
func matrixMetrics(sc *scenario, fi bool) {
	for _, test := range []string{"lat", "bw"} {
		for _, size := range matrixSizes {
			for _, tr := range matrixTransports {
				if !inMatrix(tr, size) {
					continue
				}
				if test == "lat" {
					sc.addMetric(matrixKey(tr, test, size), fmt.Sprintf("%s Send lat %s, median one way", transportLabel[tr], sizeLabel(size)), "us", false)
				} else {
					sc.addMetric(matrixKey(tr, test, size), fmt.Sprintf("%s Send bw %s", transportLabel[tr], sizeLabel(size)), "Gb/s", false)
				}
			}
			rd := matrixKey("rd", test, size)
			what := map[string]string{"lat": "lat (medians)", "bw": "bw"}[test]
			for _, other := range []string{"ud", "rc"} {
				if inMatrix(other, size) {
					sc.addRatio(fmt.Sprintf("RD / %s %s %s", transportLabel[other], what, sizeLabel(size)), rd, matrixKey(other, test, size), "", 0)
				}
			}
			raw := "raw-tcp"
			if inMatrix("raw-udp", size) {
				raw = "raw-udp"
			}
			sc.addRatio(fmt.Sprintf("RD / %s %s %s", transportLabel[raw], what, sizeLabel(size)), rd, matrixKey(raw, test, size), "", 0)
		}
	}
	sc.addMetric(kRDLatMean, "RD Send lat 64 B, mean one way", "us", false)
	if fi {
		sc.addRatio("RD lat / fi rxd lat (means)", kRDLatMean, kFIRxdLat, "<=", 1.0)
	}
}

// matrixSteps returns the runs of the matrix, latency then bandwidth, size
// by size, every transport in turn at each size (so that they meet the same
// noise).
func matrixSteps(s *session, cfg *benchConfig, sc *scenario, a, b *node) []step {
	var steps []step
	for _, test := range []string{"lat", "bw"} {
		for _, size := range matrixSizes {
			for _, tr := range matrixTransports {
				if !inMatrix(tr, size) {
					continue
				}
				key := matrixKey(tr, test, size)
				t := perfTest{label: fmt.Sprintf("%s %s %s", transportLabel[tr], test, sizeLabel(size)), transport: tr,
					test: test, size: size, iters: matrixIters(cfg, test, size)}
				meanKey := ""
				if tr == "rd" && test == "lat" && size == 64 {
					meanKey = kRDLatMean
				}
				steps = append(steps, perfStep(s, cfg, sc, a, b, key, meanKey, t))
			}
		}
	}
	return steps
}

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

// lossMetrics declares the veth loss sub-scenario: RD Send bw 64 KiB
// without loss, then with netem dropping lossRate of the packets leaving
// each veth end; the ratio should stay >= 0.7.
func lossMetrics(sc *scenario) {
	sc.addMetric(kRDBWClean, "RD Send bw 64 KiB, no loss", "Gb/s", false)
	sc.addMetric(kRDBWLoss, "RD Send bw 64 KiB, netem loss "+lossRate+" each way", "Gb/s", false)
	sc.addRatio("RD bw with "+lossRate+" loss / without", kRDBWLoss, kRDBWClean, ">=", 0.7)
}

// lossSteps returns the two RD runs; the second adds a netem qdisc on both
// veth ends for its duration.
func lossSteps(s *session, cfg *benchConfig, sc *scenario, a, b *node) []step {
	t := perfTest{label: "RD bw 64 KiB (veth)", transport: "rd", test: "bw", size: bwSize, iters: cfg.BWIters}
	clean := perfStep(s, cfg, sc, a, b, kRDBWClean, "", t)
	t.label = "RD bw 64 KiB (veth, netem loss " + lossRate + ")"
	lossy := perfStep(s, cfg, sc, a, b, kRDBWLoss, "", t)
	run := lossy.run
	lossy.run = func(r int) (string, error) {
		if err := setNetemLoss(a.netns, b.netns, lossRate); err != nil {
			return "", err
		}
		what, err := run(r)
		if cerr := setNetemLoss(a.netns, b.netns, ""); cerr != nil && err == nil {
			err = cerr
		}
		return what, err
	}
	return []step{clean, lossy}
}
