package integration

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"golang.org/x/sys/unix"
)

// TestDaemonLogsSessionsAndFailures (issue 19 item 8): the daemon's log at
// info — a real iwarpd process — has one line when a client's session
// starts, one when an RC connection it asked for fails (refused here), and
// one when the session ends, with why and what was reclaimed.
func TestDaemonLogsSessionsAndFailures(t *testing.T) {
	d := startDaemon(t, "log", daemontest.Options{})
	ctx := d.Open(t, "log-client")
	ep := newRCEP(t, "client", ctx, 1<<12, rcAccessAll)
	refused := refusingTCPAddr(t)
	if err := ep.qp.Connect(refused, ofverbs.ConnParam{Timeout: scaled(30 * time.Second)}); err == nil {
		t.Fatalf("connect to %v (bound, not listening) succeeded", refused)
	}
	ctx.Close()
	// The log is logfmt: quotes inside msg="..." are escaped (\").
	q := `\\?"`
	want := []*regexp.Regexp{
		regexp.MustCompile(`session \d+ started: client ` + q + `log-client` + q + `, pid \d+, uid \d+`),
		regexp.MustCompile(`RC QP \d+: connection to ` + regexp.QuoteMeta(refused.String()) + ` failed: unreachable`),
		regexp.MustCompile(`session \d+ ended: client ` + q + `log-client` + q + `, pid \d+, uid \d+: the client closed its connection.*; reclaimed 1 QPs, 1 MRs, 2 CQs`),
	}
	deadline := time.Now().Add(scaled(20 * time.Second))
	for _, re := range want {
		for !re.MatchString(d.Stderr.String()) {
			if time.Now().After(deadline) {
				t.Fatalf("no log line matching %q in the daemon's log:\n%s", re, d.Stderr)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, l := range strings.Split(d.Stderr.String(), "\n") {
		if strings.Contains(l, "session ") {
			t.Log(l)
		}
	}
}

// refusingTCPAddr is a loopback TCP address that refuses connections while
// the test runs: a socket bound to it that never listens (no one else can
// take the port meanwhile).
func refusingTCPAddr(t *testing.T) netip.AddrPort {
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
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*unix.SockaddrInet4).Port))
}
