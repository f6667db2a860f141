// Command iwarp-perf measures latency and bandwidth of iwarpd queue pairs,
// in the spirit of rdma-core's perftest, and of plain UDP and TCP sockets
// for baselines, with the same wait discipline and the same data checks.
//
//	server:  iwarp-perf [flags]
//	client:  iwarp-perf [flags] SERVER
//
// The server serves one test and exits. Both sides must be given the same
// test flags; they exchange and compare them, and their data addresses, over
// an out-of-band TCP connection (JSON lines, port -p). Every message is
// checked at its receiver (byte i of the message of iteration k is
// (k+i) mod 251); a mismatch makes both sides exit with status 1. Exit
// status 2 is a usage error. See docs/iwarp-perf.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// config is what the flags say.
type config struct {
	server     string // "" on the server side
	qpType     string // -t
	op         string // -o
	test       string // -m: lat or bw
	size       int    // -s (0: the default of the test)
	all        bool   // -a
	iters      int
	socket     string
	json       bool
	port       int
	window     int
	pollWindow time.Duration
	timeout    time.Duration
	cpu        int
	raw        string // "", "udp", "tcp"
	rawBatch   bool   // -raw udp: GSO sends, GRO + recvmmsg receives (raw_udp_batch.go)
	qpPort     int    // -qp-port: UDP port of a UD or RD QP (0: the daemon picks)
	qps        int    // -qps: queue pairs between the two processes (multiqp.go)
	mem        string // -mem: memfd (ofverbs Buffers) or user (Go heap: process-memory MRs)
}

