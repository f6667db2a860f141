// Command fabtests-run runs libfabric's conformance suite, fabtests v1.17.0,
// against the iwarpd provider of this checkout and against the reference
// providers tcp and udp;ofi_rxd in the same run, and prints the table of
// issue 19 (docs/libfabric.md "fabtests"). `make fabtests` runs it.
//
// It builds the suite once into -suite (reused after), starts one loopback
// iwarpd of its own (its own socket and port blocks), runs every test's
// server and client as separate processes with a timeout and an
// address-space cap, kills only the processes it started, and stops the
// daemon at the end. Exit status 1 when an iwarpd configuration failed a
// test, 2 when the run could not be made. A failure of iwarpd;ofi_rxd that
// udp;ofi_rxd, its reference, had the same way in the same run is RxD's
// own (fabtests.Classify): a column of the table and a list of its own,
// not a failure of the exit status.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/iwarpd/iwarpd/test/fabtests"
)

func main() {
	os.Exit(run())
}

func run() int {
	suite := flag.String("suite", "build/fabtests", "`directory` the suite is built and installed into (reused when present)")
	tarball := flag.String("tarball", fabtests.Tarball, "the suite's source `tarball`")
	prov := flag.String("prov", "c/build", "`directory` holding libiwarpd-fi.so (FI_PROVIDER_PATH)")
	iwarpd := flag.String("iwarpd", "bin/iwarpd", "the daemon `program`")
	configs := flag.String("configs", "", "comma-separated configuration `names` (default: all: "+names()+")")
	filter := flag.String("run", "", "run only tests whose command line matches this `regexp`")
	timeout := flag.Duration("timeout", 60*time.Second, "bound on each test process")
	mem := flag.Uint64("mem", 4<<30, "address space of each test process, `octets` (prlimit --as; 0: no cap)")
	jobs := flag.Int("jobs", 4, "configurations run at once")
	portBase := flag.Int("port-base", 9228, "server port of the first test of the first configuration; each configuration takes 100 ports")
	addr := flag.String("addr", "127.0.0.1", "address of servers and clients (the daemon serves it)")
	logDir := flag.String("log", "build/fabtests/logs", "`directory` for the daemon's log and every failed test's output")
	verbose := flag.Bool("v", false, "print every failed test's commands and output")
	fiEnv := flag.String("fi-env", "", "comma-separated `FI_X=V` settings every test process gets (the caller's FI_ variables are not passed), e.g. FI_IWARPD_FASTPATH_RDM=1")
	flag.Parse()

	cfgs, err := pick(*configs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fabtests-run:", err)
		return 2
	}
	var re *regexp.Regexp
	if *filter != "" {
		if re, err = regexp.Compile(*filter); err != nil {
			fmt.Fprintln(os.Stderr, "fabtests-run: -run:", err)
			return 2
		}
	}
	if err := os.MkdirAll(*logDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "fabtests-run:", err)
		return 2
	}
	if !fabtests.Built(*suite) {
		fmt.Printf("building fabtests into %s (once; output in %s/build.log)\n", *suite, *logDir)
		f, err := os.Create(filepath.Join(*logDir, "build.log"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "fabtests-run:", err)
			return 2
		}
		err = fabtests.Build(*tarball, *suite, f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "fabtests-run:", err)
			return 2
		}
	}
	provDir, err := filepath.Abs(*prov)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fabtests-run:", err)
		return 2
	}
	if _, err := os.Stat(filepath.Join(provDir, "libiwarpd-fi.so")); err != nil {
		fmt.Fprintf(os.Stderr, "fabtests-run: no provider in %s (run make build): %v\n", provDir, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tmp, err := os.MkdirTemp("", "fabtests-run-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fabtests-run:", err)
		return 2
	}
	defer os.RemoveAll(tmp)
	sock := filepath.Join(tmp, "iwarpd.sock")
	d, err := startDaemon(*iwarpd, sock, *addr, *portBase, filepath.Join(*logDir, "iwarpd.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fabtests-run:", err)
		return 2
	}
	defer d.stop()

	env := []string{"FI_PROVIDER_PATH=" + provDir, "FI_IWARPD_SOCKET=" + sock}
	for _, kv := range strings.Split(*fiEnv, ",") {
		if strings.HasPrefix(kv, "FI_") && strings.Contains(kv, "=") {
			env = append(env, kv)
		}
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FI_") {
			env = append(env, kv)
		}
	}
	bin, _ := filepath.Abs(filepath.Join(*suite, "bin"))
	var tests []fabtests.Test
	for _, t := range fabtests.Tests() {
		if re == nil || re.MatchString(t.Line) {
			tests = append(tests, t)
		}
	}
	r := &fabtests.Runner{Bin: bin, Env: env, Addr: *addr, PortBase: *portBase, Timeout: *timeout,
		MemLimit: *mem, Jobs: *jobs}
	if _, err := exec.LookPath("prlimit"); err != nil && *mem > 0 {
		fmt.Fprintln(os.Stderr, "fabtests-run: prlimit (util-linux) not found: no memory cap; -mem 0 to say so")
		return 2
	}
	failLog, err := os.Create(filepath.Join(*logDir, "failures.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fabtests-run:", err)
		return 2
	}
	defer failLog.Close()
	r.Progress = func(res fabtests.Result) {
		fmt.Println(fabtests.Line(res))
		if res.Outcome == fabtests.Fail {
			fmt.Fprintln(failLog, fabtests.Failure(res))
			if *verbose {
				fmt.Println(fabtests.Failure(res))
			}
		}
	}
	start := time.Now()
	fmt.Printf("fabtests v1.17.0: %d tests, configurations %s, daemon %s (log %s)\n", len(tests), strings.Join(cfgNames(cfgs), ", "), sock, filepath.Join(*logDir, "iwarpd.log"))
	results := r.Run(ctx, cfgs, tests)
	// A layered configuration's failure its reference had the same way in
	// this run is the utility provider's: counted apart, listed below.
	fabtests.Classify(cfgs, results)
	fmt.Printf("\nfabtests v1.17.0, %s, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), time.Since(start).Round(time.Second))
	fabtests.Table(os.Stdout, cfgs, results)
	var shared strings.Builder
	fabtests.SharedFailures(&shared, results)
	if shared.Len() > 0 {
		fmt.Printf("\nfailed as their reference failed them, the same way, in this run (the utility provider's own):\n%s", shared.String())
	}
	fmt.Printf("\nfailed tests' output: %s\n", failLog.Name())
	if !d.alive() {
		fmt.Fprintln(os.Stderr, "fabtests-run: the daemon died during the run; its log:", filepath.Join(*logDir, "iwarpd.log"))
		return 1
	}
	code := 0
	for i, c := range cfgs {
		if c.Iwarp && fabtests.Count(results[i]).Fail > 0 {
			code = 1
		}
	}
	if ctx.Err() != nil {
		code = 2
	}
	return code
}

