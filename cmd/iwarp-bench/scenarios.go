package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// step is one run of a round: it measures and records its metrics for round
// r, or fails.
type step struct {
	key       string // the metric it records (first of them)
	label     string
	reference bool // a failure is a warning (another project's program)
	rounds    int  // > 0: the step runs in the first rounds rounds only
	run       func(r int) (string, error)
}

// Metric keys.
const (
	kRawUDPLat = "raw_udp_lat"
	kUDLat     = "ud_lat"
	kUDLatMean = "ud_lat_mean"
	kFIRxdLat  = "fi_rxd_lat"
	kFIUDPLat  = "fi_udp_lat"
	kRawUDPBW  = "raw_udp_bw"
	kUDBW      = "ud_bw"
	kRawTCPBW  = "raw_tcp_bw"

	// RC (loopback): 64 B latency against raw TCP, 1 MiB bandwidth.
	kRawTCPLat   = "raw_tcp_lat"
	kRCSendLat   = "rc_send_lat"
	kRCWriteLat  = "rc_write_lat"
	kRawTCPBW1M  = "raw_tcp_bw_1m"
	kRCWriteBW1M = "rc_write_bw_1m"
	kRCReadBW1M  = "rc_read_bw_1m"

	// RFC 7306 (docs/atomics.md): RC FetchAdd latency against the same
	// fetch-add done by the server process over Send/Recv.
	kRCFetchAddLat     = "rc_fetchadd_lat"
	kRCSendFetchAddLat = "rc_send_fetchadd_lat"
)

// rcBWSize is the message of the RC bandwidth runs.
const rcBWSize = 1 << 20

// rcSteps returns the RC runs (and their raw TCP baselines) of the loopback
// scenario. The 1 MiB runs send -bw-n·2/5 messages (at least 100): 2 GiB
// at the default, about a second per run here — with the 312 MiB of
// -bw-n/16, start-up (connection, buffer growth, first touch of the
// rings) was a third of an RC run and halved its ratio to raw TCP.
func rcSteps(s *session, cfg *benchConfig, sc *scenario, a, b *node) []step {
	lat := func(key, label, transport, op string) step {
		size := latSize
		if op == "fetchadd" || op == "send-fetchadd" {
			size = 8 // the 8-octet word (iwarp-perf uses 8 whatever -s says)
		}
		t := perfTest{label: label, transport: transport, op: op, test: "lat", size: size, iters: cfg.LatIters}
		return step{key: key, label: label, run: func(r int) (string, error) {
			rep, err := s.runPerf(cfg, a, b, t)
			if err != nil {
				return "", err
			}
			l := rep.Results[0].Latency
			sc.record(key, r, l.MedianUS)
			return fmt.Sprintf("median %.2f µs, mean %.2f µs, p99 %.2f µs one way", l.MedianUS, l.AvgUS, l.P99US), nil
		}}
	}
	bw := func(key, label, transport, op string) step {
		t := perfTest{label: label, transport: transport, op: op, test: "bw", size: rcBWSize, iters: max(cfg.BWIters*2/5, 100)}
		return step{key: key, label: label, run: func(r int) (string, error) {
			rep, err := s.runPerf(cfg, a, b, t)
			if err != nil {
				return "", err
			}
			w := rep.Results[0].Bandwidth
			sc.record(key, r, w.AvgGbps)
			return fmt.Sprintf("%.2f Gb/s average, %.2f Gb/s peak", w.AvgGbps, w.PeakGbps), nil
		}}
	}
	return []step{
		lat(kRawTCPLat, "raw TCP lat 64 B", "raw-tcp", ""),
		lat(kRCSendLat, "RC Send lat 64 B", "rc", "send"),
		lat(kRCWriteLat, "RC RDMA Write lat 64 B", "rc", "write"),
		lat(kRCFetchAddLat, "RC FetchAdd lat", "rc", "fetchadd"),
		lat(kRCSendFetchAddLat, "RC Send/Recv fetch-add emulation lat", "rc", "send-fetchadd"),
		bw(kRawTCPBW1M, "raw TCP bw 1 MiB", "raw-tcp", ""),
		bw(kRCWriteBW1M, "RC RDMA Write bw 1 MiB", "rc", "write"),
		bw(kRCReadBW1M, "RC RDMA Read bw 1 MiB", "rc", "read"),
	}
}