// usageError is a problem with the command line (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{msg: fmt.Sprintf(format, a...)} }

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("iwarp-perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.qpType, "t", "ud", "queue pair `type`: ud, rc or rd")
	fs.StringVar(&c.op, "o", "send", "`operation`: send; write with -t rc; read with -t rc or rd; write-record with -t ud or rd; "+
		"fetchadd, cmpswap (RFC 7306 atomics, -t rc or rd); send-fetchadd (Send/Recv with the fetch-add in the server process); "+
		"write-imm (-t rc: lat; -t ud or rd: Write-Record with Immediate); send-imm")
	fs.StringVar(&c.test, "m", "lat", "`test`: lat (ping-pong latency) or bw (streaming bandwidth)")
	fs.IntVar(&c.size, "s", 0, "message size in `bytes` (default 64 for lat; 65536 for bw, 65507 over raw UDP)")
	fs.BoolVar(&c.all, "a", false, "run every size 2^0 .. 2^N up to the largest message")
	fs.IntVar(&c.iters, "n", 1000, "`iterations` per size")
	fs.StringVar(&c.socket, "socket", "", "control socket `path` of the local iwarpd (default: as iwarpd's, env IWARPD_SOCKET)")
	fs.BoolVar(&c.json, "json", false, "print the report as JSON instead of a table")
	fs.IntVar(&c.port, "p", 18515, "out-of-band TCP `port`")
	fs.IntVar(&c.window, "window", 64, "bw: most messages outstanding (receives pre-posted by the receiver)")
	fs.DurationVar(&c.pollWindow, "poll-window", 50*time.Microsecond, "poll (sched_yield between empty polls) for this `duration`, then block")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up when one message, or the peer, takes longer than this")
	fs.IntVar(&c.cpu, "cpu", -1, "pin the process to this `cpu` (-1: do not pin)")
	fs.IntVar(&c.qpPort, "qp-port", 0, "UDP `port` of the UD or RD queue pair, in the daemon's range (0: the daemon picks; "+
		"iwarp-bench gives each RD run a port of its own, see docs/rd.md on peer restarts)")
	fs.IntVar(&c.qps, "qps", 1, "queue `pairs` between the two processes (1.."+fmt.Sprint(maxQPs)+"), driven round-robin by one thread per side: "+
		"lat reports the latency per message normalized by N, bw the aggregate over the window split across the QPs (-o send; -t rc -o write -m bw)")
	fs.StringVar(&c.raw, "raw", "", "run over plain `sockets` for a baseline: udp or tcp")
	fs.BoolVar(&c.rawBatch, "raw-batch", false, "-raw udp: send streams with UDP GSO (64 datagrams per send) and receive with UDP_GRO and recvmmsg")
	fs.StringVar(&c.mem, "mem", "memfd", "`memory` of the data buffers: memfd (ofverbs Buffers, mapped by the daemon: zero copy) or "+
		"user (the Go heap, registered as process memory: the daemon copies with process_vm_readv/writev; docs/memory-registration.md)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: iwarp-perf [flags]            (server: serves one test, then exits)\n"+
			"       iwarp-perf [flags] SERVER     (client)\n\n"+
			"Both sides take the same test flags. Exit status: 0 ok, 1 failure or data mismatch, 2 usage.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	// Flags may follow the server name, as with perftest.
	if fs.NArg() > 0 {
		c.server = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return c, err
		}
		if fs.NArg() > 0 {
			return c, usagef("one server at most, got %q and %q", c.server, fs.Args())
		}
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch c.qpType {
	case "ud", "rc", "rd":
	default:
		return usagef("-t %q: want ud, rc or rd", c.qpType)
	}
	if err := c.validateOp(); err != nil {
		return err
	}
	if c.test != "lat" && c.test != "bw" {
		return usagef("-m %q: want lat or bw", c.test)
	}
	if c.rawBatch && c.raw != "udp" {
		return usagef("-raw-batch: only with -raw udp")
	}
	if c.raw != "" && c.raw != "udp" && c.raw != "tcp" {
		return usagef("-raw %q: want udp or tcp", c.raw)
	}
	if c.mem != "memfd" && c.mem != "user" {
		return usagef("-mem %q: want memfd or user", c.mem)
	}
	if c.size < 0 || (c.size > 0 && c.all) {
		return usagef("-s %d: want a positive size, and not together with -a", c.size)
	}
	if c.raw == "udp" && c.size > maxUDPPayload {
		return usagef("-s %d: larger than the largest raw-udp message, %d bytes", c.size, maxUDPPayload)
	}
	if (c.raw == "tcp" || (c.raw == "" && c.qpType != "ud")) && c.size > maxTCPMessage {
		return usagef("-s %d: larger than the largest raw-tcp message, %d bytes", c.size, maxTCPMessage)
	}
	if c.iters < 1 {
		return usagef("-n %d: want at least 1", c.iters)
	}
	if c.window < 1 || c.window > 4096 {
		return usagef("-window %d: want 1..4096", c.window)
	}
	if c.qpPort < 0 || c.qpPort > 65535 || (c.qpPort != 0 && (c.raw != "" || c.qpType == "rc")) {
		return usagef("-qp-port %d: want a UDP port, for -t ud or rd", c.qpPort)
	}
	if err := c.validateQPs(); err != nil {
		return err
	}
	if c.port < 1 || c.port > 65535 {
		return usagef("-p %d: want a TCP port", c.port)
	}
	if c.pollWindow < 0 || c.timeout <= 0 {
		return usagef("-poll-window must be >= 0 and -timeout > 0")
	}
	return nil
}

// validateOp checks that -o suits -t and -raw: RDMA Write is an RC
// operation, Read an RC and RD one, Write-Record a datagram one (UD, RD);
// the raw baselines only send.
func (c *config) validateOp() error {
	need := map[string][]string{"write": {"rc"}, "read": {"rc", "rd"}, "write-record": {"ud", "rd"},
		"fetchadd": {"rc", "rd"}, "cmpswap": {"rc", "rd"}, "write-imm": {"rc", "ud", "rd"}, "send-fetchadd": {"rc", "rd", "ud"}, "send-imm": {"ud", "rd", "rc"}}
	if ((c.op == "write-imm" && c.qpType == "rc") || c.op == "send-fetchadd") && c.test != "lat" {
		return usagef("-o %s: -m lat only", c.op)
	}
	if c.qps > 1 && (atomicOp(c.op) || c.op == "write-imm" || c.op == "send-fetchadd" || c.op == "send-imm") {
		return usagef("-o %s: one QP only", c.op)
	}
	switch c.op {
	case "send":
		return nil
	case "write", "read", "write-record", "fetchadd", "cmpswap", "write-imm", "send-fetchadd", "send-imm":
		types := need[c.op]
		if c.raw != "" || !slices.Contains(types, c.qpType) {
			return usagef("-o %s: needs -t %s (the raw baselines only send)", c.op, strings.Join(types, " or -t "))
		}
		return nil
	}
	return usagef("-o %q: want send, write, read, write-record, fetchadd, cmpswap, send-fetchadd, write-imm or send-imm", c.op)
}

// transportName is what both sides call the transport in hellos and reports.
func (c *config) transportName() string {
	if c.raw != "" {
		return "raw-" + c.raw
	}
	return c.qpType
}

// sizes lists the message sizes to run, given the transport's largest.
func (c *config) sizes(maxMsg int) ([]int, error) {
	if atomicOp(c.op) || c.op == "send-fetchadd" {
		return []int{atomicSize}, nil // the 8-octet word, whatever -s or -a say
	}
	if c.all {
		var s []int
		for n := 1; n <= maxMsg; n *= 2 {
			s = append(s, n)
		}
		return s, nil
	}
	size := c.size
	if size == 0 {
		size = 64
		if c.test == "bw" {
			size = min(65536, maxMsg)
		}
	}
	if size > maxMsg {
		return nil, usagef("-s %d: larger than the largest %s message, %d bytes", size, c.transportName(), maxMsg)
	}
	return []int{size}, nil
}

func (c *config) waiter() waiter { return waiter{pollWindow: c.pollWindow, timeout: c.timeout} }

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "iwarp-perf: %v\n", err)
		}
		return exitUsage
	}
	if cfg.cpu >= 0 {
		if err := pinProcess(cfg.cpu); err != nil {
			fmt.Fprintf(stderr, "iwarp-perf: %v\n", err)
			return exitUsage
		}
	}
	var rep *report
	if cfg.server == "" {
		rep, err = runServer(&cfg)
	} else {
		rep, err = runClient(&cfg)
	}
	if err != nil {
		if errors.Is(err, errTimeout) && (cfg.raw == "udp" || (cfg.raw == "" && cfg.qpType == "ud")) {
			err = fmt.Errorf("%w\n(datagrams are unreliable: one lost datagram loses its message and stalls the test; "+
				"for ud, `iwarpctl counters` shows the daemons' drop_* counters)", err)
		}
		fmt.Fprintf(stderr, "iwarp-perf: %v\n", err)
		var ue *usageError
		if errors.As(err, &ue) {
			return exitUsage
		}
		return exitFailed
	}
	if cfg.json {
		err = writeJSON(stdout, rep)
	} else {
		err = writeTable(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "iwarp-perf: writing the report: %v\n", err)
		return exitFailed
	}
	if !rep.OK {
		fmt.Fprintf(stderr, "iwarp-perf: data verification failed\n")
		return exitFailed
	}
	return exitOK
}

