package main

import (
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"

	"github.com/iwarpd/iwarpd/test/mpi/mpilaunch"
)

// Issue 20's layouts and loaded case (docs/benchmarks.md, "MPI: issue 20
// targets"). The MPI section runs its tests in each layout of
// -mpi-layouts, then the loaded case (-mpi-load N):
//
//   - shared: nothing bound, every process floats over every CPU;
//   - engine-cpu: both daemons bound to CPU 1 and every rank (iwarpd's and
//     the TCP paths' alike) to CPU 0, by sched_setaffinity(2) — the daemons
//     by the bench when it starts them, the ranks by iwmpi_bench itself
//     (IWMPI_BENCH_CPU) before MPI_Init, so their threads inherit it;
//   - load: the shared layout with N busy-looping processes (sh -c 'while
//     :; do :; done', unbound) started beside for the whole pass and killed
//     after: "under load".
//
// Each pass has its own fresh daemons (the shared pass: the section's
// profiled ones), and runs only the tests of the targets in the
// engine-cpu and loaded cases.

// mpiLayout is one pass of the MPI section.
type mpiLayout struct {
	name      string   // shared, engine-cpu, load
	suffix    string   // of the metric keys ("" for shared)
	label     string   // prefix of the metric names
	rankCPU   int      // -1: unbound
	daemonCPU int      // -1: unbound
	load      int      // busy processes beside
	tests     []string // MODE:SIZE it runs (nil: every test)
}

// mpiLayoutNames are the values of -mpi-layouts.
var mpiLayoutNames = []string{"shared", "engine-cpu"}

// mpiLayouts returns the passes of the configuration, in order.
func mpiLayouts(c *mpiConfig) []mpiLayout {
	var ls []mpiLayout
	for _, n := range c.Layouts {
		switch n {
		case "shared":
			ls = append(ls, mpiLayout{name: n, rankCPU: -1, daemonCPU: -1})
		case "engine-cpu":
			ls = append(ls, mpiLayout{name: n, suffix: "_ecpu", label: "[engine CPU] ", rankCPU: 0, daemonCPU: 1,
				tests: []string{"lat:8", "rate:8", "bw:1048576", "overlap:1048576"}})
		}
	}
	if c.Load > 0 {
		ls = append(ls, mpiLayout{name: "load", suffix: "_load", label: fmt.Sprintf("[under load, %d busy] ", c.Load),
			rankCPU: -1, daemonCPU: -1, load: c.Load, tests: []string{"lat:8", "rate:8"}})
	}
	return ls
}

// has says whether the pass runs test t.
func (l *mpiLayout) has(t mpiTest) bool {
	if l == nil || l.tests == nil {
		return true
	}
	for _, k := range l.tests {
		if k == t.key() {
			return true
		}
	}
	return false
}

// parseLayouts checks -mpi-layouts.
func parseLayouts(v string) ([]string, error) {
	var out []string
	for _, n := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		ok := false
		for _, k := range mpiLayoutNames {
			ok = ok || n == k
		}
		if !ok {
			return nil, fmt.Errorf("-mpi-layouts: %q is not a layout; the layouts are %s", n, strings.Join(mpiLayoutNames, ","))
		}
		out = append(out, n)
	}
	return out, nil
}

// missing says why the pass cannot run here ("" when it can).
func (l *mpiLayout) missing() string {
	if max(l.rankCPU, l.daemonCPU) >= runtime.NumCPU() {
		return fmt.Sprintf("layout %s needs CPUs %d and %d; this machine has %d", l.name, l.rankCPU, l.daemonCPU, runtime.NumCPU())
	}
	return ""
}

