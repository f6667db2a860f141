package daemontest

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The package's own tests run real daemons on UD ports 23900-23949 (a
// block no other package's tests name) without RD ports.
var testBlocks = Blocks{Base: 23900, Size: 10, Count: 5}

func TestMain(m *testing.M) { os.Exit(Main(m, nil)) }

// recorder is a testing.TB that records what Start and its cleanup report
// instead of failing the real test, so that a test can check that a
// failure is reported. Fatal ends the calling goroutine as testing's does.
type recorder struct {
	testing.TB // the real test: TempDir, Helper, Name
	mu         sync.Mutex
	errs, logs []string
	cleanups   []func()
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.Errorf("%s", fmt.Sprint(args...))
	runtime.Goexit()
}

func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs) > 0
}

func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

// run calls f on a goroutine of its own (a Fatal ends it there) and then
// the cleanups f registered, last first, as testing does.
func (r *recorder) run(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func (r *recorder) report() string {
	return "errors:\n" + strings.Join(r.errs, "\n") + "\nlogs:\n" + strings.Join(r.logs, "\n")
}

func options() Options { return Options{Ports: testBlocks.Next(), Extra: []string{"-rd-ports", "0-0"}} }

// A daemon starts, serves a session, and stops on SIGTERM at cleanup
// without a report.
func TestStartServesAndStops(t *testing.T) {
	r := &recorder{TB: t}
	var d *Daemon
	r.run(func() {
		d = Start(r, "served", options())
		c := d.Open(r, "client")
		if _, err := c.QueryDevice(); err != nil {
			r.Errorf("QueryDevice: %v", err)
		}
	})
	if r.Failed() || d == nil {
		t.Fatalf("a healthy daemon was reported:\n%s", r.report())
	}
	if d.Alive() {
		t.Fatal("daemon still running after cleanup")
	}
	if !strings.Contains(d.Stderr.String(), "iwarpd stopped") {
		t.Errorf("the log does not show a clean stop:\n%s", d.Stderr)
	}
}

// A daemon that dies during the test, not by the test's hand, fails the
// test at cleanup, with its log.
func TestDeathFailsTheTest(t *testing.T) {
	r := &recorder{TB: t}
	r.run(func() {
		d := Start(r, "victim", options())
		if err := d.Cmd.Process.Signal(syscall.SIGKILL); err != nil { // as a crash would
			r.Fatalf("kill: %v", err)
		}
		d.Err() // reaped: cleanup sees it dead
	})
	if !r.Failed() {
		t.Fatal("a daemon that died during the test was not reported")
	}
	rep := r.report()
	if !strings.Contains(rep, "daemon victim died during the test") || !strings.Contains(rep, `msg="iwarpd started"`) {
		t.Errorf("the report does not name the daemon and show its log:\n%s", rep)
	}
}

// A daemon that cannot start (a bad flag) fails Start with its output.
func TestExitBeforeAnswerFails(t *testing.T) {
	r := &recorder{TB: t}
	o := options()
	o.Extra = append(o.Extra, "-no-such-flag")
	var returned bool
	r.run(func() {
		Start(r, "bad-flag", o)
		returned = true
	})
	if returned || !r.Failed() {
		t.Fatalf("Start returned for a daemon that exited (returned %v):\n%s", returned, r.report())
	}
	if rep := r.report(); !strings.Contains(rep, "daemon bad-flag exited before answering") || !strings.Contains(rep, "no-such-flag") {
		t.Errorf("the report does not say why:\n%s", rep)
	}
}

// An exit the test causes (Signal) is not reported, and Wait returns its
// status: 0 after SIGTERM, the signal after SIGKILL.
func TestSignalAndWait(t *testing.T) {
	for _, tc := range []struct {
		sig   syscall.Signal
		clean bool
	}{{syscall.SIGTERM, true}, {syscall.SIGKILL, false}} {
		r := &recorder{TB: t}
		var err error
		r.run(func() {
			d := Start(r, "signalled", options())
			d.Signal(r, tc.sig)
			err = d.Wait(r)
		})
		if r.Failed() {
			t.Errorf("%v: an exit the test caused was reported:\n%s", tc.sig, r.report())
		}
		if (err == nil) != tc.clean {
			t.Errorf("%v: Wait = %v", tc.sig, err)
		}
	}
}

// Options.Sock places the socket; Options.Env reaches the daemon (after
// CleanEnv, which drops the test's IWARPD_* settings).
func TestSockAndEnv(t *testing.T) {
	t.Setenv("IWARPD_LOG_FORMAT", "json") // dropped: the log stays text
	sock := t.TempDir() + "/sub/dir/d.sock"
	o := options()
	o.Sock = sock
	o.Env = []string{"IWARPD_MAX_QP=3"}
	d := Start(t, "placed", o)
	if d.Sock != sock {
		t.Fatalf("Sock = %q, want %q", d.Sock, sock)
	}
	attr, err := d.Open(t, "client").QueryDevice()
	if err != nil || attr.MaxQP != 3 {
		t.Errorf("QueryDevice = %+v, %v: want MaxQP 3 from Options.Env", attr, err)
	}
	if strings.HasPrefix(strings.TrimSpace(d.Stderr.String()), "{") {
		t.Errorf("the test's IWARPD_LOG_FORMAT reached the daemon:\n%s", d.Stderr)
	}
}

func TestBlocksInTurn(t *testing.T) {
	b := Blocks{Base: 100, Size: 10, Count: 3}
	var got []string
	for range 4 {
		got = append(got, b.Next())
	}
	if want := "100-109 110-119 120-129 100-109"; strings.Join(got, " ") != want {
		t.Errorf("blocks %v, want %s", got, want)
	}
}

// TCPPorts skips a port in use and fails the test when the whole block is.
// Ports 23950-23951.
func TestTCPPortsSkipInUse(t *testing.T) {
	p := TCPPorts{Base: 23950, Count: 2}
	first := p.Free(t)
	if first < 23950 || first > 23951 {
		t.Fatalf("Free = %d, outside the block", first)
	}
	l1, err := net.Listen("tcp", fmt.Sprintf(":%d", first))
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Close()
	for range 3 {
		if got := p.Free(t); got == first {
			t.Fatalf("Free = %d, a port in use", got)
		}
	}
	l2, err := net.Listen("tcp", fmt.Sprintf(":%d", 23950+23951-first))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	r := &recorder{TB: t}
	r.run(func() { r.Errorf("Free returned %d", p.Free(r)) })
	if rep := r.report(); !strings.Contains(rep, "no free TCP port in 23950-23951") {
		t.Errorf("a block in use was not reported:\n%s", rep)
	}
}