// openTransport opens the data transport on local address ip and returns it
// with its largest message.
func openTransport(cfg *config, ip netip.Addr, server bool) (transport, int, error) {
	w := cfg.waiter()
	switch cfg.raw {
	case "udp":
		t, err := newUDPTransport(ip, maxUDPPayload, cfg.window, w)
		if err == nil && cfg.rawBatch {
			if err = t.enableBatch(); err != nil {
				t.close()
			}
		}
		return t, maxUDPPayload, err
	case "tcp":
		maxMsg := 1 << 20 // -a stops at 1 MiB, as UD does by default
		if !cfg.all && cfg.size > maxMsg {
			maxMsg = min(cfg.size, maxTCPMessage)
		}
		t, err := newTCPTransport(ip, maxMsg, cfg.window, w, server)
		return t, maxMsg, err
	}
	return openVerbsTransport(cfg, ip, server)
}

func localIP(c net.Conn) netip.Addr {
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.IPv4Unspecified()
}

func (c *config) hello(sizes []int, tr transport) hello {
	h := hello{Version: oobVersion, Test: c.test, Op: c.op, Transport: c.transportName(), Sizes: sizes,
		Iterations: c.iters, Window: c.window, QPs: c.qps, Addr: tr.localAddr()}
	if r, ok := tr.(rdmaTransport); ok {
		h.Buffer = r.localBuffer()
	}
	if m, ok := tr.(*multiQP); ok {
		h.Buffers = m.localBuffers()
	}
	return h
}

// connectPeer aims tr at the peer of hello h: its data address and, for
// RDMA operations, its exposed buffer.
func connectPeer(tr transport, h *hello, server bool) error {
	if r, ok := tr.(rdmaTransport); ok {
		r.setPeerBuffer(h.Buffer)
	}
	if m, ok := tr.(*multiQP); ok {
		if err := m.setPeerBuffers(h.Buffers); err != nil {
			return err
		}
	}
	return tr.connect(h.Addr, server)
}

func (c *config) newReport(role string) *report {
	r := &report{Role: role, Test: c.test, Op: c.op, Transport: c.transportName(), Iterations: c.iters,
		PollWindowUS: float64(c.pollWindow) / float64(time.Microsecond), Results: []result{}, OK: true}
	if c.qps > 1 {
		r.QPs = c.qps
	}
	if c.test == "bw" {
		r.Window = c.window
	}
	return r
}

// batch is the most messages one send call hands to the transport.
func (c *config) batch() int { return min(c.window, 64) }