// startLoad starts n busy-looping processes; stop kills them.
func startLoad(s *session, n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
			s.forget(c)
		}
	}
	for range n {
		c := exec.Command("/bin/sh", "-c", "while :; do :; done")
		if err := s.start(c, -1); err != nil {
			stop()
			return nil, fmt.Errorf("starting a busy process for -mpi-load: %w", err)
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// mpiCPUTests are the CPU-per-message results iwmpi_bench prints beside
// lat and rate (RESULT cpulat / cpurate): the whole node's CPU time (every
// rank's getrusage + both daemons' run time) per message.
var mpiCPUTests = []mpiTest{{"cpulat", 8, 0, 0}, {"cpurate", 8, 0, 0}}

// cpuOf is the test whose run prints CPU-per-message result t.
func cpuOf(t mpiTest) string { return strings.TrimPrefix(t.mode, "cpu") + ":" + fmt.Sprint(t.size) }

// declareMPIMetrics declares the metrics of pass l for the transports.
func declareMPIMetrics(sc *scenario, m *mpiConfig, l *mpiLayout) {
	for _, tr := range m.Transports {
		ran := map[string]bool{}
		for _, t := range mpiTests {
			if (!t.oneSided() || rmaTransports[tr]) && m.runs(t) && l.has(t) {
				sc.addMetric(mpiKey(tr, t.mode, t.size)+l.suffix, l.label+t.name(tr), t.unit(), false)
				ran[t.key()] = true
			}
		}
		for _, t := range mpiCPUTests {
			if ran[cpuOf(t)] {
				sc.addMetric(mpiKey(tr, t.mode, t.size)+l.suffix, l.label+t.name(tr), t.unit(), false)
			}
		}
		if ran["overlap:1048576"] && sc.byKey[mpiIdealKey(l)] == nil {
			sc.addMetric(mpiIdealKey(l), l.label+"MPI 1 MiB overlap: the ideal (100 %, for the ratios)", "%", true)
		}
	}
}

func mpiIdealKey(l *mpiLayout) string { return "mpi_overlap_ideal" + l.suffix }

// addMPIIssue20Ratios declares issue 20's targets as ratios for every pass
// (a ratio whose metrics were not measured is left out).
func addMPIIssue20Ratios(sc *scenario, ls []mpiLayout) {
	iw, tcp, ob1 := mpilaunch.IWARPD, mpilaunch.TCP, mpilaunch.OB1TCP
	for i := range ls {
		l := &ls[i]
		p := "issue 20, " + strings.TrimSuffix(strings.TrimPrefix(l.label, "["), "] ")
		if l.name == "shared" {
			p = "issue 20, shared"
		}
		k := func(tr, mode string, size int) string { return mpiKey(tr, mode, size) + l.suffix }
		latTarget := map[string]float64{"shared": 1.3, "engine-cpu": 1.0, "load": 1.5}[l.name]
		sc.addRatio(p+": MPI 8 B latency: iwarpd RDM / tcp", k(iw, "lat", 8), k(tcp, "lat", 8), "<=", latTarget)
		sc.addRatio(p+": MPI 8 B message rate: iwarpd RDM / tcp", k(iw, "rate", 8), k(tcp, "rate", 8), ">=", 1.0)
		sc.addRatio(p+": CPU per message, 8 B ping-pong, whole node: iwarpd RDM / tcp", k(iw, "cpulat", 8), k(tcp, "cpulat", 8), "<=", 1.5)
		sc.addRatio(p+": CPU per message, 8 B message rate, whole node: iwarpd RDM / tcp", k(iw, "cpurate", 8), k(tcp, "cpurate", 8), "<=", 1.5)
		if l.name != "load" {
			sc.addRatio(p+": MPI 1 MiB bandwidth: iwarpd RDM / tcp", k(iw, "bw", 1<<20), k(tcp, "bw", 1<<20), ">=", 1.0)
			sc.addRatio(p+": MPI 1 MiB overlap: iwarpd RDM / ideal (100 %)", k(iw, "overlap", 1<<20), mpiIdealKey(l), ">=", 0.9)
			sc.addRatio(p+": MPI 1 MiB overlap: tcp / ideal", k(tcp, "overlap", 1<<20), mpiIdealKey(l), "", 0)
			sc.addRatio(p+": MPI 1 MiB overlap: ob1+tcp / ideal", k(ob1, "overlap", 1<<20), mpiIdealKey(l), "", 0)
		}
		if l.name == "shared" {
			sc.addRatio(p+": MPI alltoall 8 B (4 ranks): iwarpd RDM / tcp", k(iw, "a2a", 8), k(tcp, "a2a", 8), "<=", 1.0)
		}
		if l.name != "shared" {
			sc.addRatio(p+": MPI 8 B latency: ob1+tcp / tcp", k(ob1, "lat", 8), k(tcp, "lat", 8), "", 0)
		}
	}
}

// runMPIPass runs the rounds of pass l with daemons (nil: no iwarpd runs).
func runMPIPass(e *mpiEnv, sc *scenario, l *mpiLayout, daemons []*node, progress io.Writer, miss func(string, ...any)) {
	m := &e.cfg.MPI
	if l.load > 0 {
		stop, err := startLoad(e.s, l.load)
		if err != nil {
			sc.Failures = append(sc.Failures, err.Error())
			return
		}
		defer stop()
	}
	for r := 0; r < m.Rounds; r++ {
		for _, tr := range m.Transports {
			iw := strings.HasPrefix(tr, "iwarpd")
			if iw && daemons == nil {
				if r == 0 {
					miss("%s, layout %s: no provider or no daemons (see above)", tr, l.name)
				}
				continue
			}
			var ds []*node
			if iw {
				ds = daemons
			}
			e.runTransport(sc, l, r, tr, ds, progress)
		}
	}
}
