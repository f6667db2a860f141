package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/netns"
)

// helperEnv selects a helper mode of the test binary (see helper_test.go)
// instead of running the tests.
const helperEnv = "IWARPD_INTEGRATION_HELPER"

// bins are the binaries TestMain built.
var bins struct {
	iwarpd, iwarpctl, perf string
}

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	dir, err := os.MkdirTemp("", "iwarpd-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		os.Exit(1)
	}
	code := 1
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// build compiles the three commands into dir.
func build(dir string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/iwarpd", "./cmd/iwarpctl", "./cmd/iwarp-perf")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/...: %v\n%s", err, out)
	}
	bins.iwarpd = filepath.Join(dir, "iwarpd")
	bins.iwarpctl = filepath.Join(dir, "iwarpctl")
	bins.perf = filepath.Join(dir, "iwarp-perf")
	return nil
}

// moduleRoot walks up from the working directory to go.mod.
func moduleRoot() (string, error) {
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
			return "", errors.New("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// scaled multiplies d by IWARPD_TEST_TIMEOUT_SCALE (default 1).
func scaled(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv("IWARPD_TEST_TIMEOUT_SCALE"), 64); err == nil && f > 0 {
		return time.Duration(float64(d) * f)
	}
	return d
}

// lockedBuffer collects a child's output; read while the child writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// UD port blocks of 50 inside 29000-29499, handed out in turn. Another
// process may hold some of them (verbsd's tests, running in parallel, sweep
// 20000-60000): a daemon skips a port in use. Single fixed ports, which
// cannot be skipped, come from 19xxx (rd_test.go); TCP listening ports from
// 29800-29899 (freeTCPPort).
const (
	portBase   = 29000
	portBlock  = 50
	portBlocks = 10
)

var nextBlock atomic.Int32

// daemon is a running iwarpd process.
type daemon struct {
	name   string
	sock   string
	cmd    *exec.Cmd
	ports  string // "first-last"
	stderr *lockedBuffer
	exited chan struct{} // closed when the process has been waited for
	err    error         // its exit status, after exited
	killed atomic.Bool   // the test ended it on purpose
}

type daemonOpts struct {
	addr  string      // -addr (default: the daemon's, 127.0.0.1)
	ns    *netns.Pair // run inside ns.Names[nsIndex]
	nsIdx int
	extra []string
}

// startDaemon runs iwarpd on a private socket and port block, and waits
// (bounded) until it answers Hello. Cleanup stops it (SIGTERM, then
// SIGKILL) and fails the test if it died on its own.
func startDaemon(t *testing.T, name string, o daemonOpts) *daemon {
	t.Helper()
	block := int(nextBlock.Add(1)-1) % portBlocks
	first := portBase + block*portBlock
	d := &daemon{
		name:   name,
		sock:   filepath.Join(t.TempDir(), name+".sock"),
		ports:  fmt.Sprintf("%d-%d", first, first+portBlock-1),
		stderr: &lockedBuffer{},
		exited: make(chan struct{}),
	}
	args := []string{"-socket", d.sock, "-ud-ports", d.ports, "-log-level", "info"}
	if o.addr != "" {
		args = append(args, "-addr", o.addr)
	}
	args = append(args, o.extra...)
	if o.ns != nil {
		d.cmd = o.ns.Command(o.nsIdx, bins.iwarpd, args...)
	} else {
		d.cmd = exec.Command(bins.iwarpd, args...)
	}
	d.cmd.Env = cleanEnv()
	d.cmd.Stderr = d.stderr
	d.cmd.Stdout = d.stderr
	// If this test binary dies, the daemon goes with it.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		if !d.killed.Load() && !d.alive() {
			t.Errorf("daemon %s died during the test: %v\n%s", name, d.err, d.stderr)
		}
		d.stop()
		if t.Failed() {
			t.Logf("daemon %s log:\n%s", name, d.stderr)
		}
	})
	deadline := time.Now().Add(scaled(10 * time.Second))
	var lastErr error
	for time.Now().Before(deadline) {
		if !d.alive() {
			t.Fatalf("daemon %s exited before answering: %v\n%s", name, d.err, d.stderr)
		}
		c, err := ofverbs.Open(ofverbs.WithSocket(d.sock), ofverbs.WithHelloTimeout(time.Second), ofverbs.WithClientName("probe"))
		if err == nil {
			c.Close()
			return d
		}
		lastErr = err
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("daemon %s did not answer within %v: %v\n%s", name, scaled(10*time.Second), lastErr, d.stderr)
	return nil
}

