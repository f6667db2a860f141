package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/iwarpd/iwarpd/internal/benchreport"
	"github.com/iwarpd/iwarpd/ofverbs"
)

// Idle cost (docs/benchmarks.md): the CPU an iwarpd takes doing nothing,
// alone and then serving one idle client (a context, a PD, two CQs and a UD
// QP in RTS with receives posted, opened by this program), each over
// -idle. Read from utime + stime of /proc/PID/stat (every thread of the
// daemon), in clock ticks of 1/100 s (USER_HZ, fixed at 100 on Linux). An
// absolute figure: there is no baseline to divide it by.

const userHZ = 100

// cpuTicks returns utime + stime of process pid, in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatTicks(string(b))
}

// parseStatTicks reads fields 14 (utime) and 15 (stime) of a /proc/PID/stat
// line; the command name (field 2) may hold spaces and parentheses, so the
// fields are counted after its last ')'.
func parseStatTicks(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat %q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the name, want at least 13", len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc stat: utime %q stime %q", f[11], f[12])
	}
	return u + s, nil
}

// cpuPercent measures pid's CPU over d, in percent of one CPU.
func cpuPercent(pid int, d time.Duration) (float64, error) {
	t0, err := cpuTicks(pid)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(d)
	t1, err := cpuTicks(pid)
	if err != nil {
		return 0, err
	}
	return float64(t1-t0) / userHZ / time.Since(start).Seconds() * 100, nil
}

// idleClient opens what a quiet application holds: a UD QP in RTS with
// receives posted, nothing sent. close releases it.
func idleClient(socket string) (closeFn func(), err error) {
	ctx, err := ofverbs.Open(ofverbs.WithSocket(socket), ofverbs.WithClientName("iwarp-bench-idle"))
	if err != nil {
		return nil, err
	}
	fail := func(err error) (func(), error) { ctx.Close(); return nil, err }
	pd, err := ctx.AllocPD()
	if err != nil {
		return fail(err)
	}
	buf, err := ctx.AllocBuffer(16 * 4096)
	if err != nil {
		return fail(err)
	}
	mr, err := pd.RegMR(buf.Bytes(), ofverbs.AccessLocalWrite)
	if err != nil {
		return fail(err)
	}
	scq, err := ctx.CreateCQ(64, nil)
	if err != nil {
		return fail(err)
	}
	rcq, err := ctx.CreateCQ(64, nil)
	if err != nil {
		return fail(err)
	}
	qp, err := pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: scq, RecvCQ: rcq,
		Cap: ofverbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fail(err)
	}
	if err := qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
		return fail(err)
	}
	mem := buf.Bytes()
	for i := range 16 {
		if k, err := qp.PostRecv([]ofverbs.RecvWR{{ID: uint64(i), SGL: []ofverbs.SGE{mr.SGE(mem[i*4096 : (i+1)*4096])}}}); k != 1 {
			return fail(fmt.Errorf("posting receive %d: %w", i, err))
		}
	}
	return func() { ctx.Close() }, nil
}

// idleResult is what runIdle measured (NaN: not measured).
type idleResult struct {
	Alone, WithClient float64 // CPU % of one CPU
}

// runIdle starts a daemon of its own on 127.0.0.1 (cpu A), lets it settle
// for a second, and measures it idle, then with one idle client.
func runIdle(s *session, cfg *benchConfig, progress io.Writer) (idleResult, error) {
	res := idleResult{Alone: math.NaN(), WithClient: math.NaN()}
	dir, err := os.MkdirTemp("", "iwarp-bench-idle-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	n := &node{name: "idle", cpu: cfg.CPUA, addr: "127.0.0.1", socket: filepath.Join(dir, "idle.sock")}
	if err := s.startDaemon(cfg.daemonBin(), n, "30200-30249", append([]string{"-rd-ports", "30250-30299"}, cfg.DaemonArgs...)); err != nil {
		return res, err
	}
	defer n.daemon.stop()
	pid := n.daemon.cmd.Process.Pid
	time.Sleep(time.Second)
	fmt.Fprintf(progress, "[idle] daemon alone, %v ...\n", cfg.Idle)
	if res.Alone, err = cpuPercent(pid, cfg.Idle); err != nil {
		return res, fmt.Errorf("idle daemon: %w", err)
	}
	closeClient, err := idleClient(n.socket)
	if err != nil {
		return res, fmt.Errorf("idle client: %w", err)
	}
	defer closeClient()
	time.Sleep(200 * time.Millisecond)
	fmt.Fprintf(progress, "[idle] daemon with one idle client (UD QP in RTS, 16 receives posted), %v ...\n", cfg.Idle)
	if res.WithClient, err = cpuPercent(pid, cfg.Idle); err != nil {
		return res, fmt.Errorf("daemon with an idle client: %w", err)
	}
	fmt.Fprintf(progress, "[idle] daemon CPU: %.2f %% alone, %.2f %% with one idle client\n", res.Alone, res.WithClient)
	return res, nil
}

// idleExperiment is the idle cost as an experiment without a baseline
// (absolute numbers, printed beside the machine description).
func idleExperiment(r idleResult, d time.Duration) benchreport.Experiment {
	return benchreport.Experiment{
		Name: "idle-cost", Title: "Idle cost: CPU of one iwarpd (loopback)",
		XLabel: "idle clients", YLabel: "CPU (% of one CPU)",
		Note: fmt.Sprintf("utime + stime of the daemon (/proc/PID/stat, 10 ms ticks) over %v, alone (0) and serving "+
			"one idle client (1: a UD QP in RTS with receives posted). One measurement each, no rounds.", d),
		Series: []benchreport.Series{{Name: "iwarpd", Points: []benchreport.Point{
			benchreport.NewPoint(0, []float64{r.Alone}), benchreport.NewPoint(1, []float64{r.WithClient})}}},
	}
}