func names() string { return strings.Join(cfgNames(fabtests.Configs), ", ") }

func cfgNames(cs []fabtests.Config) []string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name)
	}
	return n
}

func pick(list string) ([]fabtests.Config, error) {
	if list == "" {
		return fabtests.Configs, nil
	}
	var out []fabtests.Config
	for _, n := range strings.Split(list, ",") {
		c, ok := fabtests.ConfigByName(strings.TrimSpace(n))
		if !ok {
			return nil, fmt.Errorf("-configs: no configuration %q (have %s)", n, names())
		}
		out = append(out, c)
	}
	return out, nil
}

// daemon is the iwarpd of the run.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startDaemon runs iwarpd on sock and addr with UD and RD port blocks above
// the tests' ports, and waits (bounded) until its socket accepts.
func startDaemon(bin, sock, addr string, portBase int, logPath string) (*daemon, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	ud := portBase + 100*len(fabtests.Configs)
	cmd := exec.Command(bin, "-socket", sock, "-addr", addr, "-log-level", "info",
		"-ud-ports", fmt.Sprintf("%d-%d", ud, ud+499), "-rd-ports", fmt.Sprintf("%d-%d", ud+500, ud+999))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w (run make build)", bin, err)
	}
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); log.Close(); close(d.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("unixpacket", sock); err == nil {
			c.Close()
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("%s exited at start; its log: %s", bin, logPath)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("%s did not open %s within 30s; its log: %s", bin, sock, logPath)
		}
	}
}

func (d *daemon) alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
	}
}