func runClient(cfg *config) (rep *report, err error) {
	conn, err := dialOOB(cfg.server, cfg.port, cfg.timeout)
	if err != nil {
		return nil, err
	}
	o := newOOB(conn)
	defer o.close()
	defer func() {
		var pe *errPeer
		if err != nil && !errors.As(err, &pe) {
			o.fail(err)
		}
	}()
	tr, maxMsg, err := openTransport(cfg, localIP(conn), false)
	if err != nil {
		return nil, err
	}
	defer tr.close()
	sizes, err := cfg.sizes(maxMsg)
	if err != nil {
		return nil, err
	}
	mine := cfg.hello(sizes, tr)
	if err := o.send(oobMsg{Type: "hello", Hello: &mine}); err != nil {
		return nil, err
	}
	m, err := o.recv("hello", cfg.timeout)
	if err != nil {
		return nil, err
	}
	if m.Hello == nil {
		return nil, errors.New("out-of-band: empty hello from the server")
	}
	if err := agree(mine, *m.Hello); err != nil {
		return nil, err
	}
	if err := connectPeer(tr, m.Hello, false); err != nil {
		return nil, err
	}
	p := newPattern(sizes[len(sizes)-1])
	rep = cfg.newReport("client")
	for _, size := range sizes {
		if _, err := o.recv("ready", cfg.timeout); err != nil {
			return nil, err
		}
		if err := tr.prepare(size); err != nil {
			return nil, err
		}
		r, err := runClientTest(cfg, tr, p, size)
		if err != nil {
			err = fmt.Errorf("%d bytes: %w", size, err)
			if pe := o.peerError(time.Second); pe != nil {
				err = fmt.Errorf("%w (the server reports: %v)", err, pe)
			}
			return nil, err
		}
		if cfg.op == "read" { // the server's side is passive: tell it the size is over
			if err := o.send(oobMsg{Type: "finished", Size: size}); err != nil {
				return nil, err
			}
		}
		d, err := o.recv("done", cfg.timeout)
		if err != nil {
			return nil, err
		}
		res := result{Bytes: size, Iterations: cfg.iters, Verified: r.verified + d.Verified,
			Mismatches: r.mismatches + d.Mismatches, FirstError: r.firstError}
		if res.FirstError == "" && d.FirstError != "" {
			res.FirstError = "server: " + d.FirstError
		} else if res.FirstError != "" {
			res.FirstError = "client: " + res.FirstError
		}
		if cfg.test == "lat" {
			l := computeLat(r.rtt)
			res.Latency = &l
		} else {
			b := computeBW(size, cfg.iters, r.elapsed, r.peak)
			res.Bandwidth = &b
		}
		if res.Mismatches > 0 {
			rep.OK = false
		}
		rep.Results = append(rep.Results, res)
	}
	if err := o.send(oobMsg{Type: "report", Report: rep}); err != nil {
		return nil, err
	}
	return rep, nil
}

func runServer(cfg *config) (rep *report, err error) {
	l, err := listenOOB(cfg.port)
	if err != nil {
		return nil, err
	}
	conn, err := l.Accept()
	l.Close()
	if err != nil {
		return nil, fmt.Errorf("out-of-band accept: %w", err)
	}
	o := newOOB(conn)
	defer o.close()
	defer func() {
		var pe *errPeer
		if err != nil && !errors.As(err, &pe) {
			o.fail(err)
		}
	}()
	m, err := o.recv("hello", cfg.timeout)
	if err != nil {
		return nil, err
	}
	if m.Hello == nil {
		return nil, errors.New("out-of-band: empty hello from the client")
	}
	tr, maxMsg, err := openTransport(cfg, localIP(conn), true)
	if err != nil {
		return nil, err
	}
	defer tr.close()
	sizes, err := cfg.sizes(maxMsg)
	if err != nil {
		return nil, err
	}
	mine := cfg.hello(sizes, tr)
	if err := o.send(oobMsg{Type: "hello", Hello: &mine}); err != nil {
		return nil, err
	}
	if err := agree(*m.Hello, mine); err != nil {
		return nil, err
	}
	if err := connectPeer(tr, m.Hello, true); err != nil {
		return nil, err
	}
	p := newPattern(sizes[len(sizes)-1])
	for _, size := range sizes {
		if err := tr.prepare(size); err != nil {
			return nil, err
		}
		if err := o.send(oobMsg{Type: "ready", Size: size}); err != nil {
			return nil, err
		}
		r, err := runServerTest(cfg, tr, p, size)
		if err != nil {
			return nil, fmt.Errorf("%d bytes: %w", size, err)
		}
		if cfg.op == "read" {
			// Reads take no part of the server's process: wait for the
			// client's end of the size (each of its Reads is bounded by
			// -timeout; a client gone closes the connection).
			if _, err := o.recv("finished", 0); err != nil {
				return nil, fmt.Errorf("%d bytes: %w", size, err)
			}
		}
		if err := o.send(oobMsg{Type: "done", Size: size, Verified: r.verified, Mismatches: r.mismatches, FirstError: r.firstError}); err != nil {
			return nil, err
		}
	}
	m, err = o.recv("report", cfg.timeout)
	if err != nil {
		return nil, err
	}
	if m.Report == nil {
		return nil, errors.New("out-of-band: empty report from the client")
	}
	rep = m.Report
	rep.Role = "server"
	return rep, nil
}
