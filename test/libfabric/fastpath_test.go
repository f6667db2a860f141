package libfabric

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// fpSide is one running t_fi_fastpath: its stdin (the go-ahead to close)
// and its stdout lines.
type fpSide struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	out   []string
	errb  strings.Builder
}

// startFP starts t_fi_fastpath with args on daemon d (in pair's namespace
// idx when pair is not nil).
func startFP(t *testing.T, ctx context.Context, pair *netns.Pair, idx int, d *daemontest.Daemon, env []string, args ...string) *fpSide {
	t.Helper()
	s := &fpSide{lines: make(chan string, 64)}
	s.cmd = command(ctx, pair, idx, filepath.Join(provDir, "prov", "t_fi_fastpath"), args...)
	s.cmd.Env = fiEnv(d, env...)
	s.cmd.Stderr = &s.errb
	var err error
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
		close(s.lines)
	}()
	t.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait() })
	return s
}

// await returns the first line starting with prefix (bounded by ctx).
func (s *fpSide) await(t *testing.T, ctx context.Context, who, prefix string) string {
	t.Helper()
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				s.cmd.Wait()
				t.Fatalf("%s exited before %q:\n%s\n%s", who, prefix, strings.Join(s.out, "\n"), s.errb.String())
			}
			s.out = append(s.out, l)
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-ctx.Done():
			t.Fatalf("%s: no %q in time:\n%s\n%s", who, prefix, strings.Join(s.out, "\n"), s.errb.String())
		}
	}
}

// end lets s close its endpoint and checks its verdict.
func (s *fpSide) end(t *testing.T, ctx context.Context, who, ok string) {
	t.Helper()
	s.in.Write([]byte("go\n"))
	s.in.Close()
	s.await(t, ctx, who, ok)
	for l := range s.lines {
		s.out = append(s.out, l)
	}
	err := s.cmd.Wait()
	all := strings.Join(s.out, "\n") + "\n" + s.errb.String()
	checkSan(t, who, all)
	if err != nil {
		t.Errorf("%s: %v\n%s", who, err, all)
	}
}

// oneQP is the one QP of type typ of d (iwarpctl -json qps).
func oneQP(t *testing.T, d *daemontest.Daemon, typ string) (proto.QPInfo, string) {
	t.Helper()
	ctl := daemontest.Bins["iwarpctl"]
	out, err := exec.Command(ctl, "-socket", d.Sock, "-json", "qps").Output()
	if err != nil {
		t.Fatalf("iwarpctl -json qps: %v", err)
	}
	var rows []proto.QPInfo
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("iwarpctl -json qps: %v\n%s", err, out)
	}
	text, _ := exec.Command(ctl, "-socket", d.Sock, "qps").Output()
	var ud []proto.QPInfo
	for _, r := range rows {
		if r.Type == typ {
			ud = append(ud, r)
		}
	}
	if len(ud) != 1 {
		t.Fatalf("%d %s QPs, want 1:\n%s", len(ud), typ, text)
	}
	return ud[0], string(text)
}

// runFastpathPingPong runs t_fi_fastpath's server on da and client on db
// with env and returns each side's UD QP as iwarpctl shows it before the
// programs close their endpoints.
func runFastpathPingPong(t *testing.T, da, db *daemontest.Daemon, env ...string) (srv, cli proto.QPInfo) {
	t.Helper()
	return runFPPingPong(t, da, db, "UD", nil, env...)
}

// runFPPingPong runs t_fi_fastpath with flags (nil, or -rdm) and returns
// each side's QP of type typ.
func runFPPingPong(t *testing.T, da, db *daemontest.Daemon, typ string, flags []string, env ...string) (srv, cli proto.QPInfo) {
	t.Helper()
	return runFPPingPongNS(t, nil, da, db, typ, flags, env...)
}

// runFPPingPongNS is runFPPingPong with the server in pair's namespace 0
// and the client in its namespace 1 (pair nil: both here).
func runFPPingPongNS(t *testing.T, pair *netns.Pair, da, db *daemontest.Daemon, typ string, flags []string, env ...string) (srv, cli proto.QPInfo) {
	t.Helper()
	srv, cli, _ = runFPPingPongLog(t, pair, da, db, typ, flags, env...)
	return srv, cli
}

