package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
)

// End-to-end tests: real iwarpd processes (UD port ranges inside
// 31000-31099, reserved for this package) and real rping processes.

var built struct {
	once          sync.Once
	dir           string
	iwarpd, rping string
	err           error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// binaries builds iwarpd and rping once per test binary.
func binaries(t *testing.T) (iwarpd, rping string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs daemons; skipped with -short")
	}
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "rping-test-")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		pkgs := []string{"."}
		built.iwarpd = os.Getenv("RPING_TEST_IWARPD") // a prebuilt daemon, else ../../cmd/iwarpd
		if built.iwarpd == "" {
			pkgs = append(pkgs, "../../cmd/iwarpd")
			built.iwarpd = filepath.Join(dir, "iwarpd")
		}
		cmd := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		built.rping = filepath.Join(dir, "rping")
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.iwarpd, built.rping
}

// syncBuffer collects a child's output while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a running child process.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	err            error
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(name, args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.Env = append(os.Environ(), "IWARPD_SOCKET=") // only the flags choose the daemon
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
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

// wait waits (bounded) for the process and returns its exit status.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
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

// startDaemon runs iwarpd on a private socket and waits until it answers.
func startDaemon(t *testing.T, iwarpd, name, udPorts string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), name+".sock")
	d := start(t, iwarpd, "-socket", sock, "-ud-ports", udPorts, "-log-level", "warn")
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithHelloTimeout(time.Second))
		if err == nil {
			c.Close()
			return sock
		}
		select {
		case <-d.done:
			t.Fatalf("iwarpd %s exited: %v\n%s", name, d.err, d.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("iwarpd %s does not answer: %v\n%s", name, err, d.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a TCP port nothing listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// startServer runs "rping -s" (with -d, whose "listening on" line says it
// is ready) and waits until it listens.
func startServer(t *testing.T, rping, sock, port string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"-s", "-d", "-socket", sock, "-p", port}, extra...)
	s := start(t, rping, args...)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.stderr.String(), "listening on") {
		select {
		case <-s.done:
			t.Fatalf("server exited before listening: %v\n%s", s.err, s.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not listening after 10s:\n%s", s.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s
}

func TestRping(t *testing.T) {
	iwarpd, rping := binaries(t)
	sockA := startDaemon(t, iwarpd, "a", "31000-31049")
	sockB := startDaemon(t, iwarpd, "b", "31050-31099")

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
			port := freePort(t)
			srv := startServer(t, rping, sockA, port, append([]string{"-v"}, tc.serv...)...)
			args := append([]string{"-c", "-a", "127.0.0.1", "-p", port, "-socket", sockB,
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
		cl := start(t, rping, "-c", "-a", "127.0.0.1", "-p", freePort(t), "-socket", sockB, "-C", "1", "-V")
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
		port := freePort(t)
		srv := startServer(t, rping, sockA, port)
		cl := start(t, rping, "-c", "-a", "127.0.0.1", "-p", port, "-socket", sockB, "-C", "0", "-timeout", "5s")
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(srv.stderr.String(), "accepted") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // some pings
		srv.cmd.Process.Kill()
		if code := cl.wait(t, 30*time.Second); code != exitFailed {
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