func rcMetrics(sc *scenario) {
	sc.addMetric(kRawTCPLat, "raw TCP lat 64 B (TCP_NODELAY), median one way", "us", false)
	sc.addMetric(kRCSendLat, "RC Send lat 64 B, median one way", "us", false)
	sc.addMetric(kRCWriteLat, "RC RDMA Write lat 64 B (last-octet polling), median one way", "us", false)
	sc.addMetric(kRCFetchAddLat, "RC FetchAdd lat (RFC 7306 atomic, result checked), median one way", "us", false)
	sc.addMetric(kRCSendFetchAddLat, "RC Send/Recv round trip doing the fetch-add in the server process, median one way", "us", false)
	sc.addMetric(kRawTCPBW1M, "raw TCP bw 1 MiB (writev)", "Gb/s", false)
	sc.addMetric(kRCWriteBW1M, "RC RDMA Write bw 1 MiB", "Gb/s", false)
	sc.addMetric(kRCReadBW1M, "RC RDMA Read bw 1 MiB", "Gb/s", false)
	sc.addRatio("RC Send lat / raw TCP lat (medians)", kRCSendLat, kRawTCPLat, "<=", 1.5)
	sc.addRatio("RC Write lat / raw TCP lat (medians)", kRCWriteLat, kRawTCPLat, "<=", 1.5)
	sc.addRatio("RC Write bw / raw TCP bw (1 MiB)", kRCWriteBW1M, kRawTCPBW1M, ">=", 0.8)
	sc.addRatio("RC Read bw / raw TCP bw (1 MiB)", kRCReadBW1M, kRawTCPBW1M, ">=", 0.8)
	sc.addRatio("UD lat / RC Send lat (medians; about 0.75 expected)", kUDLat, kRCSendLat, "<=", 0.75)
	sc.addRatio("RC FetchAdd lat / Send-Recv fetch-add emulation lat (medians; seed 0.77)", kRCFetchAddLat, kRCSendFetchAddLat, "<=", 0.8)
}

// runRounds runs every step in order, round after round (interleaved), with
// a progress line per run on progress.
// Only the steps whose key is in only run when only is not empty.
func runRounds(sc *scenario, steps []step, only map[string]bool, progress io.Writer) {
	for r := range sc.Rounds {
		for _, st := range steps {
			if (len(only) > 0 && !only[st.key]) || (st.rounds > 0 && r >= st.rounds) {
				continue
			}
			start := time.Now()
			what, err := st.run(r)
			took := time.Since(start).Round(time.Millisecond)
			switch {
			case err == nil:
				fmt.Fprintf(progress, "[%s %d/%d] %s: %s (%v)\n", sc.Name, r+1, sc.Rounds, st.label, what, took)
			case st.reference:
				msg := fmt.Sprintf("round %d: %s: %v", r+1, st.label, err)
				sc.Warnings = append(sc.Warnings, msg)
				fmt.Fprintf(progress, "[%s %d/%d] %s: reference run failed (%v): %v\n", sc.Name, r+1, sc.Rounds, st.label, took, err)
			default:
				msg := fmt.Sprintf("round %d: %s: %v", r+1, st.label, err)
				sc.Failures = append(sc.Failures, msg)
				fmt.Fprintf(progress, "[%s %d/%d] %s: FAILED (%v): %v\n", sc.Name, r+1, sc.Rounds, st.label, took, err)
			}
		}
	}
	sc.finish()
}

// perfSteps returns the iwarp-perf runs of a scenario between nodes a
// (servers) and b (clients).
func perfSteps(s *session, cfg *benchConfig, sc *scenario, a, b *node) []step {
	lat := func(key, label, transport string, meanKey string) step {
		t := perfTest{label: label, transport: transport, test: "lat", size: latSize, iters: cfg.LatIters}
		return step{key: key, label: label, run: func(r int) (string, error) {
			rep, err := s.runPerf(cfg, a, b, t)
			if err != nil {
				return "", udContext(cfg, err, transport, a, b)
			}
			l := rep.Results[0].Latency
			sc.record(key, r, l.MedianUS)
			if meanKey != "" {
				sc.record(meanKey, r, l.AvgUS)
			}
			return fmt.Sprintf("median %.2f µs, mean %.2f µs, p99 %.2f µs one way", l.MedianUS, l.AvgUS, l.P99US), nil
		}}
	}
	bw := func(key, label, transport string, size int) step {
		t := perfTest{label: label, transport: transport, test: "bw", size: size, iters: cfg.BWIters}
		return step{key: key, label: label, run: func(r int) (string, error) {
			rep, err := s.runPerf(cfg, a, b, t)
			if err != nil {
				return "", udContext(cfg, err, transport, a, b)
			}
			w := rep.Results[0].Bandwidth
			sc.record(key, r, w.AvgGbps)
			return fmt.Sprintf("%.2f Gb/s average, %.2f Gb/s peak, %.0f msg/s", w.AvgGbps, w.PeakGbps, w.MsgRateMpps*1e6), nil
		}}
	}
	return []step{
		lat(kRawUDPLat, "raw UDP lat 64 B", "raw-udp", ""),
		lat(kUDLat, "UD lat 64 B", "ud", kUDLatMean),
		bw(kRawUDPBW, "raw UDP bw 65507 B", "raw-udp", rawUDPSize),
		bw(kUDBW, "UD bw 64 KiB", "ud", bwSize),
		bw(kRawTCPBW, "raw TCP bw 64 KiB", "raw-tcp", bwSize),
	}
}

