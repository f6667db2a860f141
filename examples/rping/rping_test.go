package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"golang.org/x/sys/unix"
)

// End-to-end tests: real iwarpd processes and real rping processes.
//
// Ports of this package, used by no other package's tests and below the
// kernel's ephemeral range (32768-60999, which every test's outgoing
// connections and unbound sockets draw from): the rping servers' TCP ports
// come from 26100-26199 (serverPort), the daemons' UD ports from 26200-26299.
// Every limit only bounds a wait (nothing is timed) and is stretched by
// IWARPD_TEST_TIMEOUT_SCALE.

// TestMain builds rping, iwarpd and the tools once per test binary
// (test/daemontest, which also starts the daemons).
func TestMain(m *testing.M) { os.Exit(daemontest.Main(m, nil, "./examples/rping")) }

// scaled is test/daemontest.Scaled.
var scaled = daemontest.Scaled

// pingTimeout is rping's -timeout in these tests (its bound on the
// connection set-up and on each step of a ping; 10 s by default).
func pingTimeout() string { return scaled(30 * time.Second).String() }

// proc is a running child process.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *daemontest.Buffer
	done           chan struct{}
	err            error
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(name, args...), stdout: &daemontest.Buffer{}, stderr: &daemontest.Buffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.Env = append(os.Environ(), "IWARPD_SOCKET=") // only the flags choose the daemon
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := pinfork.Start(p.cmd); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits (bounded by d, scaled) for the process and returns its exit
// status.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	d = scaled(d)
	select {
	case <-p.done:
	case <-time.After(d):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s did not exit within %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args, d, p.stdout, p.stderr)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("%s: %v", p.cmd.Args, p.err)
	}
	return 0
}

// startDaemon runs iwarpd (test/daemontest.Start; RPING_TEST_IWARPD names
// a prebuilt one) on a private socket and returns the socket.
func startDaemon(t *testing.T, name, udPorts string) string {
	t.Helper()
	return daemontest.Start(t, name, daemontest.Options{Ports: udPorts, Bin: os.Getenv("RPING_TEST_IWARPD"),
		Extra: []string{"-log-level", "warn"}}).Sock
}

// The rping servers' TCP ports: 26100-26199 (daemontest.TCPPorts).
var serverPorts = daemontest.TCPPorts{Base: 26100, Count: 100}

// serverPort returns a port of the package's block that was free on every
// address a moment ago.
func serverPort(t *testing.T) string { return strconv.Itoa(serverPorts.Free(t)) }

// refusedPort returns a loopback TCP port where a connection is certainly
// refused until the test ends: a socket bound to it and never listening
// holds it (without SO_REUSEADDR or SO_REUSEPORT no other bind succeeds, and
// the kernel never picks a bound port as a connection's source), and a SYN
// to a port nothing listens on is answered by RST.
func refusedPort(t *testing.T) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(sa.(*unix.SockaddrInet4).Port)
}

