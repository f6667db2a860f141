package main

import (
	"fmt"
	"strconv"
)

// The size sweep (docs/benchmarks.md, "Size sweeps"): ping-pong latency from
// 1 B to 1 MiB and streaming bandwidth from 1 KiB to 4 MiB, in powers of 4,
// for every transport iwarp-perf has, each size's transports run one after
// the other (so that they meet the same noise) and every round again
// (interleaved with the rest). Its metrics feed the text table (the ratios
// at the headline sizes 64 B, 4 KiB, 64 KiB and 1 MiB) and the
// bench-results/ experiments (report.go).

// sweepSeries is one transport (and operation) of the sweep.
type sweepSeries struct {
	key       string // in metric keys: m_<key>_<test>_<size>
	name      string // series name in bench-results/
	transport string // iwarp-perf transport
	op        string
}

var sweepSeriesList = []sweepSeries{
	{"raw-udp", "raw UDP", "raw-udp", ""},
	{"raw-tcp", "raw TCP", "raw-tcp", ""},
	{"ud", "UD Send", "ud", "send"},
	{"rd", "RD Send", "rd", "send"},
	{"rc", "RC Send", "rc", "send"},
	{"rc-write", "RC RDMA Write", "rc", "write"},
}

// Sweep sizes: full run and -quick (one size each).
var (
	fullLatSizes  = powersOf4(1, 1<<20)
	fullBWSizes   = powersOf4(1<<10, 4<<20)
	quickLatSizes = []int{64}
	quickBWSizes  = []int{65536}
	// headlineSizes are those whose RD ratios the text table prints.
	headlineSizes = []int{64, 4096, 65536, 1 << 20}
)

func powersOf4(lo, hi int) []int {
	var s []int
	for v := lo; v <= hi; v *= 4 {
		s = append(s, v)
	}
	return s
}

// inSweep says whether series tr runs test at size: raw UDP up to one
// datagram (65536 stands for its largest, 65507), UD and RD up to 1 MiB
// (their largest message, as iwarp-perf -a), RC and raw TCP everywhere.
func inSweep(tr, test string, size int) bool {
	switch tr {
	case "raw-udp":
		return size <= 65536
	case "ud":
		// A UD stream of messages of many datagrams stalls on the first
		// lost one (measured: every 256 KiB and 1 MiB run timed out).
		if test == "bw" {
			return size <= 65536
		}
		return size <= 1<<20
	case "rd":
		return size <= 1<<20
	}
	return true
}

// wireSize is the message size series tr really sends for sweep size size.
func wireSize(tr string, size int) int {
	if tr == "raw-udp" && size > rawUDPSize {
		return rawUDPSize
	}
	return size
}

// sizeLabel names size exactly: in MiB or KiB when it is a whole number of
// them, else in octets (raw UDP's 65507 is "65507 B", not "63 KiB").
func sizeLabel(size int) string {
	switch {
	case size >= 1<<20 && size%(1<<20) == 0:
		return strconv.Itoa(size>>20) + " MiB"
	case size >= 1<<10 && size%(1<<10) == 0:
		return strconv.Itoa(size>>10) + " KiB"
	}
	return strconv.Itoa(size) + " B"
}

func matrixKey(tr, test string, size int) string {
	return fmt.Sprintf("m_%s_%s_%d", tr, test, size)
}

var transportLabel = map[string]string{"raw-udp": "raw UDP", "raw-tcp": "raw TCP", "ud": "UD", "rc": "RC", "rd": "RD", "rc-write": "RC Write"}

// sweepIters scales the iterations down with the size: latency runs take
// -sweep-n up to 4 KiB, proportionally fewer above (at least 20); bandwidth
// runs -bw-n up to 64 KiB, proportionally fewer above (at least 100).
func sweepIters(cfg *benchConfig, test string, size int) int {
	if test == "lat" {
		return max(cfg.SweepIters*4096/max(size, 4096), 20)
	}
	return max(cfg.BWIters*65536/max(size, 65536), 100)
}

