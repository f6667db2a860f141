package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// session owns every process and resource the benchmark creates, so that
// all of them are released on every way out (normal end, failure, signal).
type session struct {
	mu       sync.Mutex
	procs    map[*exec.Cmd]struct{}
	cleanups []func()
	rdRuns   int // RD runs so far (nextRDPorts)
}

// The size of each daemon's RD port range (startNodes; where they are:
// choosePorts). Each RD run takes the next port of each: an RD QP on the
// port of a closed one meets the peer's stale state (the peer-restart issue
// of docs/rd.md) and may hang.
const rdPortsLen = 1000

// nextRDPorts returns the index of the first of the next RD run's n
// consecutive ports (each node's port is its rdBase + index; a run of
// iwarp-perf -qps n takes n).
func (s *session) nextRDPorts(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rdRuns%rdPortsLen+n > rdPortsLen {
		s.rdRuns += rdPortsLen - s.rdRuns%rdPortsLen // wrap: start over at the first port
	}
	i := s.rdRuns % rdPortsLen
	s.rdRuns += n
	return i
}

func newSession() *session { return &session{procs: map[*exec.Cmd]struct{}{}} }

// onClose registers f to run at close, in reverse order of registration.
func (s *session) onClose(f func()) {
	s.mu.Lock()
	s.cleanups = append(s.cleanups, f)
	s.mu.Unlock()
}

// close kills every process still running and runs the cleanups.
func (s *session) close() {
	s.mu.Lock()
	procs := s.procs
	s.procs = map[*exec.Cmd]struct{}{}
	cleanups := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for cmd := range procs {
		cmd.Process.Kill()
	}
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
}

// start starts cmd with every thread of the new process bound to cpu (-1:
// not bound). The fork happens on an OS thread locked to this goroutine and
// bound to cpu for the moment, so the child inherits the mask before it runs
// anything (as taskset -c does, without needing it); the thread's mask is
// then restored (if that fails, the thread stays locked and exits with its
// goroutine), so the binding never leaks to the benchmark's own threads.
func (s *session) start(cmd *exec.Cmd, cpu int) error {
	err := func() error {
		if cpu < 0 {
			return cmd.Start()
		}
		done := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			var old, set unix.CPUSet
			if err := unix.SchedGetaffinity(0, &old); err != nil {
				runtime.UnlockOSThread()
				done <- fmt.Errorf("reading the CPU mask: %w", err)
				return
			}
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				runtime.UnlockOSThread()
				done <- fmt.Errorf("binding to cpu %d: %w", cpu, err)
				return
			}
			err := cmd.Start()
			if unix.SchedSetaffinity(0, &old) == nil {
				runtime.UnlockOSThread()
			}
			done <- err
		}()
		return <-done
	}()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.procs[cmd] = struct{}{}
	s.mu.Unlock()
	return nil
}

// forget drops cmd from the processes to kill at close (it has exited).
func (s *session) forget(cmd *exec.Cmd) {
	s.mu.Lock()
	delete(s.procs, cmd)
	s.mu.Unlock()
}

// allowedCPUs returns the Cpus_allowed_list of process pid.
func allowedCPUs(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("/proc/%d/status: no Cpus_allowed_list", pid)
}

// lockedBuffer collects a process's output while it runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail returns the last few lines of s, for error messages.
func tail(s string, lines int) string {
	s = strings.TrimSpace(s)
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, " | ")
}

// node is one of the two machines of a scenario: a daemon and the clients
// talking to it, all bound to one CPU, optionally inside a network namespace.
type node struct {
	name   string // "A" or "B"
	cpu    int
	netns  string // "" for the benchmark's own namespace
	addr   string // the address its daemon serves and its clients use
	socket string // control socket of its daemon
	rdBase int    // first port of its daemon's RD range
	daemon *daemon
	perf   *profiler // perf record of the daemon (-profile), nil if none
	// scenario names its profiles (-profile): "" is loopback or veth by
	// netns, the MPI section sets "mpi".
	scenario string
}