// runFPPingPongLog is runFPPingPongNS that also returns the client's
// standard error (the provider's log, with FI_LOG_LEVEL=info).
func runFPPingPongLog(t *testing.T, pair *netns.Pair, da, db *daemontest.Daemon, typ string, flags []string, env ...string) (srv, cli proto.QPInfo, clog string) {
	t.Helper()
	timeout := daemontest.Scaled(240 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	env = append(append(atomSanEnv(), native...), append(env, "IWARPD_TEST_TIMEOUT_SCALE="+os.Getenv("IWARPD_TEST_TIMEOUT_SCALE"))...)
	// The provider built with ASan and UBSan too (sanitized_test.go), when
	// the machine can: the fast path's own code under the sanitizers.
	sanOnce.Do(buildSanitized)
	if sanErr != "" {
		t.Fatal(sanErr)
	}
	if sanDir != "" {
		env = append(env, sanEnv...)
	} else {
		t.Logf("the provider is not sanitized: %s", sanSkip)
	}
	s := startFP(t, ctx, pair, 0, da, env, append(flags, "server")...)
	ready := strings.Fields(s.await(t, ctx, "server", "READY "))
	c := startFP(t, ctx, pair, 1, db, env, append(flags, "client", ready[1])...)
	s.await(t, ctx, "server", "DONE")
	c.await(t, ctx, "client", "DONE")
	srv, stext := oneQP(t, da, typ)
	cli, ctext := oneQP(t, db, typ)
	t.Logf("server's daemon: %s", strings.TrimSpace(stext))
	t.Logf("client's daemon: %s", strings.TrimSpace(ctext))
	s.end(t, ctx, "server", "SERVER OK")
	c.end(t, ctx, "client", "CLIENT OK")
	return srv, cli, c.errb.String()
}

// The messages of t_fi_fastpath each way: the hello, 2000 pings or pongs,
// and the bursts (8 × 24 to the server, 8 acknowledgements back).
const (
	fpToServer = 1 + 2000 + 8*24
	fpToClient = 1 + 2000 + 8
)

// TestFastpathDgramPingPong: FI_EP_DGRAM ping-pong through two daemons
// with the fast path on (the default), each side pausing longer than the
// lease now and then (docs/fastpath.md "The provider"). Every message
// arrives exactly once, in order, intact (the program checks), and the
// daemons' counters show both paths used: the sockets were handed to the
// ranks, taken over during the pauses, and fewer datagrams went through
// the engines than the messages.
func TestFastpathDgramPingPong(t *testing.T) {
	needProvider(t)
	// Datagrams of 1472 octets (an MTU of 1500): the 3000-octet messages
	// are several datagrams each, which the rank leaves to the daemon.
	o := daemontest.Options{Extra: []string{"-fastpath-lease", "1ms", "-datagram-size", "1472"}}
	da := daemon(t, "fp-a", o)
	db := daemon(t, "fp-b", o)
	srv, cli := runFastpathPingPong(t, da, db)
	for _, q := range []struct {
		who     string
		qp      proto.QPInfo
		in, out int64
	}{{"server", srv, fpToServer, fpToClient}, {"client", cli, fpToClient, fpToServer}} {
		c := q.qp.Counters
		if q.qp.Fastpath == "" || !q.qp.ClientSocket {
			t.Errorf("%s: QP %+v has no fast-path page", q.who, q.qp)
			continue
		}
		if c["fastpath_handbacks"] == 0 || c["fastpath_takeovers"] == 0 || c["fastpath_violations"] != 0 {
			t.Errorf("%s: %d hand-backs, %d take-overs, %d violations: want the socket handed to the rank and taken over in the pauses",
				q.who, c["fastpath_handbacks"], c["fastpath_takeovers"], c["fastpath_violations"])
		}
		// The messages larger than a datagram go through the engine
		// (each several datagrams; the rank releases the socket).
		if c["fastpath_releases"] == 0 {
			t.Errorf("%s: no release: the messages of several datagrams should have been left to the daemon", q.who)
		}
		if c["datagrams_in"] >= q.in {
			t.Errorf("%s: the engine read %d datagrams for %d messages: the rank read none itself", q.who, c["datagrams_in"], q.in)
		}
		if c["datagrams_out"] >= q.out {
			t.Errorf("%s: the engine sent %d datagrams for %d messages: the rank sent none itself", q.who, c["datagrams_out"], q.out)
		}
		t.Logf("%s: engine read %d and sent %d datagrams for %d and %d messages; hand-backs %d, take-overs %d, releases %d",
			q.who, c["datagrams_in"], c["datagrams_out"], q.in, q.out, c["fastpath_handbacks"], c["fastpath_takeovers"], c["fastpath_releases"])
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// TestFastpathDgramOff: FI_IWARPD_FASTPATH=0 leaves every datagram to the
// daemons (no page), and the same program passes.
func TestFastpathDgramOff(t *testing.T) {
	needProvider(t)
	da := daemon(t, "fpoff-a", daemontest.Options{})
	db := daemon(t, "fpoff-b", daemontest.Options{})
	srv, cli := runFastpathPingPong(t, da, db, "FI_IWARPD_FASTPATH=0")
	for _, q := range []proto.QPInfo{srv, cli} {
		if q.Fastpath != "" {
			t.Errorf("QP %+v has a fast-path page with FI_IWARPD_FASTPATH=0", q)
		}
	}
	if srv.Counters["datagrams_in"] < fpToServer {
		t.Errorf("server: the engine read %d datagrams for %d messages", srv.Counters["datagrams_in"], fpToServer)
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}
