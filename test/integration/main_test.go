package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// helperEnv selects a helper mode of the test binary (see helper_test.go)
// instead of running the tests.
const helperEnv = "IWARPD_INTEGRATION_HELPER"

// bins are the binaries TestMain built (test/daemontest.Build).
var bins struct {
	iwarpd, iwarpctl, perf string
}

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	os.Exit(daemontest.Main(m, func(string) {
		bins.iwarpd, bins.iwarpctl, bins.perf = daemontest.Bins["iwarpd"], daemontest.Bins["iwarpctl"], daemontest.Bins["iwarp-perf"]
	}))
}

// The shared helpers of test/daemontest, under this package's names.
var (
	moduleRoot = daemontest.ModuleRoot
	scaled     = daemontest.Scaled
	cleanEnv   = daemontest.CleanEnv
)

// lockedBuffer collects a child's output; read while the child writes.
type lockedBuffer = daemontest.Buffer

// UD port blocks of 50 inside 29000-29499, handed out in turn. Another
// process may hold some of them: a daemon skips a port in use. Single fixed ports, which
// cannot be skipped, come from 19xxx (rd_test.go); TCP listening ports from
// 29800-29899 (freeTCPPort).
var udBlocks = daemontest.Blocks{Base: 29000, Size: 50, Count: 10}

// daemon is a running iwarpd process (test/daemontest) with the
// iwarpctl-based inspection this package adds.
type daemon struct {
	*daemontest.Daemon
}

// startDaemon runs iwarpd (daemontest.Start) on a private socket and, unless
// o.Ports names one, the next UD port block.
func startDaemon(t *testing.T, name string, o daemontest.Options) *daemon {
	t.Helper()
	if o.Ports == "" {
		o.Ports = udBlocks.Next()
	}
	return &daemon{daemontest.Start(t, name, o)}
}

// ctl runs iwarpctl against the daemon (bounded) and returns its stdout and
// exit code.
func (d *daemon) ctl(t *testing.T, args ...string) ([]byte, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scaled(15*time.Second))
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bins.iwarpctl, append([]string{"-socket", d.Sock}, args...)...)
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
	daemontest.Eventually(t, what, timeout, cond)
}