// cleanEnv is the test's environment without IWARPD_* settings, so that
// only the flags configure the daemons.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IWARPD_") {
			env = append(env, kv)
		}
	}
	return env
}

func (d *daemon) alive() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// stop ends the daemon: SIGTERM, then SIGKILL after a bounded wait.
func (d *daemon) stop() {
	d.killed.Store(true)
	if !d.alive() {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(scaled(5 * time.Second)):
		d.cmd.Process.Kill()
		<-d.exited
	}
}

// kill ends the daemon with SIGKILL and waits for it.
func (d *daemon) kill(t *testing.T) {
	t.Helper()
	d.killed.Store(true)
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", d.name, err)
	}
	select {
	case <-d.exited:
	case <-time.After(scaled(10 * time.Second)):
		t.Fatalf("daemon %s still running after SIGKILL", d.name)
	}
}

// checkAlive fails the test if the daemon process has exited.
func (d *daemon) checkAlive(t *testing.T) {
	t.Helper()
	if !d.alive() {
		t.Fatalf("daemon %s is dead: %v\n%s", d.name, d.err, d.stderr)
	}
}

// open opens an ofverbs session on the daemon, closed at cleanup.
func (d *daemon) open(t *testing.T, client string) *ofverbs.Context {
	t.Helper()
	c, err := ofverbs.Open(ofverbs.WithSocket(d.sock), ofverbs.WithClientName(client))
	if err != nil {
		t.Fatalf("open %s: %v", d.name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ctl runs iwarpctl against the daemon (bounded) and returns its stdout and
// exit code.
func (d *daemon) ctl(t *testing.T, args ...string) ([]byte, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scaled(15*time.Second))
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bins.iwarpctl, append([]string{"-socket", d.sock}, args...)...)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.Bytes(), 0
	case errors.As(err, &exit) && ctx.Err() == nil:
		return append(stdout.Bytes(), stderr.Bytes()...), exit.ExitCode()
	default:
		t.Fatalf("iwarpctl %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
		return nil, -1
	}
}

// ctlJSON runs iwarpctl -json cmd and decodes its output into v.
func (d *daemon) ctlJSON(t *testing.T, cmd string, v any) {
	t.Helper()
	out, code := d.ctl(t, "-json", cmd)
	if code != 0 {
		t.Fatalf("iwarpctl -json %s: exit %d: %s", cmd, code, out)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("iwarpctl -json %s: %v\n%s", cmd, err, out)
	}
}

// sessions is iwarpctl -json sessions, without iwarpctl's own session.
func (d *daemon) sessions(t *testing.T) []proto.SessionInfo {
	t.Helper()
	var all, out []proto.SessionInfo
	d.ctlJSON(t, "sessions", &all)
	for _, s := range all {
		if s.Client != "iwarpctl" {
			out = append(out, s)
		}
	}
	return out
}

// counters is iwarpctl -json counters.
func (d *daemon) counters(t *testing.T) map[string]int64 {
	t.Helper()
	c := map[string]int64{}
	d.ctlJSON(t, "counters", &c)
	return c
}

// qpInfo is one entry of iwarpctl -json qps.
type qpInfo struct {
	Session uint64 `json:"session"`
	proto.QPInfo
}

func (d *daemon) qps(t *testing.T) []qpInfo {
	t.Helper()
	var q []qpInfo
	d.ctlJSON(t, "qps", &q)
	return q
}

// qpCounters returns the counters of the QP serving addr (nil if none).
func (d *daemon) qpCounters(t *testing.T, addr string) map[string]int64 {
	t.Helper()
	for _, q := range d.qps(t) {
		if q.Addr == addr {
			return q.Counters
		}
	}
	return nil
}

// eventually polls cond (bounded in count and time) until it holds.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(scaled(timeout))
	for i := 0; i < 100000; i++ {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", scaled(timeout), what)
}