func init() {
	for _, tr := range sweepSeriesList {
		for _, size := range fullLatSizes {
			if inSweep(tr.key, "lat", size) {
				knownRuns[matrixKey(tr.key, "lat", size)] = true
			}
		}
		for _, size := range fullBWSizes {
			if inSweep(tr.key, "bw", size) {
				knownRuns[matrixKey(tr.key, "bw", size)] = true
			}
		}
	}
	for _, pct := range []int{0, 1, 5} {
		knownRuns[lossKey("rd", pct)] = true
		knownRuns[lossKey("raw-tcp", pct)] = true
	}
}

func (c *benchConfig) sweepSizes(test string) []int {
	if test == "lat" {
		return c.LatSizes
	}
	return c.BWSizes
}

// matrixMetrics declares the sweep's metrics, and, at the headline sizes
// swept, the ratios RD / UD, RD / RC and RD / the raw socket that fits (UDP
// up to 4 KiB, TCP above). No targets: RD's reliability costs, and these
// rows say how much.
func matrixMetrics(sc *scenario, cfg *benchConfig, fi bool) {
	for _, test := range []string{"lat", "bw"} {
		for _, size := range cfg.sweepSizes(test) {
			for _, tr := range sweepSeriesList {
				if !inSweep(tr.key, test, size) {
					continue
				}
				if test == "lat" {
					sc.addMetric(matrixKey(tr.key, test, size), fmt.Sprintf("%s lat %s, median one way", tr.name, sizeLabel(wireSize(tr.key, size))), "us", false)
				} else {
					sc.addMetric(matrixKey(tr.key, test, size), fmt.Sprintf("%s bw %s", tr.name, sizeLabel(wireSize(tr.key, size))), "Gb/s", false)
				}
			}
		}
	}
	for _, test := range []string{"lat", "bw"} {
		for _, size := range cfg.sweepSizes(test) {
			if !contains(headlineSizes, size) {
				continue
			}
			rd := matrixKey("rd", test, size)
			what := map[string]string{"lat": "lat (medians)", "bw": "bw"}[test]
			for _, other := range []string{"ud", "rc"} {
				if inSweep(other, test, size) {
					sc.addRatio(fmt.Sprintf("RD / %s %s %s", transportLabel[other], what, sizeLabel(size)), rd, matrixKey(other, test, size), "", 0)
				}
			}
			raw := "raw-tcp"
			if size <= 4096 {
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

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// matrixSteps returns the runs of the sweep, latency then bandwidth, size
// by size, every transport in turn at each size. The RD latency run at 64 B
// also records its mean (kRDLatMean); when 64 B is not swept, one RD 64 B
// latency run is added for it.
func matrixSteps(s *session, cfg *benchConfig, sc *scenario, a, b *node) []step {
	var steps []step
	meanDone := false
	for _, test := range []string{"lat", "bw"} {
		for _, size := range cfg.sweepSizes(test) {
			for _, tr := range sweepSeriesList {
				if !inSweep(tr.key, test, size) {
					continue
				}
				key := matrixKey(tr.key, test, size)
				t := perfTest{label: fmt.Sprintf("%s %s %s", tr.name, test, sizeLabel(wireSize(tr.key, size))), transport: tr.transport,
					op: tr.op, test: test, size: wireSize(tr.key, size), iters: sweepIters(cfg, test, size)}
				meanKey := ""
				if tr.key == "rd" && test == "lat" && size == 64 {
					meanKey, meanDone = kRDLatMean, true
				}
				steps = append(steps, perfStep(s, cfg, sc, a, b, key, meanKey, t))
			}
		}
	}
	if !meanDone {
		t := perfTest{label: "RD Send lat 64 B", transport: "rd", op: "send", test: "lat", size: 64, iters: cfg.SweepIters}
		st := step{key: kRDLatMean, label: t.label, run: func(r int) (string, error) { // records the mean only
			rep, err := s.runPerf(cfg, a, b, t)
			if err != nil {
				return "", err
			}
			l := rep.Results[0].Latency
			sc.record(kRDLatMean, r, l.AvgUS)
			return fmt.Sprintf("median %.2f µs, mean %.2f µs one way", l.MedianUS, l.AvgUS), nil
		}}
		steps = append(steps, st)
	}
	return steps
}
