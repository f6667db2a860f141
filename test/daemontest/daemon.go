package daemontest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/netns"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

// startWait bounds (scaled) the wait for a new daemon's first Hello.
const startWait = 30 * time.Second

// Options configure Start. Flags of iwarpd are in docs/iwarpd.md.
type Options struct {
	Ports string      // -ud-ports "first-last" (required: a private block)
	Addr  string      // -addr (default: the daemon's, 127.0.0.1)
	Sock  string      // -socket (default: name.sock in a directory of the test's own)
	NS    *netns.Pair // run inside NS.Names[NSIdx] when set
	NSIdx int
	Extra []string // more flags, after the ones above (so they win)
	Env   []string // more environment (after CleanEnv)
	Bin   string   // the iwarpd program (default: Bins["iwarpd"], from Build)
}

// Daemon is a running iwarpd process.
type Daemon struct {
	Name   string
	Sock   string
	Ports  string
	Cmd    *exec.Cmd
	Stderr *Buffer // stdout and stderr: the daemon's log
	exited chan struct{}
	err    error
	killed atomic.Bool // the test ended the daemon (Stop, Kill, Signal)
}

// Start runs iwarpd with -socket, -ud-ports, -log-level info, -addr (when
// set), -engines IWARPD_TEST_ENGINES (when set; docs/engines.md) and
// o.Extra, and waits (bounded) until it answers Hello. Cleanup stops it and
// fails the test, with the daemon's log, if it died on its own; when the
// test failed the log is printed too.
func Start(t testing.TB, name string, o Options) *Daemon {
	t.Helper()
	bin := o.Bin
	if bin == "" {
		bin = Bins["iwarpd"]
	}
	if bin == "" {
		t.Fatal("daemontest: no iwarpd: call Build or Main from TestMain or set Options.Bin")
	}
	if o.Ports == "" {
		t.Fatal("daemontest: Options.Ports is required")
	}
	d := &Daemon{
		Name:   name,
		Sock:   o.Sock,
		Ports:  o.Ports,
		Stderr: &Buffer{},
		exited: make(chan struct{}),
	}
	if d.Sock == "" {
		d.Sock = filepath.Join(t.TempDir(), name+".sock")
	}
	args := []string{"-socket", d.Sock, "-ud-ports", d.Ports, "-log-level", "info"}
	if o.Addr != "" {
		args = append(args, "-addr", o.Addr)
	}
	if n := verbsdtest.Engines(); n > 0 { // before Extra, so a test's own -engines wins
		args = append(args, "-engines", strconv.Itoa(n))
	}
	args = append(args, o.Extra...)
	bin, args = withoutPtrace(bin, args)
	if o.NS != nil {
		d.Cmd = o.NS.Command(o.NSIdx, bin, args...)
	} else {
		d.Cmd = exec.Command(bin, args...)
	}
	d.Cmd.Env = append(CleanEnv(), o.Env...)
	d.Cmd.Stderr = d.Stderr
	d.Cmd.Stdout = d.Stderr
	d.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := pinfork.Start(d.Cmd); err != nil {
		t.Fatalf("starting daemon %s (%s): %v", name, bin, err)
	}
	go func() {
		d.err = d.Cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		if !d.killed.Load() && !d.Alive() {
			t.Errorf("daemon %s died during the test: %v\n%s", name, d.err, d.Stderr)
		}
		d.Stop()
		if t.Failed() {
			t.Logf("daemon %s log:\n%s", name, d.Stderr)
		}
	})
	deadline := time.Now().Add(Scaled(startWait))
	var lastErr error
	for i := 0; i < 10000 && time.Now().Before(deadline); i++ {
		if !d.Alive() {
			t.Fatalf("daemon %s exited before answering: %v\n%s", name, d.err, d.Stderr)
		}
		c, err := ofverbs.Open(ofverbs.WithSocket(d.Sock), ofverbs.WithHelloTimeout(time.Second), ofverbs.WithClientName("probe"))
		if err == nil {
			c.Close()
			return d
		}
		lastErr = err
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("daemon %s did not answer within %v: %v\n%s", name, Scaled(startWait), lastErr, d.Stderr)
	return nil
}

// withoutPtrace runs bin without CAP_SYS_PTRACE, as the systemd unit does
// (contrib/systemd/iwarpd.service; docs/security.md): a root test process
// starts the daemon through setpriv(1) with the capability dropped from
// the bounding set, so that no test passes on a privilege the daemon does
// not have. Without setpriv (or not root: no capability to drop) bin runs
// as it is.
func withoutPtrace(bin string, args []string) (string, []string) {
	if os.Geteuid() != 0 {
		return bin, args
	}
	sp, err := exec.LookPath("setpriv")
	if err != nil {
		return bin, args
	}
	return sp, append([]string{"--bounding-set", "-sys_ptrace", "--", bin}, args...)
}

// Alive reports whether the process is still running.
func (d *Daemon) Alive() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// Err is the process's exit status once it has exited.
func (d *Daemon) Err() error {
	<-d.exited
	return d.err
}

// PID is the daemon's process id.
func (d *Daemon) PID() int { return d.Cmd.Process.Pid }

// Stop ends the daemon: SIGTERM, then SIGKILL after a bounded wait. It
// reports whether SIGTERM was enough.
func (d *Daemon) Stop() bool {
	d.killed.Store(true)
	if !d.Alive() {
		return true
	}
	d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return true
	case <-time.After(Scaled(5 * time.Second)):
		d.Cmd.Process.Kill()
		<-d.exited
		return false
	}
}

// Signal sends sig to the daemon. Its exit is the test's doing from then
// on: cleanup does not report it (Wait returns its status).
func (d *Daemon) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	d.killed.Store(true)
	if err := d.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to daemon %s: %v", sig, d.Name, err)
	}
}

// Wait waits (bounded) for the daemon to exit, as after Signal, and returns
// its exit status: nil when it exited with status 0.
func (d *Daemon) Wait(t testing.TB) error {
	t.Helper()
	select {
	case <-d.exited:
		return d.err
	case <-time.After(Scaled(startWait)):
		t.Fatalf("daemon %s still running after %v\n%s", d.Name, Scaled(startWait), d.Stderr)
		return nil
	}
}

// Kill ends the daemon with SIGKILL and waits (bounded) for it.
func (d *Daemon) Kill(t testing.TB) {
	t.Helper()
	d.Signal(t, syscall.SIGKILL)
	d.Wait(t)
}

// CheckAlive fails the test if the daemon has exited.
func (d *Daemon) CheckAlive(t testing.TB) {
	t.Helper()
	if !d.Alive() {
		t.Fatalf("daemon %s is dead: %v\n%s", d.Name, d.err, d.Stderr)
	}
}

// Open opens an ofverbs session on the daemon, closed at cleanup.
func (d *Daemon) Open(t testing.TB, client string) *ofverbs.Context {
	t.Helper()
	c, err := ofverbs.Open(ofverbs.WithSocket(d.Sock), ofverbs.WithClientName(client))
	if err != nil {
		t.Fatalf("open %s: %v", d.Name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
