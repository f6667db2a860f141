package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildDaemon builds the real iwarpd binary once per test binary.
func buildDaemon(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "iwarpd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// waitFor polls cond every 10 ms, at most 500 times (5 s before scaling).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func isSocket(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

func startDaemon(t *testing.T, bin, sock string, extra ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, append([]string{"-socket", sock}, extra...)...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	waitFor(t, "the daemon to answer on its control socket", func() bool {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})
	return cmd, &stderr
}

func TestDaemonLifecycle(t *testing.T) {
	bin := buildDaemon(t)
	sock := filepath.Join(t.TempDir(), "run", "iwarpd.sock")

	first, stderr := startDaemon(t, bin, sock, "-socket-mode", "0600")
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("socket mode = %#o, want 0600", got)
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dialing the live daemon: %v", err)
	}
	conn.Close()

	// A second daemon on the same socket refuses with a clear message and
	// leaves the first one's socket alone.
	out, err := exec.Command(bin, "-socket", sock).CombinedOutput()
	if err == nil {
		t.Fatal("second daemon started on a live socket")
	}
	if !strings.Contains(string(out), "already serving this socket") {
		t.Errorf("second daemon's message does not say why: %s", out)
	}
	if !isSocket(sock) {
		t.Fatal("second daemon removed the live daemon's socket")
	}

	// SIGTERM: clean exit, socket removed.
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v\n%s", err, stderr)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket still present after SIGTERM: %v", err)
	}
	if !strings.Contains(stderr.String(), "iwarpd stopped") {
		t.Errorf("log does not record the shutdown:\n%s", stderr)
	}
}

func TestDaemonReplacesStaleSocket(t *testing.T) {
	bin := buildDaemon(t)
	sock := filepath.Join(t.TempDir(), "iwarpd.sock")
	// A socket file nobody listens on, as a killed daemon leaves behind.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if !isSocket(sock) {
		t.Fatal("stale socket not created")
	}
	d, _ := startDaemon(t, bin, sock)
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("daemon did not replace the stale socket: %v", err)
	}
	conn.Close()
	d.Process.Signal(syscall.SIGINT)
	if err := d.Wait(); err != nil {
		t.Fatalf("exit after SIGINT: %v", err)
	}
}

func TestDaemonRefusesNonSocketPath(t *testing.T) {
	bin := buildDaemon(t)
	path := filepath.Join(t.TempDir(), "iwarpd.sock")
	if err := os.WriteFile(path, []byte("not a socket"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-socket", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is not a socket") {
		t.Fatalf("want refusal naming the problem, got err=%v out=%s", err, out)
	}
	if b, _ := os.ReadFile(path); string(b) != "not a socket" {
		t.Fatal("daemon clobbered a regular file")
	}
}

func TestConfigFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{"IWARPD_SOCKET": "/tmp/x.sock", "IWARPD_LOG_LEVEL": "debug", "IWARPD_LOG_FORMAT": "json"}
	getenv := func(k string) string { return env[k] }
	var usage bytes.Buffer
	cfg, err := parseConfig([]string{"-log-level", "warn"}, getenv, &usage)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Socket != "/tmp/x.sock" || cfg.LogLevel.String() != "warning" || cfg.LogFormat != "json" || cfg.SocketMode != 0o660 {
		t.Fatalf("cfg = %+v (flag must win over env, env over default)", cfg)
	}
	bad := [][]string{
		{"-socket-mode", "999"},
		{"-log-format", "xml"},
		{"-log-level", "loud"},
		{"-socket", ""},
		{"stray"},
	}
	for _, args := range bad {
		if _, err := parseConfig(args, func(string) string { return "" }, &usage); err == nil {
			t.Errorf("parseConfig(%q) accepted bad input", args)
		}
	}
	if _, err := parseConfig(nil, func(k string) string {
		if k == "IWARPD_LOG_FORMAT" {
			return "yaml"
		}
		return ""
	}, &usage); err == nil || !strings.Contains(err.Error(), "IWARPD_LOG_FORMAT") {
		t.Errorf("bad environment value not reported by name: %v", err)
	}
}
