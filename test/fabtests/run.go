package fabtests

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Outcome is a test's result under runfabtests.sh's rules.
type Outcome int

const (
	Pass Outcome = iota
	Fail
	Notrun
	// SharedFail is a failure its configuration's reference failed the
	// same way in the same run (Classify): the utility provider's own.
	SharedFail
)

func (o Outcome) String() string {
	return [...]string{"pass", "FAIL", "notrun", "FAIL=ref"}[o]
}

// Exit statuses of runfabtests.sh: -FI_ENODATA and -FI_ENOSYS mean "not
// run" (the provider offers nothing the test needs); 124 is timeout(1)'s.
const (
	exitNoData  = 61
	exitNoSys   = 38
	exitTimeout = 124
)

// Proc is how one process of a test ended.
type Proc struct {
	Cmd      string
	Exit     int // exit status; 124 when the runner killed it at its timeout; 128+N after signal N
	TimedOut bool
	Output   string // its stdout and stderr (the last outputMax octets)
}

// Result is one test in one configuration.
type Result struct {
	Config  string
	Test    Test
	Outcome Outcome
	Server  Proc // the only process of a unit test
	Client  *Proc
	Took    time.Duration
	// SharedWith names the reference configuration that failed this
	// test the same way in the same run (Outcome SharedFail).
	SharedWith string
}

// Runner runs tests. Ports: configuration i (its index in Configs) and test
// j (its index in Tests) use server port PortBase + 100*i + j, so
// configurations can run at once on one address.
type Runner struct {
	Bin      string                  // the suite's bin directory (Build)
	Env      []string                // every test process's environment (Config.Env is added)
	Addr     string                  // the server's address, and the client's source
	PortBase int                     // first server port
	Timeout  time.Duration           // per process, from its start
	MemLimit uint64                  // address space per process in octets (prlimit --as); 0: none
	Jobs     int                     // configurations run at once (at least 1)
	Progress func(Result)            // called after each test when not nil (from several goroutines)
	Skip     func(Config, Test) bool // when not nil, a test it names is not started

	fixed sync.Mutex // held by a test on a fixed port (fixedPort)
}

// fixedPort lists the programs that use a TCP port of their own choosing,
// the same in every configuration: the out-of-band control socket of
// common/shared.c (port 3000, FT_OPT_OOB_CTRL and the OOB sockets of
// fi_multi_ep and fi_rdm_multi_client) and fi_cm_data's 2710. Two
// configurations must not run them at once (runfabtests.sh runs one test
// at a time).
var fixedPort = map[string]bool{
	"fi_av_xfer": true, "fi_bw": true, "fi_multi_recv": true, "fi_rdm_rma_trigger": true,
	"fi_unexpected_msg": true, "fi_dgram_pingpong": true, "fi_cm_data": true, "fi_multi_ep": true,
	"fi_rdm_multi_client": true,
}

// Run runs every test each configuration runs and returns the results,
// configurations in the order given, tests in Tests order. ctx ends the
// run early (the tests running are killed).
func (r *Runner) Run(ctx context.Context, configs []Config, tests []Test) [][]Result {
	out := make([][]Result, len(configs))
	jobs := max(r.Jobs, 1)
	sem := make(chan struct{}, jobs)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for ci, c := range configs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			idx := configIndex(c.Name)
			for ti, t := range tests {
				if ctx.Err() != nil {
					return
				}
				if !c.Runs(t) || (r.Skip != nil && r.Skip(c, t)) {
					continue
				}
				res := r.one(ctx, c, t, r.PortBase+100*idx+testIndex(t, ti))
				if r.Progress != nil {
					mu.Lock()
					r.Progress(res)
					mu.Unlock()
				}
				out[ci] = append(out[ci], res)
			}
		}()
	}
	wg.Wait()
	return out
}

func configIndex(name string) int {
	for i, c := range Configs {
		if c.Name == name {
			return i
		}
	}
	return len(Configs)
}

func testIndex(t Test, fallback int) int {
	for i, u := range Tests() {
		if u.Line == t.Line {
			return i
		}
	}
	return fallback % 100
}

