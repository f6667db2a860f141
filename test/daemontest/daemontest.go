package daemontest

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/netns"
)

// Bins are the programs Build compiled, by name ("iwarpd", "iwarpctl",
// "iwarp-perf").
var Bins = map[string]string{}

// Build compiles ./cmd/iwarpd, ./cmd/iwarpctl and ./cmd/iwarp-perf of the
// module above the working directory into dir and records them in Bins.
func Build(dir string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/iwarpd", "./cmd/iwarpctl", "./cmd/iwarp-perf")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("daemontest: go build ./cmd/...: %v\n%s", err, out)
	}
	for _, n := range []string{"iwarpd", "iwarpctl", "iwarp-perf"} {
		Bins[n] = filepath.Join(dir, n)
	}
	return nil
}

// ModuleRoot walks up from the working directory to go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("daemontest: go.mod not found above the test directory")
		}
		dir = parent
	}
}

// Scaled multiplies d by IWARPD_TEST_TIMEOUT_SCALE (default 1).
func Scaled(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv("IWARPD_TEST_TIMEOUT_SCALE"), 64); err == nil && f > 0 {
		return time.Duration(float64(d) * f)
	}
	return d
}

// CleanEnv is the environment without IWARPD_* settings, so that only
// flags configure a daemon.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IWARPD_") {
			env = append(env, kv)
		}
	}
	return env
}

// Buffer collects a child's output; safe to read while the child writes.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Options configure Start.
type Options struct {
	Ports string      // -ud-ports "first-last" (required: a private block)
	Addr  string      // -addr (default: the daemon's, 127.0.0.1)
	NS    *netns.Pair // run inside NS.Names[NSIdx] when set
	NSIdx int
	Extra []string // more flags
	Env   []string // more environment (after CleanEnv)
	Bin   string   // the iwarpd program (default: Bins["iwarpd"], from Build)
}

// Daemon is a running iwarpd process.
type Daemon struct {
	Name   string
	Sock   string
	Ports  string
	Cmd    *exec.Cmd
	Stderr *Buffer
	exited chan struct{}
	err    error
	killed atomic.Bool
}

// Start runs iwarpd on a private socket and o.Ports, and waits (bounded)
// until it answers Hello. Cleanup stops it and fails the test if it died
// on its own.
func Start(t testing.TB, name string, o Options) *Daemon {
	t.Helper()
	bin := o.Bin
	if bin == "" {
		bin = Bins["iwarpd"]
	}
	if bin == "" {
		t.Fatal("daemontest: no iwarpd: call Build from TestMain or set Options.Bin")
	}
	if o.Ports == "" {
		t.Fatal("daemontest: Options.Ports is required")
	}
	d := &Daemon{
		Name:   name,
		Sock:   filepath.Join(t.TempDir(), name+".sock"),
		Ports:  o.Ports,
		Stderr: &Buffer{},
		exited: make(chan struct{}),
	}
	args := []string{"-socket", d.Sock, "-ud-ports", d.Ports, "-log-level", "info"}
	if o.Addr != "" {
		args = append(args, "-addr", o.Addr)
	}
	if n := verbsdtest.Engines(); n > 0 { // IWARPD_TEST_ENGINES: before Extra, so a test's own -engines wins
		args = append(args, "-engines", strconv.Itoa(n))
	}
	args = append(args, o.Extra...)
	if o.NS != nil {
		d.Cmd = o.NS.Command(o.NSIdx, bin, args...)
	} else {
		d.Cmd = exec.Command(bin, args...)
	}
	d.Cmd.Env = append(CleanEnv(), o.Env...)
	d.Cmd.Stderr = d.Stderr
	d.Cmd.Stdout = d.Stderr
	d.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.Cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
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
	deadline := time.Now().Add(Scaled(10 * time.Second))
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
	t.Fatalf("daemon %s did not answer within %v: %v\n%s", name, Scaled(10*time.Second), lastErr, d.Stderr)
	return nil
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

// Kill ends the daemon with SIGKILL and waits (bounded) for it.
func (d *Daemon) Kill(t testing.TB) {
	t.Helper()
	d.killed.Store(true)
	if err := d.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", d.Name, err)
	}
	select {
	case <-d.exited:
	case <-time.After(Scaled(10 * time.Second)):
		t.Fatalf("daemon %s still running after SIGKILL", d.Name)
	}
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

// Eventually polls cond (bounded in count and time) until it holds.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Scaled(timeout))
	for i := 0; i < 100000; i++ {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", Scaled(timeout), what)
}
