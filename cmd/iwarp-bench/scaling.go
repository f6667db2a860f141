package main

import (
	"fmt"
	"math"
	"strconv"

	"github.com/iwarpd/iwarpd/internal/benchreport"
)

// Multi-QP scaling (issue 6; the thesis' multi-connection method, seed
// digest §3 B3): N queue pairs between the one client process and the one
// server process (iwarp-perf -qps N), driven round-robin by one thread per
// side, for UD, RD and RC Send, N = 1, 2, 4 ... 64 on loopback.
//
//   - latency: every QP has one 64 B message outstanding; the figure is the
//     normalized latency (a round's time ÷ N, halved), and the experiment
//     plots it divided by the same transport's at N = 1 in the same round.
//   - throughput: 64 KiB messages, the -window split across the QPs; the
//     aggregate goodput divided by one raw socket stream of the same round
//     (UD, RD: raw UDP; RC: raw TCP).
//
// The runs take part in the first -scaling-rounds rounds only (3 by
// default: 44 runs a round at full size), interleaved with the rest.

var (
	fullScalingQPs = []int{1, 2, 4, 8, 16, 32, 64}
	scalingSeries  = []string{"ud", "rd", "rc"}
)

// scalingBase is the raw baseline of transport tr's throughput.
func scalingBase(tr string) string {
	if tr == "rc" {
		return "raw-tcp"
	}
	return "raw-udp"
}

// qpsLabel is "1 QP", "4 QPs".
func qpsLabel(n int) string {
	if n == 1 {
		return "1 QP"
	}
	return strconv.Itoa(n) + " QPs"
}

func scalingKey(tr, test string, qps int) string { return fmt.Sprintf("scale_%s_%s_%d", tr, test, qps) }

// scalingBaseKey is the raw baseline's run of the scaling block.
func scalingBaseKey(raw string) string { return "scale_" + raw + "_bw" }

func init() {
	for _, tr := range scalingSeries {
		for _, n := range fullScalingQPs {
			knownRuns[scalingKey(tr, "lat", n)] = true
			knownRuns[scalingKey(tr, "bw", n)] = true
		}
	}
	knownRuns[scalingBaseKey("raw-udp")] = true
	knownRuns[scalingBaseKey("raw-tcp")] = true
}

// scalingLatIters is the number of messages of a latency run at n QPs:
// -scaling-n rounded down to a multiple of n (iwarp-perf -qps n runs
// messages/n rounds of n ping-pongs), at least n.
func scalingLatIters(cfg *benchConfig, n int) int { return max(cfg.ScalingN/n, 1) * n }

// scalingRunKeys are the keys of every scaling run with these QP counts
// (-only scaling).
func scalingRunKeys(qps []int) []string {
	keys := []string{scalingBaseKey("raw-udp"), scalingBaseKey("raw-tcp")}
	for _, tr := range scalingSeries {
		for _, n := range qps {
			keys = append(keys, scalingKey(tr, "lat", n), scalingKey(tr, "bw", n))
		}
	}
	return keys
}

func scalingMetrics(sc *scenario, cfg *benchConfig) {
	if len(cfg.ScalingQPs) == 0 {
		return
	}
	for _, tr := range scalingSeries {
		for _, n := range cfg.ScalingQPs {
			sc.addMetric(scalingKey(tr, "lat", n), fmt.Sprintf("%s lat 64 B, %s, normalized (round ÷ %d), median one way", transportLabel[tr], qpsLabel(n), n), "us", false)
		}
	}
	sc.addMetric(scalingBaseKey("raw-udp"), "raw UDP bw 65507 B (scaling baseline)", "Gb/s", false)
	sc.addMetric(scalingBaseKey("raw-tcp"), "raw TCP bw 64 KiB (scaling baseline)", "Gb/s", false)
	for _, tr := range scalingSeries {
		for _, n := range cfg.ScalingQPs {
			sc.addMetric(scalingKey(tr, "bw", n), fmt.Sprintf("%s bw 64 KiB, %s, aggregate", transportLabel[tr], qpsLabel(n)), "Gb/s", false)
		}
	}
	// The text table's ratios: the largest N against one QP, and every N's
	// throughput against its raw baseline.
	first, last := cfg.ScalingQPs[0], cfg.ScalingQPs[len(cfg.ScalingQPs)-1]
	for _, tr := range scalingSeries {
		if first == 1 && last > 1 {
			sc.addRatio(fmt.Sprintf("%s normalized lat %d QPs / 1 QP", transportLabel[tr], last),
				scalingKey(tr, "lat", last), scalingKey(tr, "lat", 1), "", 0)
		}
		for _, n := range cfg.ScalingQPs {
			sc.addRatio(fmt.Sprintf("%s bw %s / %s", transportLabel[tr], qpsLabel(n), transportLabel[scalingBase(tr)]),
				scalingKey(tr, "bw", n), scalingBaseKey(scalingBase(tr)), "", 0)
		}
	}
	sc.extras = append(sc.extras, scalingLatencyExperiment, scalingBandwidthExperiment)
}

