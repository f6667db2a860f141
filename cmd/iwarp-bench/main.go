// Command iwarp-bench is the UD benchmark of iwarpd: 64 B ping-pong latency
// (half round trip) and 64 KiB streaming bandwidth through ofverbs, two
// daemons with their clients, each node (daemon + client) bound to its own
// CPU, every number printed as a ratio to raw sockets measured in the same
// run between the same endpoints with the same wait discipline (poll, then
// block). It drives the binaries of `make build` (bin/iwarpd,
// bin/iwarp-perf) and, when installed, libfabric's fi_pingpong as a
// reference.
//
// Scenarios: "loopback" (two daemons on 127.0.0.1) and "veth" (two network
// namespaces joined by a veth pair at MTU 1500; needs root and iproute2).
// Loopback also runs the size sweeps, bidirectional bandwidth and multi-QP
// scaling (1..64 QPs between two processes, scaling.go); -profile records
// the daemons' CPU profiles (profile.go).
// Runs are interleaved over -rounds rounds; each metric is reported as its
// median and [min–max] over the rounds, each ratio round by round.
//
// Targets are informational: the exit status is 0 when every run completed
// with every message intact, 1 when a run failed or data was wrong, 2 for a
// usage error — never for a missed target. See docs/benchmarks.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iwarpd/iwarpd/internal/benchreport"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// Message sizes. Raw UDP cannot carry 65536 octets in one datagram: its
// bandwidth baseline uses the largest datagram, 65507; bandwidths are
// compared in bits per second, so the 0.04 % difference in size is noise.
const (
	latSize    = 64
	bwSize     = 65536
	rawUDPSize = 65507
)

// benchConfig is what the flags say.
type benchConfig struct {
	Bin           string        `json:"bin"`
	Scenario      string        `json:"scenario"`
	Rounds        int           `json:"rounds"`
	LatIters      int           `json:"lat_iterations"`
	BWIters       int           `json:"bw_iterations"`
	Window        int           `json:"window"`
	PollWindow    time.Duration `json:"poll_window_ns"`
	DaemonArgs    []string      `json:"daemon_args"`
	CPUA          int           `json:"cpu_a"`
	CPUB          int           `json:"cpu_b"`
	FI            bool          `json:"fi"`
	FIPingpong    string        `json:"fi_pingpong,omitempty"` // path, when found
	PerfTimeout   time.Duration `json:"perf_timeout_ns"`
	RunTimeout    time.Duration `json:"run_timeout_ns"`
	Quick         bool          `json:"quick"`
	Only          []string      `json:"only,omitempty"` // metric keys of the runs to make (all when empty)
	SweepIters    int           `json:"sweep_iterations"`
	LatSizes      []int         `json:"lat_sizes"`
	BWSizes       []int         `json:"bw_sizes"`
	Out           string        `json:"out"`            // bench-results directory ("" none)
	Idle          time.Duration `json:"idle_ns"`        // idle-cost measurement, each (0: skipped)
	Bidir         bool          `json:"bidir"`          // bidirectional bandwidth runs
	Loss          []int         `json:"loss_pct"`       // veth: loss rates of the RD goodput runs
	LossSize      int           `json:"loss_size"`      // veth: message size of the loss runs (octets)
	MemBin        string        `json:"mem_bin"`        // iwarp-mem, when found
	MemPeers      []int         `json:"mem_peers"`      // peers N of the memory runs
	Ports         portPlan      `json:"ports"`          // the daemons' ports, outside the ephemeral range (ports.go)
	ScalingQPs    []int         `json:"scaling_qps"`    // QP counts of the multi-QP scaling runs (scaling.go; none: skipped)
	ScalingRounds int           `json:"scaling_rounds"` // rounds that include the scaling runs (the first ones)
	ScalingN      int           `json:"scaling_lat_messages"`
	ScalingBWN    int           `json:"scaling_bw_messages"`
	Profile       string        `json:"profile,omitempty"` // directory of the daemons' CPU profiles (profile.go)
	CPUSizes      []int         `json:"cpu_sizes"`         // CPU per message: message sizes (cpumsg.go; none: skipped)
	CPUN          int           `json:"cpu_messages"`      // CPU per message: messages per run up to 4 KiB (a quarter above)
	EngineStreams []int         `json:"engine_streams"`    // engines per core: numbers of independent streams (enginescale.go; none: skipped)
	EngineRounds  int           `json:"engine_rounds"`
	EngineN       int           `json:"engine_messages"` // engines per core: 64 KiB messages per stream
	JSON          bool          `json:"-"`
	MPI           mpiConfig     `json:"mpi"` // the MPI section (mpi.go)
}