// command builds name+args to run on n (inside its namespace, if any).
func (n *node) command(name string, args ...string) *exec.Cmd {
	if n.netns != "" {
		return exec.Command("ip", append([]string{"netns", "exec", n.netns, name}, args...)...)
	}
	return exec.Command(name, args...)
}

// daemon is a running iwarpd.
type daemon struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	exited chan struct{}
}

// startDaemon runs iwarpd for node n, serving n.addr on UDP ports ports,
// with its control socket at n.socket, bound to n.cpu, and waits until it
// answers on its socket.
func (s *session) startDaemon(bin string, n *node, ports string, extra []string) error {
	args := append([]string{"-socket", n.socket, "-addr", n.addr, "-ud-ports", ports}, extra...)
	cmd := n.command(bin, args...)
	d := &daemon{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.stderr, d.stderr
	if err := s.start(cmd, n.cpu); err != nil {
		return fmt.Errorf("node %s: starting iwarpd: %w", n.name, err)
	}
	go func() { cmd.Wait(); s.forget(cmd); close(d.exited) }()
	n.daemon = d
	s.onClose(func() { d.stop() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-d.exited:
			return fmt.Errorf("node %s: iwarpd exited at start (%v): %s", n.name, cmd.ProcessState, tail(d.stderr.String(), 5))
		default:
		}
		if c, err := net.Dial("unixpacket", n.socket); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s: iwarpd did not answer on %s within 10s: %s", n.name, n.socket, tail(d.stderr.String(), 5))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n.cpu >= 0 {
		got, err := allowedCPUs(cmd.Process.Pid)
		if err != nil {
			return fmt.Errorf("node %s: checking iwarpd's CPU binding: %w", n.name, err)
		}
		if got != strconv.Itoa(n.cpu) {
			return fmt.Errorf("node %s: iwarpd runs on cpus %s, want %d", n.name, got, n.cpu)
		}
	}
	return nil
}

// stop ends the daemon with SIGTERM (its orderly shutdown), then SIGKILL.
func (d *daemon) stop() {
	select {
	case <-d.exited:
		return
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(3 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
	}
}

// perfReport is the part of iwarp-perf's -json report the benchmark reads
// (docs/iwarp-perf.md, "Output").
type perfReport struct {
	Role       string `json:"role"`
	Test       string `json:"test"`
	Transport  string `json:"transport"`
	Iterations int    `json:"iterations"`
	OK         bool   `json:"ok"`
	Results    []struct {
		Bytes      int    `json:"bytes"`
		Iterations int    `json:"iterations"`
		Verified   int64  `json:"verified"`
		Mismatches int64  `json:"mismatches"`
		FirstError string `json:"first_error"`
		Latency    *struct {
			MinUS    float64 `json:"min_us"`
			MedianUS float64 `json:"median_us"`
			AvgUS    float64 `json:"avg_us"`
			P99US    float64 `json:"p99_us"`
			MaxUS    float64 `json:"max_us"`
		} `json:"latency"`
		Bandwidth *struct {
			PeakGbps    float64 `json:"peak_gbps"`
			AvgGbps     float64 `json:"avg_gbps"`
			MsgRateMpps float64 `json:"msg_rate_mpps"`
			Seconds     float64 `json:"seconds"`
		} `json:"bandwidth"`
	} `json:"results"`
}

// perfTest is one iwarp-perf run: the test flags both sides get.
type perfTest struct {
	label     string // for progress and errors, e.g. "UD lat 64 B"
	transport string // "ud", "rc", "rd", "raw-udp", "raw-tcp"
	op        string // "send", "write", "read", "write-record", "fetchadd", "send-fetchadd" ("": send)
	test      string // "lat" or "bw"
	size      int
	iters     int
	qps       int  // iwarp-perf -qps (0, 1: one QP)
	rawBatch  bool // raw UDP: iwarp-perf -raw-batch (GSO sends, GRO + recvmmsg receives)
	// rdPorts: RD QP ports of the server and the client, when the run
	// chooses them (both on one daemon: enginescale.go); else the nodes'
	// next ones (nextRDPorts).
	rdPorts [2]int
}

func (t perfTest) args(cfg *benchConfig) []string {
	a := []string{"-m", t.test, "-s", strconv.Itoa(t.size), "-n", strconv.Itoa(t.iters),
		"-poll-window", cfg.PollWindow.String(), "-timeout", cfg.PerfTimeout.String(), "-json"}
	switch t.transport {
	case "raw-udp":
		a = append(a, "-raw", "udp")
		if t.rawBatch {
			a = append(a, "-raw-batch")
		}
	case "raw-tcp":
		a = append(a, "-raw", "tcp")
	case "rc", "rd":
		a = append(a, "-t", t.transport, "-o", cmp.Or(t.op, "send"))
	default:
		a = append(a, "-t", "ud", "-o", cmp.Or(t.op, "send"))
	}
	if t.test == "bw" {
		a = append(a, "-window", strconv.Itoa(cfg.Window))
	}
	if t.qps > 1 {
		a = append(a, "-qps", strconv.Itoa(t.qps))
	}
	return a
}

// decodePerfReport parses and checks one side's -json report against t:
// the right test, size and count, every message intact, and numbers present.
func decodePerfReport(out string, t perfTest) (*perfReport, error) {
	var rep perfReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		return nil, fmt.Errorf("reading iwarp-perf's JSON report: %w (output %q)", err, tail(out, 3))
	}
	if rep.Test != t.test || rep.Transport != t.transport || len(rep.Results) != 1 {
		return nil, fmt.Errorf("iwarp-perf reported test %q transport %q with %d results, want %s %s with 1",
			rep.Test, rep.Transport, len(rep.Results), t.test, t.transport)
	}
	r := rep.Results[0]
	if r.Bytes != t.size || r.Iterations != t.iters {
		return nil, fmt.Errorf("iwarp-perf reported %d × %d bytes, want %d × %d", r.Iterations, r.Bytes, t.iters, t.size)
	}
	if !rep.OK || r.Mismatches != 0 {
		return nil, fmt.Errorf("DATA WRONG: %d messages mismatched; first: %s", r.Mismatches, r.FirstError)
	}
	want := int64(t.iters)
	// A Read or an atomic is checked by its requester only, the
	// send-fetchadd emulation by its client.
	if t.test == "lat" && t.op != "read" && t.op != "fetchadd" && t.op != "send-fetchadd" {
		want *= 2
	}
	if r.Verified != want {
		return nil, fmt.Errorf("DATA WRONG: %d messages verified, want %d", r.Verified, want)
	}
	switch t.test {
	case "lat":
		if r.Latency == nil || !(r.Latency.MedianUS > 0) {
			return nil, errors.New("iwarp-perf report without a latency")
		}
	case "bw":
		if r.Bandwidth == nil || !(r.Bandwidth.AvgGbps > 0) {
			return nil, errors.New("iwarp-perf report without a bandwidth")
		}
	}
	return &rep, nil
}

// freePort returns a TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// outcome is how one process of a pair ended.
type outcome struct {
	stdout, stderr string
	err            error         // nil: exit status 0
	cpu            time.Duration // user + system time of the process, every thread (getrusage of the child)
}

func (o outcome) describe(who string) string {
	if o.err == nil {
		return who + ": ok"
	}
	return fmt.Sprintf("%s: %v: %s", who, o.err, tail(o.stderr, 4))
}

// runPair runs a server command on srvNode and a client command on cliNode,
// each bound to its node's CPU, and waits for both for at most timeout
// (then kills them). ready, if not nil, is called with the server's PID
// before the client starts. A server still running 5 s after its client
// failed is killed.
func (s *session) runPair(srvNode, cliNode *node, srv, cli []string, timeout time.Duration, ready func(pid int) error) (server, client outcome, err error) {
	type proc struct {
		cmd            *exec.Cmd
		stdout, stderr *lockedBuffer
		done           chan error
	}
	startOne := func(n *node, argv []string) (*proc, error) {
		p := &proc{cmd: n.command(argv[0], argv[1:]...), stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan error, 1)}
		p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
		if err := s.start(p.cmd, n.cpu); err != nil {
			return nil, err
		}
		go func() { p.done <- p.cmd.Wait(); s.forget(p.cmd) }()
		return p, nil
	}
	deadline := time.Now().Add(timeout)
	finish := func(p *proc, until time.Time) outcome {
		timer := time.NewTimer(time.Until(until))
		defer timer.Stop()
		select {
		case e := <-p.done:
			return outcome{stdout: p.stdout.String(), stderr: p.stderr.String(), err: e, cpu: procCPU(p.cmd)}
		case <-timer.C:
			p.cmd.Process.Kill()
			e := <-p.done
			return outcome{stdout: p.stdout.String(), stderr: p.stderr.String(),
				err: fmt.Errorf("killed at its deadline (%v)", e)}
		}
	}
	ps, err := startOne(srvNode, srv)
	if err != nil {
		return server, client, fmt.Errorf("starting %s: %w", srv[0], err)
	}
	if ready != nil {
		if err := ready(ps.cmd.Process.Pid); err != nil {
			ps.cmd.Process.Kill()
			so := finish(ps, time.Now())
			return so, client, fmt.Errorf("server not ready: %w: %s", err, tail(so.stderr, 3))
		}
	}
	pc, err := startOne(cliNode, cli)
	if err != nil {
		ps.cmd.Process.Kill()
		<-ps.done
		return server, client, fmt.Errorf("starting %s: %w", cli[0], err)
	}
	client = finish(pc, deadline)
	if client.err != nil {
		deadline = time.Now().Add(5 * time.Second)
	}
	server = finish(ps, deadline)
	return server, client, nil
}