// scalingSteps returns the scaling runs of one round: latency at every N
// (the transports in turn at each N), then the two raw baselines, then
// throughput at every N.
func scalingSteps(s *session, cfg *benchConfig, sc *scenario, a, b *node) []step {
	if len(cfg.ScalingQPs) == 0 {
		return nil
	}
	rounds := min(cfg.ScalingRounds, cfg.Rounds)
	var steps []step
	add := func(key string, t perfTest) {
		st := perfStep(s, cfg, sc, a, b, key, "", t)
		st.rounds = rounds
		steps = append(steps, st)
	}
	for _, n := range cfg.ScalingQPs {
		for _, tr := range scalingSeries {
			add(scalingKey(tr, "lat", n), perfTest{label: fmt.Sprintf("%s lat 64 B × %s", transportLabel[tr], qpsLabel(n)),
				transport: tr, op: "send", test: "lat", size: latSize, iters: scalingLatIters(cfg, n), qps: n})
		}
	}
	// The raw streams are fast: a few tens of milliseconds at -scaling-bw-n
	// is mostly start-up noise, so they take -bw-n when that is larger.
	baseN := max(cfg.ScalingBWN, cfg.BWIters)
	add(scalingBaseKey("raw-udp"), perfTest{label: "raw UDP bw 65507 B (scaling baseline)", transport: "raw-udp", test: "bw",
		size: rawUDPSize, iters: baseN})
	add(scalingBaseKey("raw-tcp"), perfTest{label: "raw TCP bw 64 KiB (scaling baseline)", transport: "raw-tcp", test: "bw",
		size: bwSize, iters: baseN})
	for _, n := range cfg.ScalingQPs {
		for _, tr := range scalingSeries {
			add(scalingKey(tr, "bw", n), perfTest{label: fmt.Sprintf("%s bw 64 KiB × %s", transportLabel[tr], qpsLabel(n)),
				transport: tr, op: "send", test: "bw", size: bwSize, iters: max(cfg.ScalingBWN, n), qps: n})
		}
	}
	return steps
}

// perRoundRatio divides num by den round by round (NaN where either is
// missing or den is not positive).
func perRoundRatio(num, den *metric) []float64 {
	out := make([]float64, len(num.Values))
	for i := range out {
		out[i] = math.NaN()
		if num.Values[i] != nil && i < len(den.Values) && den.Values[i] != nil && *den.Values[i] > 0 {
			out[i] = *num.Values[i] / *den.Values[i]
		}
	}
	return out
}

// scalingExperiment builds one series per transport whose point at N is
// value(tr, N) round by round.
func scalingExperiment(sc *scenario, cfg *benchConfig, e benchreport.Experiment, value func(tr string, n int) (num, den *metric)) (benchreport.Experiment, bool) {
	var series []benchreport.Series
	for _, tr := range scalingSeries {
		s := benchreport.Series{Name: transportLabel[tr]}
		for _, n := range cfg.ScalingQPs {
			num, den := value(tr, n)
			if num == nil || den == nil {
				continue
			}
			if p := benchreport.NewPoint(float64(n), perRoundRatio(num, den)); p.N > 0 {
				s.Points = append(s.Points, p)
			}
		}
		series = append(series, s)
	}
	return experiment(e, series...)
}

// scalingLatencyExperiment: normalized latency at N ÷ the same at 1 QP.
func scalingLatencyExperiment(sc *scenario, cfg *benchConfig) (benchreport.Experiment, bool) {
	return scalingExperiment(sc, cfg, benchreport.Experiment{
		Name: sc.Name + "-scaling-latency", Title: "Multi-QP normalized latency vs queue pairs (" + sc.Name + ")",
		XLabel: "queue pairs", YLabel: "normalized latency ÷ the same at 1 QP", LogX: true,
		Note: "Values are ratios already (no baseline series): per round, the normalized latency at N QPs (64 B, every QP " +
			"one message outstanding, a round's time ÷ N, halved) divided by the same transport's at 1 QP in the same round. " +
			"Below 1: the QPs overlap; one thread per side drives them round-robin (iwarp-perf -qps).",
	}, func(tr string, n int) (*metric, *metric) {
		return sc.byKey[scalingKey(tr, "lat", n)], sc.byKey[scalingKey(tr, "lat", 1)]
	})
}

// scalingBandwidthExperiment: aggregate goodput ÷ one raw socket stream.
func scalingBandwidthExperiment(sc *scenario, cfg *benchConfig) (benchreport.Experiment, bool) {
	return scalingExperiment(sc, cfg, benchreport.Experiment{
		Name: sc.Name + "-scaling-bandwidth", Title: "Multi-QP aggregate throughput vs queue pairs (" + sc.Name + ")",
		XLabel: "queue pairs", YLabel: "aggregate goodput ÷ one raw socket stream", LogX: true,
		Note: "Values are ratios already (no baseline series): per round, the aggregate goodput of N QPs (64 KiB Sends, the " +
			"window of " + strconv.Itoa(cfg.Window) + " split across the QPs) divided by one raw socket stream of the same round: " +
			"UD and RD by raw UDP (65507 B datagrams), RC by raw TCP.",
	}, func(tr string, n int) (*metric, *metric) {
		return sc.byKey[scalingKey(tr, "bw", n)], sc.byKey[scalingBaseKey(scalingBase(tr))]
	})
}