// startServer runs "rping -s" (with -d, whose "listening on" line says it
// is ready) and waits until it listens.
func startServer(t *testing.T, rping, sock, port string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"-s", "-d", "-socket", sock, "-p", port, "-timeout", pingTimeout()}, extra...)
	s := start(t, rping, args...)
	limit := scaled(30 * time.Second)
	deadline := time.Now().Add(limit)
	for !strings.Contains(s.stderr.String(), "listening on") {
		select {
		case <-s.done:
			t.Fatalf("server exited before listening: %v\n%s", s.err, s.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not listening after %v:\n%s", limit, s.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s
}

func TestRping(t *testing.T) {
	if testing.Short() {
		t.Skip("runs daemons; skipped with -short")
	}
	rping := daemontest.Bins["rping"]
	sockA := startDaemon(t, "a", "26200-26249")
	sockB := startDaemon(t, "b", "26250-26299")

	tests := []struct {
		name         string
		count, size  int
		client, serv []string
	}{
		{"C20-S64", 20, 64, nil, nil},
		{"C20-S4096", 20, 4096, nil, nil},
		{"client larger than server -S", 3, 65535, nil, []string{"-S", "64"}},
		{"MPA rev 1 no CRC", 5, 100, []string{"-mpa-rev", "1", "-crc", "off"}, nil},
		{"peer-to-peer RTR read, IRD/ORD 1", 5, 64, []string{"-p2p", "-rtr", "read", "-ird", "1", "-ord", "1"}, []string{"-ird", "1", "-ord", "1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			port := serverPort(t)
			srv := startServer(t, rping, sockA, port, append([]string{"-v"}, tc.serv...)...)
			args := append([]string{"-c", "-a", "127.0.0.1", "-p", port, "-socket", sockB, "-timeout", pingTimeout(),
				"-C", fmt.Sprint(tc.count), "-S", fmt.Sprint(tc.size), "-vV"}, tc.client...)
			cl := start(t, rping, args...)
			if code := cl.wait(t, 60*time.Second); code != 0 {
				t.Fatalf("client exit %d\nstderr:\n%s\nserver stderr:\n%s", code, cl.stderr, srv.stderr)
			}
			if code := srv.wait(t, 15*time.Second); code != 0 {
				t.Fatalf("server exit %d\nstderr:\n%s", code, srv.stderr)
			}
			want := expectedPings(tc.count, tc.size)
			got := strings.Split(strings.TrimSuffix(cl.stdout.String(), "\n"), "\n")
			if len(got) != len(want) {
				t.Fatalf("client printed %d lines, want %d:\n%s", len(got), len(want), cl.stdout)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("client line %d\n got %q\nwant %q", i, got[i], want[i])
				}
			}
			got = strings.Split(strings.TrimSuffix(srv.stdout.String(), "\n"), "\n")
			if len(got) != len(want) {
				t.Fatalf("server printed %d lines, want %d:\n%s", len(got), len(want), srv.stdout)
			}
			for i := range want {
				if w := "server " + want[i]; got[i] != w {
					t.Fatalf("server line %d\n got %q\nwant %q", i, got[i], w)
				}
			}
			if !strings.Contains(srv.stderr.String(), fmt.Sprintf("the client left after %d pings", tc.count)) {
				t.Errorf("server stderr does not report the client's departure:\n%s", srv.stderr)
			}
		})
	}

	t.Run("no server", func(t *testing.T) {
		cl := start(t, rping, "-c", "-a", "127.0.0.1", "-p", refusedPort(t), "-socket", sockB, "-C", "1", "-V", "-timeout", pingTimeout())
		if code := cl.wait(t, 30*time.Second); code != exitFailed {
			t.Fatalf("exit %d, want %d\n%s", code, exitFailed, cl.stderr)
		}
		if msg := cl.stderr.String(); !strings.Contains(msg, "rping client failed: connect to 127.0.0.1:") ||
			!strings.Contains(msg, "connection refused") {
			t.Fatalf("stderr does not say the connection was refused:\n%s", msg)
		}
		if cl.stdout.String() != "" {
			t.Fatalf("stdout: %q", cl.stdout)
		}
	})

	t.Run("no daemon", func(t *testing.T) {
		cl := start(t, rping, "-c", "-a", "127.0.0.1", "-socket", filepath.Join(t.TempDir(), "none.sock"))
		if code := cl.wait(t, 30*time.Second); code != exitFailed {
			t.Fatalf("exit %d, want %d\n%s", code, exitFailed, cl.stderr)
		}
		if !strings.Contains(cl.stderr.String(), "opening the iwarpd device") {
			t.Fatalf("stderr: %s", cl.stderr)
		}
	})

	t.Run("server gone mid-run", func(t *testing.T) {
		port := serverPort(t)
		srv := startServer(t, rping, sockA, port)
		// -v: the client prints each ping it completed, which tells when it
		// is in its ping loop. Its -timeout bounds the connection set-up
		// and each ping step; after the kill it ends the ping in progress
		// if the daemons' disconnect did not.
		cl := start(t, rping, "-c", "-a", "127.0.0.1", "-p", port, "-socket", sockB, "-C", "0", "-v", "-timeout", scaled(10*time.Second).String())
		// Precondition: the server accepted and the client completed a ping,
		// so the failure below can only be one of the ping loop.
		limit := scaled(30 * time.Second)
		deadline := time.Now().Add(limit)
		for !strings.Contains(srv.stderr.String(), "accepted") || !strings.Contains(cl.stdout.String(), "ping data: ") {
			select {
			case <-cl.done:
				t.Fatalf("client exited before its first ping: %v\nstderr:\n%s\nserver stderr:\n%s", cl.err, cl.stderr, srv.stderr)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no ping within %v\nclient stderr:\n%s\nserver stderr:\n%s", limit, cl.stderr, srv.stderr)
			}
			time.Sleep(10 * time.Millisecond)
		}
		srv.cmd.Process.Kill()
		if code := cl.wait(t, 60*time.Second); code != exitFailed {
			t.Fatalf("client exit %d, want %d\n%s", code, exitFailed, cl.stderr)
		}
		if msg := cl.stderr.String(); !strings.Contains(msg, "rping client failed: ping ") {
			t.Fatalf("stderr: %s", msg)
		}
	})

	t.Run("usage", func(t *testing.T) {
		cl := start(t, rping, "-c", "-S", "10", "-a", "127.0.0.1")
		if code := cl.wait(t, 10*time.Second); code != exitUsage {
			t.Fatalf("exit %d, want %d", code, exitUsage)
		}
		if !strings.Contains(cl.stderr.String(), "invalid size 10 (valid range is 26 to 65535)") {
			t.Fatalf("stderr: %s", cl.stderr)
		}
	})
}