// waitListening waits until process pid (in its own network namespace)
// has a TCP socket listening on port.
func waitListening(pid, port int, timeout time.Duration) error {
	want := fmt.Sprintf(":%04X", port)
	deadline := time.Now().Add(timeout)
	for {
		for _, f := range []string{"tcp", "tcp6"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				fields := strings.Fields(line)
				if len(fields) > 3 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on TCP port %d after %v", port, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// procCPU is the user + system time of an exited process (0 if unknown).
func procCPU(cmd *exec.Cmd) time.Duration {
	if cmd.ProcessState == nil {
		return 0
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// runPerf runs test t with the server on node a and the client on node b
// (connecting to a.addr) and returns the client's checked report.
func (s *session) runPerf(cfg *benchConfig, a, b *node, t perfTest) (*perfReport, error) {
	rep, _, err := s.runPerfCPU(cfg, a, b, t)
	return rep, err
}

// runPerfCPU is runPerf that also returns the CPU time the two iwarp-perf
// processes used (server + client).
func (s *session) runPerfCPU(cfg *benchConfig, a, b *node, t perfTest) (*perfReport, time.Duration, error) {
	port, err := freePort()
	if err != nil {
		return nil, 0, err
	}
	common := append([]string{cfg.perfBin(), "-p", strconv.Itoa(port)}, t.args(cfg)...)
	srv := append([]string(nil), common...)
	cli := append([]string(nil), common...)
	if t.transport == "ud" || t.transport == "rc" || t.transport == "rd" {
		srv = append(srv, "-socket", a.socket)
		cli = append(cli, "-socket", b.socket)
	}
	if t.transport == "rd" && t.rdPorts[0] != 0 {
		srv = append(srv, "-qp-port", strconv.Itoa(t.rdPorts[0]))
		cli = append(cli, "-qp-port", strconv.Itoa(t.rdPorts[1]))
	} else if t.transport == "rd" { // a port never used before: docs/rd.md on peer restarts
		i := s.nextRDPorts(max(t.qps, 1))
		srv = append(srv, "-qp-port", strconv.Itoa(a.rdBase+i))
		cli = append(cli, "-qp-port", strconv.Itoa(b.rdBase+i))
	}
	cli = append(cli, a.addr)
	so, co, err := s.runPair(a, b, srv, cli, cfg.RunTimeout, nil)
	if err != nil {
		return nil, 0, err
	}
	if so.err != nil || co.err != nil {
		// iwarp-perf prints its report, then exits 1, when data was wrong.
		if _, err := decodePerfReport(co.stdout, t); err != nil && strings.HasPrefix(err.Error(), "DATA WRONG") {
			return nil, 0, fmt.Errorf("client: %w", err)
		}
		return nil, 0, fmt.Errorf("%s; %s", co.describe("client"), so.describe("server"))
	}
	if _, err := decodePerfReport(so.stdout, t); err != nil {
		return nil, 0, fmt.Errorf("server: %w", err)
	}
	rep, err := decodePerfReport(co.stdout, t)
	if err != nil {
		return nil, 0, fmt.Errorf("client: %w", err)
	}
	return rep, so.cpu + co.cpu, nil
}

// runFI runs fi_pingpong (64 B, iters iterations) with the server on node a
// and the client on b, and returns the client's one-way latency in µs.
// fi_pingpong prints only a mean: usec/xfer = elapsed / iterations / 2.
func (s *session) runFI(cfg *benchConfig, a, b *node, endpoint, provider string, iters int) (float64, error) {
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	common := []string{cfg.FIPingpong, "-e", endpoint, "-p", provider, "-I", strconv.Itoa(iters), "-S", "64"}
	srv := append(append([]string(nil), common...), "-B", strconv.Itoa(port))
	cli := append(append([]string(nil), common...), "-P", strconv.Itoa(port), a.addr)
	so, co, err := s.runPair(a, b, srv, cli, cfg.RunTimeout, func(pid int) error { return waitListening(pid, port, 10*time.Second) })
	if err != nil {
		return 0, err
	}
	if so.err != nil || co.err != nil {
		return 0, fmt.Errorf("%s; %s", co.describe("client"), so.describe("server"))
	}
	return parseFIPingpong(co.stdout, 64)
}

// parseFIPingpong finds the usec/xfer column of the row for size bytes in
// fi_pingpong's table (header "bytes #sent #ack total time MB/sec usec/xfer
// Mxfers/sec"; the column is located by its header, not by position).
func parseFIPingpong(out string, size int) (float64, error) {
	col := -1
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if col < 0 {
			for i, h := range f {
				if h == "usec/xfer" {
					col = i
				}
			}
			continue
		}
		if f[0] != strconv.Itoa(size) || col >= len(f) {
			continue
		}
		v, err := strconv.ParseFloat(f[col], 64)
		if err != nil || !(v > 0) {
			return 0, fmt.Errorf("fi_pingpong: bad usec/xfer %q in %q", f[col], sc.Text())
		}
		return v, nil
	}
	if col < 0 {
		return 0, fmt.Errorf("fi_pingpong: no usec/xfer column in its output %q", tail(out, 3))
	}
	return 0, fmt.Errorf("fi_pingpong: no row for %d bytes in its output %q", size, tail(out, 3))
}

// daemonCounters returns the nonzero drop and error counters of the daemon
// at socket, for the message of a failed UD run ("" when unavailable).
func daemonCounters(ctl, socket string) string {
	if ctl == "" {
		return ""
	}
	out, err := exec.Command(ctl, "-socket", socket, "-json", "counters").Output()
	if err != nil {
		return ""
	}
	var counters map[string]any
	if json.Unmarshal(out, &counters) != nil {
		return ""
	}
	if c, ok := counters["counters"].(map[string]any); ok {
		counters = c
	}
	var parts []string
	for k, v := range counters {
		n, ok := v.(float64)
		if ok && n != 0 && (strings.HasPrefix(k, "drop_") || strings.Contains(k, "error") ||
			strings.Contains(k, "overrun") || k == "recv_too_long" || k == "send_blocked") {
			parts = append(parts, fmt.Sprintf("%s=%v", k, n))
		}
	}
	if len(parts) == 0 {
		return "no drops"
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