// one runs t in configuration c with the server on port.
func (r *Runner) one(ctx context.Context, c Config, t Test, port int) Result {
	if fixedPort[strings.Fields(t.Line)[0]] {
		r.fixed.Lock()
		defer r.fixed.Unlock()
	}
	start := time.Now()
	res := Result{Config: c.Name, Test: t}
	args := strings.Fields(strings.NewReplacer("SERVER_ADDR", r.Addr, "GOOD_ADDR", r.Addr).Replace(t.Line))
	args = append(args, "-p", c.Prov)
	env := append(append([]string(nil), r.Env...), c.Env...)
	if t.Kind == Unit {
		res.Server = r.start(ctx, env, args).wait()
		res.Outcome = unitOutcome(res.Server.Exit)
		res.Took = time.Since(start)
		return res
	}
	p := strconv.Itoa(port)
	srv := r.start(ctx, env, append(append([]string(nil), args...), "-B", p, "-s", r.Addr))
	// runfabtests.sh gives the server a second to listen: a client that
	// comes first is refused (an ordering, not a measurement).
	select {
	case <-srv.done:
	case <-time.After(time.Second):
	case <-ctx.Done():
	}
	cli := r.start(ctx, env, append(append([]string(nil), args...), "-P", p, "-s", r.Addr, r.Addr)).wait()
	res.Client = &cli
	if cli.Exit != 0 {
		// As runfabtests.sh: a server left alone after its client failed
		// gets two seconds to end, then is killed.
		select {
		case <-srv.done:
		case <-time.After(2 * time.Second):
			srv.kill()
		}
	}
	res.Server = srv.wait()
	res.Outcome = csOutcome(res.Server.Exit, cli.Exit)
	res.Took = time.Since(start)
	return res
}

func unitOutcome(exit int) Outcome {
	switch exit {
	case 0:
		return Pass
	case exitNoData, exitNoSys:
		return Notrun
	}
	return Fail
}

func csOutcome(s, c int) Outcome {
	switch {
	case s == 0 && c == 0:
		return Pass
	case s == c && (s == exitNoData || s == exitNoSys):
		return Notrun
	}
	return Fail
}

// proc is a running test process.
type proc struct {
	cmd     *exec.Cmd
	out     *tailBuffer
	done    chan struct{}
	err     error
	timeout bool
	mu      sync.Mutex
}

// start runs args[0] of the suite with args, in a process group of its own,
// capped by MemLimit and killed at Timeout or when ctx ends.
func (r *Runner) start(ctx context.Context, env, args []string) *proc {
	argv := append([]string{filepath.Join(r.Bin, args[0])}, args[1:]...)
	if r.MemLimit > 0 {
		argv = append([]string{"prlimit", fmt.Sprintf("--as=%d", r.MemLimit), "--"}, argv...)
	}
	p := &proc{out: &tailBuffer{max: outputMax}, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// No Pdeathsig: Linux sends it when the forking thread ends, which in a
	// Go program is not the end of the runner.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		p.err = err
		close(p.done)
		return p
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	go func() {
		t := time.NewTimer(r.Timeout)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			p.mu.Lock()
			p.timeout = true
			p.mu.Unlock()
			p.kill()
		case <-ctx.Done():
			p.kill()
		}
	}()
	return p
}

// kill ends the process's group (the test and anything it started; nothing
// else on the machine).
func (p *proc) kill() {
	if p.cmd.Process != nil {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

func (p *proc) wait() Proc {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	res := Proc{Cmd: strings.Join(p.cmd.Args, " "), Output: p.out.String(), TimedOut: p.timeout}
	var ee *exec.ExitError
	switch {
	case p.timeout:
		res.Exit = exitTimeout
	case p.err == nil:
	case errors.As(p.err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Exit = 128 + int(ws.Signal())
		} else {
			res.Exit = ee.ExitCode()
		}
	default:
		res.Exit = 127
		res.Output += p.err.Error()
	}
	return res
}

// outputMax bounds the output kept of one process.
const outputMax = 64 << 10

// tailBuffer keeps the last max octets written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0:0], b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