// knownRuns are the keys -only accepts.
var knownRuns = map[string]bool{kRawUDPLat: true, kUDLat: true, kFIRxdLat: true, kFIUDPLat: true, kRawUDPBW: true, kUDBW: true, kRawTCPBW: true,
	kRawTCPLat: true, kRCSendLat: true, kRCWriteLat: true, kRawTCPBW1M: true, kRCWriteBW1M: true, kRCReadBW1M: true,
	kRCFetchAddLat: true, kRCSendFetchAddLat: true}

// only returns the runs to make (nil: all).
func (c *benchConfig) only() map[string]bool {
	if len(c.Only) == 0 {
		return nil
	}
	m := map[string]bool{}
	for _, k := range c.Only {
		m[k] = true
	}
	return m
}

// enginesOnly: -only engines, the engines-per-core experiment alone
// (enginescale.go).
func (c *benchConfig) enginesOnly() bool { return len(c.Only) == 1 && c.Only[0] == "engines" }

func (c *benchConfig) perfBin() string   { return filepath.Join(c.Bin, "iwarp-perf") }
func (c *benchConfig) daemonBin() string { return filepath.Join(c.Bin, "iwarpd") }

// ctlBin is iwarpctl when built beside the others ("" if not).
func (c *benchConfig) ctlBin() string {
	p := filepath.Join(c.Bin, "iwarpctl")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

func (c *benchConfig) describe() string {
	fi := "fi_pingpong: not found (scripts/install-bench-deps.sh installs libfabric-bin)"
	switch {
	case !c.FI:
		fi = "fi_pingpong: off"
	case c.FIPingpong != "":
		fi = "fi_pingpong: " + c.FIPingpong
	}
	daemon := "defaults"
	if len(c.DaemonArgs) > 0 {
		daemon = strings.Join(c.DaemonArgs, " ")
	}
	only := ""
	if len(c.Only) > 0 {
		only = "; only " + strings.Join(c.Only, ",")
	}
	scaling := "scaling: off"
	if len(c.ScalingQPs) > 0 {
		qps := make([]string, len(c.ScalingQPs))
		for i, n := range c.ScalingQPs {
			qps[i] = strconv.Itoa(n)
		}
		scaling = fmt.Sprintf("scaling QPs %s (first %d rounds, lat %d × 64 B, bw %d × 64 KiB)", strings.Join(qps, ","),
			min(c.ScalingRounds, c.Rounds), c.ScalingN, c.ScalingBWN)
	}
	ranks := ""
	if env := append(append([]string{}, c.MPI.Inherited...), c.MPI.Env...); len(env) > 0 {
		ranks = "; MPI ranks' environment " + strings.Join(env, " ") // mpienv.go
	}
	return fmt.Sprintf("rounds %d%s; lat %d × %d B, bw %d × %d B (raw UDP %d B), window %d; clients poll %v then block; "+
		"iwarpd %s; node A cpu %d, node B cpu %d; %s; %s%s",
		c.Rounds, only, c.LatIters, latSize, c.BWIters, bwSize, rawUDPSize, c.Window, c.PollWindow, daemon, c.CPUA, c.CPUB, fi, scaling,
		ranks)
}

// defaultBin is the directory of the iwarp-bench executable when iwarpd is
// beside it (as after make build), else ./bin.
func defaultBin() string {
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		if _, err := os.Stat(filepath.Join(dir, "iwarpd")); err == nil {
			return dir
		}
	}
	return "bin"
}

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func parseConfig(args []string, stderr io.Writer) (benchConfig, error) {
	c := benchConfig{}
	fs := flag.NewFlagSet("iwarp-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Bin, "bin", defaultBin(), "`directory` holding iwarpd and iwarp-perf (make build)")
	fs.StringVar(&c.Scenario, "scenario", "all", "`which`: loopback, veth, mpi (the MPI section alone, mpi.go) or all")
	fs.IntVar(&c.Rounds, "rounds", 5, "interleaved rounds of every run")
	fs.IntVar(&c.LatIters, "n", 10000, "latency `iterations` (round trips) per run")
	fs.IntVar(&c.BWIters, "bw-n", 5000, "bandwidth `messages` per run")
	fs.IntVar(&c.Window, "window", 64, "bandwidth: most messages in flight (iwarp-perf -window)")
	fs.DurationVar(&c.PollWindow, "poll-window", 50*time.Microsecond, "clients (raw and UD alike) poll this long, then block (iwarp-perf -poll-window)")
	daemonArgs := fs.String("daemon-args", "", "extra iwarpd `flags` for both daemons (space separated; \"\" for the daemon's defaults)")
	fs.IntVar(&c.CPUA, "cpu-a", 0, "CPU of node A (daemon A and the servers); -1: unbound")
	fs.IntVar(&c.CPUB, "cpu-b", 1, "CPU of node B (daemon B and the clients); -1: unbound")
	fs.BoolVar(&c.FI, "fi", true, "loopback: also run fi_pingpong (rdm udp;ofi_rxd and dgram udp) when installed")
	fs.DurationVar(&c.PerfTimeout, "perf-timeout", 10*time.Second, "iwarp-perf -timeout: longest wait for one message")
	fs.DurationVar(&c.RunTimeout, "run-timeout", 120*time.Second, "longest time one run (server + client) may take before it is killed")
	fs.BoolVar(&c.Quick, "quick", false, "CI smoke mode: 1 round, one size per sweep (64 B, 64 KiB), 200 latency iterations, 100 bandwidth messages, 1 s idle, loss 0,5, memory N=16 (unless given)")
	only := fs.String("only", "", "comma-separated `runs` to make (for profiling): raw_udp_lat, ud_lat, fi_rxd_lat, fi_udp_lat, raw_udp_bw, ud_bw, raw_tcp_bw, raw_tcp_lat, rc_send_lat, rc_write_lat, raw_tcp_bw_1m, rc_write_bw_1m, rc_read_bw_1m; "+
		"the sweep's m_<transport>_<lat|bw>_<size>, scale_<ud|rd|rc>_<lat|bw>_<qps>, or scaling for all the scaling runs; "+
		"cpu_<raw-udp|raw-tcp|ud|rd|rc>_<size>, rate_<transport> (its 64 B run), or cpu for all the CPU-per-message runs; engines: the engines-per-core experiment alone")
	fs.IntVar(&c.SweepIters, "sweep-n", 2000, "size sweep: latency `iterations` up to 4 KiB (fewer above, in proportion)")
	fs.StringVar(&c.Out, "out", "bench-results", "`directory` of the CSV files, PNG plots and summary.md (\"\": write none)")
	fs.DurationVar(&c.Idle, "idle", 10*time.Second, "idle cost: CPU of an idle daemon, then of one serving an idle client, over this `long` each (0: skip)")
	fs.BoolVar(&c.Bidir, "bidir", true, "bidirectional bandwidth: two pairs in opposite directions at once")
	fs.IntVar(&c.LossSize, "loss-size", bwSize, "veth: message `size` of the loss runs (octets; a 64 KiB datagram is 45 wire packets, so at 20 % loss almost none arrives whole: use 4096 there)")
	loss := fs.String("loss", "0,1,5", "veth: RD (and raw TCP) goodput under these loss `percentages` (nftables drop on input, per wire packet)")
	mem := fs.String("mem-peers", "16,64,256,1024", "memory per peer with bin/iwarp-mem for these `N` (\"\": skip)")
	scaling := fs.String("scaling", "1,2,4,8,16,32,64", "multi-QP scaling: UD, RD and RC with these numbers of queue `pairs` (iwarp-perf -qps; \"\": skip)")
	fs.IntVar(&c.ScalingRounds, "scaling-rounds", 3, "the scaling runs take part in the first `N` rounds only")
	fs.IntVar(&c.ScalingN, "scaling-n", 2048, "scaling latency: `messages` per run (rounded down to a multiple of the QPs)")
	fs.IntVar(&c.ScalingBWN, "scaling-bw-n", 1000, "scaling bandwidth: 64 KiB `messages` per run")
	cpuSizesFlag := fs.String("cpu", "64,1024,65536", "CPU per message and message rate: UD, RD, RC Send and raw UDP/TCP streams at these `sizes` (64 B also gives the message rate; \"\": skip)")
	fs.IntVar(&c.CPUN, "cpu-n", 200000, "CPU per message: `messages` per run up to 4 KiB (a quarter of it at 64 KiB)")
	engineStreams := fs.String("engines", "2,4", "engines per core: one daemon with -engines 1, then 2, serving this many independent RD and RC `streams` at once (\"\": skip)")
	fs.IntVar(&c.EngineRounds, "engines-rounds", 3, "engines per core: `rounds` (each runs -engines 1 and -engines 2)")
	fs.IntVar(&c.EngineN, "engines-n", 4000, "engines per core: 64 KiB `messages` per stream")
	fs.StringVar(&c.Profile, "profile", "", "write CPU profiles of both daemons (iwarpd -cpuprofile) and, if perf works, perf record -g of them, into `directory`; use with -only")
	fs.BoolVar(&c.JSON, "json", false, "print one JSON document instead of the tables")
	mpiTransports, mpiMem, mpiTestsFlag, mpiLayoutsFlag := registerMPIFlags(fs, &c.MPI)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: iwarp-bench [flags]\n\n"+
			"UD latency and bandwidth through two iwarpd daemons, as ratios to raw sockets measured in the same run.\n"+
			"Exit status: 0 every run completed with intact data (targets met or not), 1 a run failed or data was wrong, 2 usage.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, &usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.Quick {
		if !set["rounds"] {
			c.Rounds = 1
		}
		if !set["n"] {
			c.LatIters = 200
		}
		if !set["bw-n"] {
			c.BWIters = 100
		}
		if !set["sweep-n"] {
			c.SweepIters = 50
		}
		if !set["idle"] {
			c.Idle = time.Second
		}
		if !set["loss"] {
			*loss = "0,5"
		}
		if !set["mem-peers"] {
			*mem = "16"
		}
		if !set["scaling"] {
			*scaling = "1,4"
		}
		if !set["scaling-n"] {
			c.ScalingN = 200
		}
		if !set["scaling-bw-n"] {
			c.ScalingBWN = 100
		}
		if !set["cpu"] {
			*cpuSizesFlag = "64"
		}
		if !set["cpu-n"] {
			c.CPUN = 500
		}
		if !set["engines"] {
			*engineStreams = "2"
		}
		if !set["engines-rounds"] {
			c.EngineRounds = 1
		}
		if !set["engines-n"] {
			c.EngineN = 200
		}
		c.LatSizes, c.BWSizes = quickLatSizes, quickBWSizes
	} else {
		c.LatSizes, c.BWSizes = fullLatSizes, fullBWSizes
	}
	var err error
	if c.Loss, err = intList(*loss, 0, 50); err != nil {
		return c, &usageError{fmt.Sprintf("-loss: %v", err)}
	}
	if c.MemPeers, err = intList(*mem, 1, 20000); err != nil {
		return c, &usageError{fmt.Sprintf("-mem-peers: %v", err)}
	}
	if c.ScalingQPs, err = intList(*scaling, 1, 64); err != nil {
		return c, &usageError{fmt.Sprintf("-scaling: %v", err)}
	}
	if c.EngineStreams, err = intList(*engineStreams, 1, 16); err != nil {
		return c, &usageError{fmt.Sprintf("-engines: %v", err)}
	}
	if c.EngineRounds < 1 || c.EngineN < 1 {
		return c, &usageError{"-engines-rounds and -engines-n must be at least 1"}
	}
	if c.ScalingRounds < 1 || c.ScalingN < 1 || c.ScalingBWN < 1 {
		return c, &usageError{"-scaling-rounds, -scaling-n and -scaling-bw-n must be at least 1"}
	}
	if c.CPUSizes, err = intList(*cpuSizesFlag, 1, 65536); err != nil {
		return c, &usageError{fmt.Sprintf("-cpu: %v", err)}
	}
	for _, size := range c.CPUSizes {
		if !knownRuns[cpuKey("ud", size)] {
			return c, &usageError{fmt.Sprintf("-cpu: size %d: want some of %v", size, cpuSizes)}
		}
	}
	if c.CPUN < 1 {
		return c, &usageError{"-cpu-n must be at least 1"}
	}
	c.DaemonArgs = strings.Fields(*daemonArgs)
	for _, k := range strings.FieldsFunc(*only, func(r rune) bool { return r == ',' || r == ' ' }) {
		if k == "engines" { // the engines-per-core experiment alone
			c.Only = append(c.Only, k)
			continue
		}
		if k == "scaling" { // every run of the scaling experiment
			c.Only = append(c.Only, scalingRunKeys(c.ScalingQPs)...)
			continue
		}
		if k == "cpu" { // every run of the CPU-per-message experiment
			c.Only = append(c.Only, cpuRunKeys(c.CPUSizes)...)
			continue
		}
		if tr, ok := strings.CutPrefix(k, "rate_"); ok && knownRuns[cpuKey(tr, 64)] { // the message rate: the 64 B run
			c.Only = append(c.Only, cpuKey(tr, 64))
			continue
		}
		if !knownRuns[k] {
			return c, &usageError{fmt.Sprintf("-only %q: unknown run (want raw_udp_lat, ud_lat, fi_rxd_lat, fi_udp_lat, raw_udp_bw, ud_bw, raw_tcp_bw, raw_tcp_lat, rc_send_lat, rc_write_lat, raw_tcp_bw_1m, rc_write_bw_1m, rc_read_bw_1m)", k)}
		}
		c.Only = append(c.Only, k)
	}
	switch {
	case c.Scenario != "loopback" && c.Scenario != "veth" && c.Scenario != "mpi" && c.Scenario != "all":
		return c, &usageError{fmt.Sprintf("-scenario %q: want loopback, veth, mpi or all", c.Scenario)}
	case c.Rounds < 1 || c.LatIters < 1 || c.BWIters < 1 || c.SweepIters < 1:
		return c, &usageError{"-rounds, -n, -bw-n and -sweep-n must be at least 1"}
	case c.Idle < 0:
		return c, &usageError{"-idle must be >= 0"}
	case c.Window < 1 || c.Window > 4096:
		return c, &usageError{fmt.Sprintf("-window %d: want 1..4096", c.Window)}
	case c.PollWindow < 0 || c.PerfTimeout <= 0 || c.RunTimeout <= 0:
		return c, &usageError{"-poll-window must be >= 0, -perf-timeout and -run-timeout > 0"}
	case c.CPUA >= runtime.NumCPU() || c.CPUB >= runtime.NumCPU():
		return c, &usageError{fmt.Sprintf("-cpu-a %d / -cpu-b %d: this machine has %d CPUs", c.CPUA, c.CPUB, runtime.NumCPU())}
	}
	for _, b := range []string{c.daemonBin(), c.perfBin()} {
		if st, err := os.Stat(b); err != nil || st.IsDir() {
			return c, &usageError{fmt.Sprintf("%s not found: run make build, or give -bin DIR", b)}
		}
	}
	if c.FI {
		if p, err := exec.LookPath("fi_pingpong"); err == nil {
			c.FIPingpong = p
		}
	}
	if c.Profile != "" {
		if err := os.MkdirAll(c.Profile, 0o755); err != nil {
			return c, &usageError{fmt.Sprintf("-profile: %v", err)}
		}
		if c.Profile, err = filepath.Abs(c.Profile); err != nil {
			return c, &usageError{fmt.Sprintf("-profile: %v", err)}
		}
	}
	if p := filepath.Join(c.Bin, "iwarp-mem"); len(c.MemPeers) > 0 {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			c.MemBin = p
		}
	}
	if err := finishMPIFlags(&c, *mpiTransports, *mpiMem, *mpiTestsFlag, *mpiLayoutsFlag, set); err != nil {
		return c, err
	}
	return c, nil
}

