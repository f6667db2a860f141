package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPU per message and message rate (issue 12 item 1; docs/benchmarks.md
// "CPU per message"). A streaming run (iwarp-perf -m bw, window -window)
// of UD, RD and RC Send at 64 B, 1 KiB and 64 KiB through both daemons,
// beside raw UDP (sendmmsg batches, 65507 B for 64 KiB) and raw TCP (writev
// batches) doing the same traffic in the same round:
//
//   - the daemons' CPU per message: the CPU time both iwarpd used during
//     the run (every thread: the sum of /proc/PID/task/*/schedstat's
//     run time, in ns; utime + stime of /proc/PID/stat, 10 ms ticks, where
//     schedstat is missing) ÷ the messages;
//   - the raw sockets' CPU per message: the CPU time (getrusage of the
//     child: user + system, every thread) of the raw sender and receiver
//     processes ÷ the messages;
//   - beside them, the CPU of everything (daemons + both iwarp-perf
//     processes) per message, for information: the clients' polling is a
//     cost an application pays too.
//
// The 64 B runs are also the message-rate experiment: messages per second
// with 64 messages in flight (-window), per transport against raw UDP and
// raw TCP. CPU time includes the polling (sched_yield) both the daemons and
// the raw processes do while they wait: that is what a message costs under
// the wait discipline of the suite (-poll-window).

var (
	cpuSizes = []int{64, 1024, 65536}
	// cpuSeriesList are the transports of the experiment; raw-udp and
	// raw-tcp are the baselines.
	cpuSeriesList = []string{"raw-udp", "raw-tcp", "ud", "rd", "rc"}
)

// cpuBase is the raw baseline of transport tr.
func cpuBase(tr string) string {
	if tr == "rc" {
		return "raw-tcp"
	}
	return "raw-udp"
}

func cpuKey(tr string, size int) string    { return fmt.Sprintf("cpu_%s_%d", tr, size) }
func cpuAllKey(tr string, size int) string { return fmt.Sprintf("cpuall_%s_%d", tr, size) }
func rateKey(tr string) string             { return "rate_" + tr }

func isRaw(tr string) bool { return strings.HasPrefix(tr, "raw-") }

func init() {
	for _, tr := range cpuSeriesList {
		for _, size := range cpuSizes {
			knownRuns[cpuKey(tr, size)] = true
		}
	}
}

// cpuRunKeys are the keys of every run of the experiment (-only cpu).
func cpuRunKeys(sizes []int) []string {
	var keys []string
	for _, size := range sizes {
		for _, tr := range cpuSeriesList {
			keys = append(keys, cpuKey(tr, size))
		}
	}
	return keys
}

// cpuIters is the number of messages of a run at size: -cpu-n up to 1 KiB,
// a quarter of it at 64 KiB (at least 100).
func cpuIters(cfg *benchConfig, size int) int {
	if size > 4096 {
		return max(cfg.CPUN/4, 100)
	}
	return cfg.CPUN
}

func cpuMetrics(sc *scenario, cfg *benchConfig) {
	if len(cfg.CPUSizes) == 0 {
		return
	}
	for _, size := range cfg.CPUSizes {
		for _, tr := range cpuSeriesList {
			if isRaw(tr) {
				sc.addMetric(cpuKey(tr, size), fmt.Sprintf("%s %s stream: CPU per message (sender + receiver)", transportLabel[tr], sizeLabel(wireSize(tr, size))), "us", false)
				continue
			}
			sc.addMetric(cpuKey(tr, size), fmt.Sprintf("%s Send %s stream: daemons' CPU per message", transportLabel[tr], sizeLabel(size)), "us", false)
			sc.addMetric(cpuAllKey(tr, size), fmt.Sprintf("%s Send %s stream: daemons' + clients' CPU per message", transportLabel[tr], sizeLabel(size)), "us", false)
		}
	}
	rate := false
	for _, size := range cfg.CPUSizes {
		rate = rate || size == 64
	}
	if rate {
		for _, tr := range cpuSeriesList {
			sc.addMetric(rateKey(tr), fmt.Sprintf("%s 64 B message rate, window %d", transportLabel[tr], cfg.Window), "msg/s", false)
		}
	}
	for _, size := range cfg.CPUSizes {
		op, target := "<=", 1.5 // the target at 64 B and 64 KiB
		if size != 64 && size != 65536 {
			op, target = "", 0
		}
		for _, tr := range cpuSeriesList {
			if isRaw(tr) {
				continue
			}
			base := cpuBase(tr)
			sc.addRatio(fmt.Sprintf("%s CPU/msg %s / %s (daemons / raw sender+receiver)", transportLabel[tr], sizeLabel(size), transportLabel[base]),
				cpuKey(tr, size), cpuKey(base, size), op, target)
			sc.addRatio(fmt.Sprintf("%s CPU/msg %s / %s (daemons + clients / raw)", transportLabel[tr], sizeLabel(size), transportLabel[base]),
				cpuAllKey(tr, size), cpuKey(base, size), "", 0)
		}
	}
	if rate {
		for _, tr := range []string{"ud", "rd", "rc"} {
			for _, base := range []string{"raw-udp", "raw-tcp"} {
				sc.addRatio(fmt.Sprintf("%s msg rate 64 B / %s", transportLabel[tr], transportLabel[base]), rateKey(tr), rateKey(base), "", 0)
			}
		}
	}
}

// cpuSteps returns the runs of one round: at each size, the transports in
// turn (so that they meet the same noise).
func cpuSteps(s *session, cfg *benchConfig, sc *scenario, a, b *node) []step {
	var steps []step
	for _, size := range cfg.CPUSizes {
		for _, tr := range cpuSeriesList {
			key := cpuKey(tr, size)
			t := perfTest{label: fmt.Sprintf("%s stream %s (CPU per message)", transportLabel[tr], sizeLabel(wireSize(tr, size))),
				transport: tr, test: "bw", size: wireSize(tr, size), iters: cpuIters(cfg, size), rawBatch: tr == "raw-udp"}
			steps = append(steps, step{key: key, label: t.label, run: func(r int) (string, error) {
				d0, err := daemonsCPU(a, b)
				if err != nil {
					return "", err
				}
				rep, perfCPU, err := s.runPerfCPU(cfg, a, b, t)
				if err != nil {
					return "", udContext(cfg, err, t.transport, a, b)
				}
				d1, err := daemonsCPU(a, b)
				if err != nil {
					return "", err
				}
				n := float64(t.iters)
				w := rep.Results[0].Bandwidth
				rate := w.MsgRateMpps * 1e6
				if size == 64 {
					sc.record(rateKey(tr), r, rate)
				}
				if isRaw(tr) {
					per := perfCPU.Seconds() * 1e6 / n
					sc.record(key, r, per)
					return fmt.Sprintf("%.3f µs CPU per message (sender + receiver), %.0f msg/s, %.2f Gb/s", per, rate, w.AvgGbps), nil
				}
				daemons := (d1 - d0).Seconds() * 1e6 / n
				all := daemons + perfCPU.Seconds()*1e6/n
				sc.record(key, r, daemons)
				sc.record(cpuAllKey(tr, size), r, all)
				return fmt.Sprintf("%.3f µs daemon CPU per message (%.3f with the clients), %.0f msg/s, %.2f Gb/s", daemons, all, rate, w.AvgGbps), nil
			}})
		}
	}
	return steps
}

// daemonsCPU is the CPU time both daemons have used so far.
func daemonsCPU(a, b *node) (time.Duration, error) {
	var sum time.Duration
	for _, n := range []*node{a, b} {
		if n.daemon == nil || n.daemon.cmd.Process == nil {
			return 0, fmt.Errorf("node %s: no daemon", n.name)
		}
		d, err := processCPU(n.daemon.cmd.Process.Pid)
		if err != nil {
			return 0, fmt.Errorf("node %s: reading iwarpd's CPU time: %w", n.name, err)
		}
		sum += d
	}
	return sum, nil
}

// processCPU is the CPU time process pid has used: the sum of its threads'
// run time in /proc/PID/task/*/schedstat (ns; a thread that exited is no
// longer counted — a Go daemon keeps its threads), or utime + stime of
// /proc/PID/stat (10 ms ticks) where schedstat is missing.
func processCPU(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err == nil && len(tasks) > 0 {
		var sum time.Duration
		ok := true
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				if os.IsNotExist(err) { // the thread exited meanwhile
					continue
				}
				ok = false
				break
			}
			ns, err := parseSchedstat(string(b))
			if err != nil {
				ok = false
				break
			}
			sum += ns
		}
		if ok {
			return sum, nil
		}
	}
	t, err := cpuTicks(pid)
	if err != nil {
		return 0, err
	}
	return time.Duration(t) * time.Second / userHZ, nil
}

// parseSchedstat reads the first field of a schedstat line: time spent on
// the CPU, in ns (Documentation/scheduler/sched-stats.rst).
func parseSchedstat(line string) (time.Duration, error) {
	f := strings.Fields(line)
	if len(f) < 1 {
		return 0, fmt.Errorf("schedstat %q: empty", line)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("schedstat %q: bad run time", line)
	}
	return time.Duration(ns), nil
}