// udContext adds the daemons' drop counters to the error of a failed UD run.
func udContext(cfg *benchConfig, err error, transport string, a, b *node) error {
	if transport != "ud" {
		return err
	}
	ca, cb := daemonCounters(cfg.ctlBin(), a.socket), daemonCounters(cfg.ctlBin(), b.socket)
	if ca == "" && cb == "" {
		return err
	}
	return fmt.Errorf("%w [iwarpd A: %s; iwarpd B: %s]", err, ca, cb)
}

func latencyMetrics(sc *scenario) {
	sc.addMetric(kRawUDPLat, "raw UDP lat 64 B, median one way", "us", false)
	sc.addMetric(kUDLat, "UD lat 64 B, median one way", "us", false)
	sc.addMetric(kUDLatMean, "UD lat 64 B, mean one way", "us", false)
}

func bandwidthMetrics(sc *scenario) {
	sc.addMetric(kRawUDPBW, "raw UDP bw 65507 B (sendmmsg)", "Gb/s", false)
	sc.addMetric(kUDBW, "UD bw 64 KiB", "Gb/s", false)
	sc.addMetric(kRawTCPBW, "raw TCP bw 64 KiB (writev)", "Gb/s", false)
}

// startNodes starts one daemon per node, each with 100 UD ports (the
// scaling runs open 64 UD QPs a side).
func startNodes(s *session, cfg *benchConfig, a, b *node) error {
	dir, err := os.MkdirTemp("", "iwarp-bench-")
	if err != nil {
		return err
	}
	s.onClose(func() { os.RemoveAll(dir) })
	a.socket, b.socket = filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	a.rdBase, b.rdBase = cfg.Ports.RDA, cfg.Ports.RDB
	rd := func(first int) []string {
		return append([]string{"-rd-ports", fmt.Sprintf("%d-%d", first, first+rdPortsLen-1)}, cfg.DaemonArgs...)
	}
	if err := s.startDaemon(cfg.daemonBin(), a, udRange(cfg.Ports.UDA), append(rd(a.rdBase), profileArgs(cfg, a)...)); err != nil {
		return err
	}
	return s.startDaemon(cfg.daemonBin(), b, udRange(cfg.Ports.UDB), append(rd(b.rdBase), profileArgs(cfg, b)...))
}

