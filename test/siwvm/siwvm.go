//go:build linux

package siwvm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Environment variables and defaults.
const (
	// EnvEnable must be "1" for Available to offer the guest (make interop
	// sets it): every boot costs seconds of CPU on a shared machine.
	EnvEnable = "IWARPD_SIW_VM"
	// EnvCache overrides DefaultCache, where build.sh leaves the guest.
	EnvCache = "IWARPD_SIW_VM_CACHE"
	// EnvScripts overrides the directory holding run.sh.
	EnvScripts = "IWARPD_SIW_VM_SCRIPTS"
	// DefaultCache is build.sh's default cache directory.
	DefaultCache = "/var/cache/iwarpd-siw-vm"
	// DefaultTimeout bounds a Run whose context has no deadline.
	DefaultTimeout = 180 * time.Second
)

// Addresses inside qemu user networking (slirp).
const (
	// GuestAddr is the guest's eth0 (and siw0) address.
	GuestAddr = "10.0.2.15"
	// HostAddr is how the guest reaches the host's 127.0.0.1.
	HostAddr = "10.0.2.2"
)

// Exit statuses of run.sh that are not the guest command's own.
const (
	statusTimeout  = 124
	statusNoStatus = 125
)

// Errors of Run besides *ExitError and context errors.
var (
	// ErrTimeout: the guest did not power off before the timeout; qemu was killed.
	ErrTimeout = errors.New("siwvm: guest timed out")
	// ErrNoStatus: the guest powered off without reporting the command's
	// exit status (boot or siw setup failure; see the serial log).
	ErrNoStatus = errors.New("siwvm: guest reported no exit status")
)

// ExitError is returned by Run when the guest command exited non-zero.
type ExitError struct {
	Status int
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("siwvm: guest command exited with status %d", e.Status)
}

// Forward makes a guest port reachable on the host at 127.0.0.1:HostPort
// (qemu hostfwd).
type Forward struct {
	UDP       bool
	HostPort  int
	GuestPort int
}

// arg is the run.sh -f argument.
func (f Forward) arg() string {
	s := strconv.Itoa(f.HostPort) + ":" + strconv.Itoa(f.GuestPort)
	if f.UDP {
		return "udp:" + s
	}
	return s
}

// Guest is a bootable siw guest. The zero value is not usable; get one from
// Available. Fields may be changed on the copy before Run.
type Guest struct {
	// Script is the path of scripts/siw-vm/run.sh.
	Script string
	// Cache is build.sh's cache directory.
	Cache string
	// Params are siw module parameters, "name=value": mpa_version=1|2,
	// mpa_crc_required, mpa_crc_strict, peer_to_peer, try_gso,
	// siw_tcp_nagle, relaxed_ird_negotiation (0|1).
	Params []string
	// Share, when set, is a host directory mounted read-write on /host.
	Share string
	// Timeout bounds a Run whose context has no deadline (DefaultTimeout if 0).
	Timeout time.Duration
	// MemoryMB is the guest memory (run.sh default 1024 if 0).
	MemoryMB int
}

// Available returns a Guest when the siw guest can be booted here: EnvEnable
// is "1", build.sh's output is in the cache, and qemu and bash are installed.
// Otherwise the error says what is missing, for t.Skip.
func Available() (Guest, error) {
	if os.Getenv(EnvEnable) != "1" {
		return Guest{}, fmt.Errorf("siwvm: %s is not 1: the siw guest tests run with `make interop` (guest built by scripts/siw-vm/build.sh)", EnvEnable)
	}
	cache := os.Getenv(EnvCache)
	if cache == "" {
		cache = DefaultCache
	}
	for _, f := range []string{"out/vmlinuz", "out/initrd.cpio", "root/bin/busybox"} {
		if _, err := os.Stat(filepath.Join(cache, f)); err != nil {
			return Guest{}, fmt.Errorf("siwvm: guest not built (%v): run scripts/siw-vm/build.sh as root (a few minutes)", err)
		}
	}
	qemu := os.Getenv("QEMU")
	if qemu == "" {
		qemu = "qemu-system-x86_64"
	}
	if _, err := exec.LookPath(qemu); err != nil {
		return Guest{}, fmt.Errorf("siwvm: %w (install qemu-system-x86, or run scripts/siw-vm/build.sh)", err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		return Guest{}, fmt.Errorf("siwvm: %w", err)
	}
	script, err := runScript()
	if err != nil {
		return Guest{}, err
	}
	return Guest{Script: script, Cache: cache}, nil
}

// runScript finds run.sh: EnvScripts, else scripts/siw-vm beside this
// source file's module root.
func runScript() (string, error) {
	dir := os.Getenv(EnvScripts)
	if dir == "" {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			return "", errors.New("siwvm: cannot locate the source tree; set " + EnvScripts)
		}
		dir = filepath.Join(filepath.Dir(file), "..", "..", "scripts", "siw-vm")
	}
	p := filepath.Join(dir, "run.sh")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("siwvm: run.sh: %w (set %s)", err, EnvScripts)
	}
	return p, nil
}

// WithParams returns a copy of g with siw module parameters added.
func (g Guest) WithParams(params ...string) Guest {
	g.Params = append(append([]string(nil), g.Params...), params...)
	return g
}