// intList parses "a,b,c" into integers in [lo, hi] ("" is the empty list).
func intList(s string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		v, err := strconv.Atoi(f)
		if err != nil || v < lo || v > hi {
			return nil, fmt.Errorf("%q: want integers %d..%d", f, lo, hi)
		}
		out = append(out, v)
	}
	return out, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "iwarp-bench: %v\n", err)
		}
		return exitUsage
	}
	if err := planPorts(&cfg, stderr); err != nil {
		fmt.Fprintf(stderr, "iwarp-bench: %v\n", err)
		return exitFailed
	}
	s := newSession()
	defer s.close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer func() { signal.Stop(sig); close(sig) }()
	go func() {
		if _, ok := <-sig; ok {
			fmt.Fprintln(stderr, "iwarp-bench: interrupted; cleaning up")
			s.close()
			os.Exit(exitFailed)
		}
	}()

	doc := &document{Machine: machineLine(), Tree: treeCommit(), Config: cfg, OK: true}
	fmt.Fprintf(stderr, "iwarp-bench: machine: %s\n", doc.Machine)
	if (cfg.Scenario == "loopback" || cfg.Scenario == "all") && !cfg.enginesOnly() {
		doc.Scenarios = append(doc.Scenarios, runLoopback(s, &cfg, stderr))
	}
	if (cfg.Scenario == "veth" || cfg.Scenario == "all") && !cfg.enginesOnly() {
		doc.Scenarios = append(doc.Scenarios, runVeth(s, &cfg, stderr))
	}
	if cfg.MPI.Enabled && (cfg.Scenario == "mpi" || cfg.Scenario == "all") && !cfg.enginesOnly() {
		doc.Scenarios = append(doc.Scenarios, runMPI(s, &cfg, stderr))
	}
	var exps []benchreport.Experiment
	for _, sc := range doc.Scenarios {
		if len(sc.Failures) > 0 {
			doc.OK = false
		}
		exps = append(exps, scenarioExperiments(sc, &cfg)...)
	}
	if cfg.Idle > 0 && (cfg.Scenario == "loopback" || cfg.Scenario == "all") && !cfg.enginesOnly() {
		r, err := runIdle(s, &cfg, stderr)
		if err != nil {
			doc.Failures = append(doc.Failures, "idle cost: "+err.Error())
			fmt.Fprintf(stderr, "[idle] FAILED: %v\n", err)
		} else {
			doc.Idle = &r
			exps = append(exps, idleExperiment(r, cfg.Idle))
		}
	}
	if len(cfg.EngineStreams) > 0 && (len(cfg.Only) == 0 || cfg.enginesOnly()) && (cfg.Scenario == "loopback" || cfg.Scenario == "all") {
		r, err := runEngineScale(s, &cfg, stderr) // enginescale.go
		if err != nil {
			doc.Failures = append(doc.Failures, "engines per core: "+err.Error())
			fmt.Fprintf(stderr, "[engines] FAILED: %v\n", err)
		} else {
			doc.Engines = &r
			exps = append(exps, engineScaleExperiment(r, &cfg))
		}
	}
	if cfg.MemBin != "" && (cfg.Scenario == "loopback" || cfg.Scenario == "all") && !cfg.enginesOnly() {
		e, failures := runMemory(&cfg, stderr)
		doc.Failures = append(doc.Failures, failures...)
		if e, ok := experiment(benchreport.Experiment{Name: e.Name, Title: e.Title, XLabel: e.XLabel, YLabel: e.YLabel,
			LogX: e.LogX, LogY: e.LogY, Baseline: e.Baseline, Note: e.Note}, e.Series...); ok {
			exps = append(exps, e)
		}
	}
	if len(doc.Failures) > 0 {
		doc.OK = false
	}
	if cfg.Out != "" {
		m := benchreport.Machine{Description: doc.Machine, Tree: doc.Tree, Config: cfg.describe(), Missed: missedOf(doc)}
		if err := benchreport.WriteAll(cfg.Out, m, exps); err != nil {
			fmt.Fprintf(stderr, "iwarp-bench: %v\n", err)
			doc.OK = false
		} else {
			fmt.Fprintf(stderr, "iwarp-bench: wrote %d experiments (CSV, PNG) and %s to %s\n", len(exps), benchreport.SummaryFile, cfg.Out)
		}
	}
	if cfg.JSON {
		err = writeJSON(stdout, doc)
	} else {
		err = writeTables(stdout, doc)
	}
	if err != nil {
		fmt.Fprintf(stderr, "iwarp-bench: %v\n", err)
		return exitFailed
	}
	if !doc.OK {
		return exitFailed
	}
	return exitOK
}