// runLoopback measures two daemons on 127.0.0.1, one per CPU.
func runLoopback(s *session, cfg *benchConfig, progress io.Writer) *scenario {
	sc := newScenario("loopback",
		fmt.Sprintf("two iwarpd on 127.0.0.1; node A (daemon A + servers) on cpu %d, node B (daemon B + clients) on cpu %d",
			cfg.CPUA, cfg.CPUB), cfg.Rounds)
	latencyMetrics(sc)
	fi := cfg.FIPingpong != ""
	if cfg.FI && !fi {
		sc.miss("fi_pingpong reference", "fi_pingpong not found (Debian libfabric-bin; scripts/install-bench-deps.sh installs it)", progress)
	}
	if fi {
		sc.addMetric(kFIRxdLat, "fi_pingpong rdm udp;ofi_rxd 64 B, mean one way", "us", true)
		sc.addMetric(kFIUDPLat, "fi_pingpong dgram udp 64 B, mean one way", "us", true)
	}
	bandwidthMetrics(sc)
	sc.addRatio("UD lat / raw UDP lat (medians)", kUDLat, kRawUDPLat, "<=", 1.5)
	if fi {
		sc.addRatio("UD lat / fi rxd lat (means)", kUDLatMean, kFIRxdLat, "<=", 1.0)
	}
	sc.addRatio("UD bw / raw UDP bw", kUDBW, kRawUDPBW, ">=", 0.7)
	sc.addRatio("UD bw / raw TCP bw", kUDBW, kRawTCPBW, "", 0)
	rcMetrics(sc)
	matrixMetrics(sc, cfg, fi)
	bidirMetrics(sc, cfg)
	sc.extras = append(sc.extras, bidirExperiment)
	cpuMetrics(sc, cfg)
	scalingMetrics(sc, cfg)

	a := &node{name: "A", cpu: cfg.CPUA, addr: "127.0.0.1"}
	b := &node{name: "B", cpu: cfg.CPUB, addr: "127.0.0.1"}
	if err := startNodes(s, cfg, a, b); err != nil {
		sc.Failures = append(sc.Failures, err.Error())
		fmt.Fprintf(progress, "[loopback] FAILED: %v\n", err)
		sc.finish()
		return sc
	}
	if err := startProfilers(s, cfg, progress, a, b); err != nil {
		sc.Failures = append(sc.Failures, err.Error())
	}
	defer stopProfiling(cfg, progress, a, b)
	steps := perfSteps(s, cfg, sc, a, b)
	if fi {
		fiStep := func(key, label, endpoint, provider string) step {
			return step{key: key, label: label, reference: true, run: func(r int) (string, error) {
				v, err := s.runFI(cfg, a, b, endpoint, provider, cfg.LatIters)
				if err != nil {
					return "", err
				}
				sc.record(key, r, v)
				return fmt.Sprintf("mean %.2f µs one way", v), nil
			}}
		}
		// Right after the UD latency run, so that the two meet the same noise.
		steps = append(steps[:2:2], append([]step{
			fiStep(kFIRxdLat, "fi_pingpong rdm udp;ofi_rxd 64 B", "rdm", "udp;ofi_rxd"),
			fiStep(kFIUDPLat, "fi_pingpong dgram udp 64 B", "dgram", "udp"),
		}, steps[2:]...)...)
	}
	steps = append(steps, rcSteps(s, cfg, sc, a, b)...)
	steps = append(steps, matrixSteps(s, cfg, sc, a, b)...)
	steps = append(steps, bidirSteps(s, cfg, sc, a, b)...)
	steps = append(steps, cpuSteps(s, cfg, sc, a, b)...)
	steps = append(steps, scalingSteps(s, cfg, sc, a, b)...)
	runRounds(sc, steps, cfg.only(), progress)
	return sc
}

// runVeth measures two daemons in two network namespaces joined by a veth
// pair at MTU 1500.
func runVeth(s *session, cfg *benchConfig, progress io.Writer) *scenario {
	sc := newScenario("veth",
		fmt.Sprintf("two network namespaces, veth pair MTU %d (%s, %s), one iwarpd each; node A on cpu %d, node B on cpu %d",
			vethMTU, vethAddrA, vethAddrB, cfg.CPUA, cfg.CPUB), cfg.Rounds)
	if why := vethUnavailable(); why != "" {
		sc.Skipped = why
		fmt.Fprintf(progress, "[veth] MISS (not run): %s\n", why)
		return sc
	}
	latencyMetrics(sc)
	bandwidthMetrics(sc)
	sc.addRatio("UD lat / raw UDP lat (medians)", kUDLat, kRawUDPLat, "<=", 1.5)
	sc.addRatio("UD bw / raw TCP bw", kUDBW, kRawTCPBW, ">=", 0.8)
	sc.addRatio("UD bw / raw UDP bw (fragmented)", kUDBW, kRawUDPBW, "", 0)
	nsA, nsB, err := s.setupVeth()
	if err != nil {
		sc.Failures = append(sc.Failures, err.Error())
		fmt.Fprintf(progress, "[veth] FAILED: %v\n", err)
		sc.finish()
		return sc
	}
	// The loss runs need nftables: probe once.
	lossErr := error(nil)
	if len(cfg.Loss) > 0 {
		lossErr = setLoss(nsA, nsB, 0)
	}
	if lossErr == nil {
		lossMetrics(sc, cfg)
		sc.extras = append(sc.extras, lossExperiment)
	} else {
		sc.miss("veth-loss", fmt.Sprintf("the loss runs need nftables (scripts/install-bench-deps.sh installs it): %v", lossErr), progress)
	}
	a := &node{name: "A", cpu: cfg.CPUA, netns: nsA, addr: vethAddrA}
	b := &node{name: "B", cpu: cfg.CPUB, netns: nsB, addr: vethAddrB}
	if err := startNodes(s, cfg, a, b); err != nil {
		sc.Failures = append(sc.Failures, err.Error())
		fmt.Fprintf(progress, "[veth] FAILED: %v\n", err)
		sc.finish()
		return sc
	}
	if err := startProfilers(s, cfg, progress, a, b); err != nil {
		sc.Failures = append(sc.Failures, err.Error())
	}
	defer stopProfiling(cfg, progress, a, b)
	steps := perfSteps(s, cfg, sc, a, b)
	if lossErr == nil {
		steps = append(steps, lossSteps(s, cfg, sc, a, b)...)
	}
	runRounds(sc, steps, cfg.only(), progress)
	return sc
}