// Run boots the guest, runs guestCmd (a /bin/sh command line) in it once siw0
// is up, and returns the serial log (CRLF turned into LF) when the guest has
// powered off. The error is nil when guestCmd exited 0, an *ExitError for
// another status, ErrTimeout / ErrNoStatus (wrapped) when the guest did not
// report one, or the context's error. The log is returned in every case where
// qemu ran. Cancelling ctx kills qemu.
func (g Guest) Run(ctx context.Context, guestCmd string, hostFwd ...Forward) (string, error) {
	if g.Script == "" {
		return "", errors.New("siwvm: Guest has no Script; use Available")
	}
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	secs := int(timeout.Seconds())
	if secs < 1 {
		return "", fmt.Errorf("siwvm: run: %w", context.DeadlineExceeded)
	}
	tmp, err := os.MkdirTemp("", "siwvm-log-")
	if err != nil {
		return "", fmt.Errorf("siwvm: run: %w", err)
	}
	defer os.RemoveAll(tmp)
	logPath := filepath.Join(tmp, "serial.log")

	args := []string{g.Script, "-q", "-l", logPath, "-t", strconv.Itoa(secs)}
	for _, p := range g.Params {
		args = append(args, "-p", p)
	}
	for _, f := range hostFwd {
		args = append(args, "-f", f.arg())
	}
	if g.Share != "" {
		args = append(args, "-s", g.Share)
	}
	if g.MemoryMB > 0 {
		args = append(args, "-m", strconv.Itoa(g.MemoryMB))
	}
	args = append(args, "--", guestCmd)

	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Env = append(os.Environ(), EnvCache+"="+g.Cache)
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	// run.sh and its qemu share a process group: cancelling signals both.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	runErr := cmd.Run()

	raw, readErr := os.ReadFile(logPath)
	serial := strings.ReplaceAll(string(raw), "\r\n", "\n")
	if ctx.Err() != nil {
		return serial, fmt.Errorf("siwvm: run: %w", ctx.Err())
	}
	var exitErr *exec.ExitError
	switch {
	case runErr == nil:
		return serial, nil
	case errors.As(runErr, &exitErr):
		switch st := exitErr.ExitCode(); st {
		case statusTimeout:
			return serial, fmt.Errorf("%w after %ds: %s", ErrTimeout, secs, strings.TrimSpace(stderr.String()))
		case statusNoStatus:
			return serial, fmt.Errorf("%w: %s", ErrNoStatus, strings.TrimSpace(stderr.String()))
		default:
			if got, ok := ExitStatus(serial); ok && got == st {
				return serial, &ExitError{Status: st}
			}
			return serial, fmt.Errorf("siwvm: run.sh exited %d: %s", st, strings.TrimSpace(stderr.String()))
		}
	default:
		if readErr != nil {
			runErr = errors.Join(runErr, readErr)
		}
		return serial, fmt.Errorf("siwvm: run: %w", runErr)
	}
}

// marker starts every line the guest's init writes for the host.
const marker = "iwarp-siw-vm: "

// ExitStatus returns the guest command's exit status reported in a serial
// log, and whether there was one.
func ExitStatus(serialLog string) (int, bool) {
	status, found := 0, false
	for _, line := range strings.Split(serialLog, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), marker+"exit ")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(rest)); err == nil {
			status, found = n, true
		}
	}
	return status, found
}

// ExtractFiles decodes the files the guest wrote into the serial log with
// `iwarp-emit FILE [NAME]`, by name. Kernel messages interleaved with the
// base64 lines are skipped.
func ExtractFiles(serialLog string) (map[string][]byte, error) {
	files := make(map[string][]byte)
	var (
		name string
		body strings.Builder
		open bool
	)
	sc := bufio.NewScanner(strings.NewReader(serialLog))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if rest, ok := strings.CutPrefix(line, marker+"file "); ok {
			switch {
			case strings.HasSuffix(rest, " begin"):
				if open {
					return nil, fmt.Errorf("siwvm: extract: file %q not ended before %q", name, rest)
				}
				name, open = strings.TrimSuffix(rest, " begin"), true
				body.Reset()
			case strings.HasSuffix(rest, " end"):
				if !open || strings.TrimSuffix(rest, " end") != name {
					return nil, fmt.Errorf("siwvm: extract: unexpected end of %q", rest)
				}
				b, err := base64.StdEncoding.DecodeString(body.String())
				if err != nil {
					return nil, fmt.Errorf("siwvm: extract %q: %w", name, err)
				}
				files[name] = b
				open = false
			}
			continue
		}
		if open && isBase64Line(line) {
			body.WriteString(line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("siwvm: extract: %w", err)
	}
	if open {
		return nil, fmt.Errorf("siwvm: extract: file %q has no end line", name)
	}
	return files, nil
}

func isBase64Line(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return false
		}
	}
	return true
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// a Forward's HostPort or a host listener the guest connects to.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("siwvm: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ReadyPort is the guest port on which `iwarp-ready PORT` answers "ready"
// once something listens on PORT in the guest. Forward it and call WaitReady
// before connecting to a guest server.
const ReadyPort = 7999

// WaitReady polls 127.0.0.1:hostPort, a Forward to the guest's ReadyPort,
// until the guest answers "ready" (see iwarp-ready in scripts/siw-vm/init) or
// ctx ends. qemu accepts host connections on a forwarded port at once and
// closes them when the guest refuses, so probing the server port itself
// would leave half-done connections in the guest's listen queue.
func WaitReady(ctx context.Context, hostPort int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort))
	for {
		if ready(ctx, addr) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("siwvm: wait for the guest's ready signal on %s: %w", addr, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func ready(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: 2 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 16)
	n, _ := io.ReadAtLeast(c, buf, len("ready"))
	return strings.HasPrefix(string(buf[:n]), "ready")
}
