package libfabric

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// fpRMAWrites is t_fi_fprma.c's WRITES.
const fpRMAWrites = 3000

// TestFastpathRMAWrite: fi_write over FI_EP_RDM with RDM's fast path on
// (FI_IWARPD_FASTPATH_RDM=1; docs/fastpath.md "RDMA Writes the rank sends
// itself"): the origin rank sends its small Writes as Write-Records on its
// own socket and completes them on RD's acknowledgement. t_fi_fprma
// (ASan/UBSan) writes 3000 words (some through the daemon: larger than a
// datagram) with at most 8 outstanding, pausing longer than the lease with
// Writes outstanding now and then; it checks that every Write completes
// exactly once, successfully, and the target checks every word. The
// provider's own counts (its log at the endpoint's close) must show Writes
// sent by the rank and completed both ways — on an ACK the rank read, and
// at the hand-back after the daemon took the socket over with Writes
// outstanding — and none failed; the origin's daemon must show the take-
// overs and the rank's copies taken back, and fewer datagrams sent by its
// engine than Writes.
func TestFastpathRMAWrite(t *testing.T) {
	needProvider(t)
	o := daemontest.Options{Extra: []string{"-fastpath-lease", "1ms", "-datagram-size", "1472"}}
	da := daemon(t, "fprma-a", o)
	db := daemon(t, "fprma-b", o)
	runFPRMA(t, nil, da, db)
}

// TestFastpathRMAWriteLoss: the same across two network namespaces, each
// dropping 5 % of the packets it receives (nftables): the rank's lost
// Writes are retransmitted by its daemon from the page's copies (the
// oldest one's timeout is a take-over), and still complete exactly once,
// each word in place.
func TestFastpathRMAWriteLoss(t *testing.T) {
	needProvider(t)
	if ok, why := netns.Available(); !ok {
		t.Skip("skipping the network-namespace test: " + why)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("skipping: nft not installed")
	}
	const prefix = "iwfw"
	if err := netns.RemoveStale(prefix); err != nil {
		t.Logf("removing stale namespaces: %v", err)
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.91.1/24"), netip.MustParsePrefix("169.254.91.2/24")}
	pair, err := netns.NewPair(fmt.Sprintf("%s%d", prefix, os.Getpid()), addrs, 1500)
	if err != nil {
		t.Skip("skipping the network-namespace test: ", err)
	}
	t.Cleanup(func() {
		if err := pair.Close(); err != nil {
			t.Errorf("deleting the namespaces: %v", err)
		}
	})
	if err := setLoss(pair, 5); err != nil {
		t.Fatal(err)
	}
	ex := []string{"-fastpath-lease", "1ms", "-datagram-size", "1472"}
	da := daemon(t, "fprmaloss-a", daemontest.Options{NS: pair, NSIdx: 0, Addr: addrs[0].Addr().String(), Extra: ex})
	db := daemon(t, "fprmaloss-b", daemontest.Options{NS: pair, NSIdx: 1, Addr: addrs[1].Addr().String(), Extra: ex})
	cli := runFPRMA(t, pair, da, db)
	t.Logf("client's daemon: rd_fastpath_resent=%d rd_retransmits=%d rd_timeouts=%d", cli.Counters["rd_fastpath_resent"],
		cli.Counters["rd_retransmits"], cli.Counters["rd_timeouts"])
	if cli.Counters["rd_fastpath_resent"] == 0 {
		t.Errorf("client's daemon resent none of the rank's datagrams at 5 %% loss")
	}
}

// runFPRMA runs t_fi_fprma's server on da and client on db (in pair's
// namespaces 0 and 1 unless nil), checks what TestFastpathRMAWrite says
// and returns the client's QP.
func runFPRMA(t *testing.T, pair *netns.Pair, da, db *daemontest.Daemon) proto.QPInfo {
	t.Helper()
	timeout := daemontest.Scaled(240 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	env := fprmaEnv(t)
	s := startFPBin(t, ctx, pair, 0, da, "t_fi_fprma", env, "server")
	ready := strings.Fields(s.await(t, ctx, "server", "READY "))
	if len(ready) != 4 {
		t.Fatalf("server: %q", ready)
	}
	c := startFPBin(t, ctx, pair, 1, db, "t_fi_fprma", env, "client", ready[1], ready[2], ready[3])
	s.await(t, ctx, "server", "DONE")
	c.await(t, ctx, "client", "DONE")
	srv, _ := oneQP(t, da, "RD")
	cli, ctext := oneQP(t, db, "RD")
	t.Logf("client's daemon: %s", strings.TrimSpace(ctext))
	s.end(t, ctx, "server", "SERVER OK")
	c.end(t, ctx, "client", "CLIENT OK")

	m := regexp.MustCompile(`RDM fast path: (\d+) writes sent by the rank, (\d+) completed on an ACK, (\d+) at a hand-back, (\d+) failed`).
		FindStringSubmatch(c.errb.String())
	if m == nil {
		t.Fatalf("client: no count of the rank's Writes in its log:\n%s", c.errb.String())
	}
	n := make([]int, 4)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	t.Logf("client's provider: %d Writes sent by the rank, %d completed on an ACK, %d at a hand-back, %d failed", n[0], n[1], n[2], n[3])
	if n[0] == 0 || n[1] == 0 || n[2] == 0 || n[3] != 0 || n[1]+n[2] != n[0] {
		t.Errorf("client: want Writes sent by the rank, completed both on an ACK and at a hand-back, none failed, each once")
	}
	cc := cli.Counters
	if cc["fastpath_takeovers"] == 0 || cc["rd_fastpath_taken"] == 0 || cc["fastpath_violations"] != 0 {
		t.Errorf("client's daemon: %d take-overs, %d copies taken back, %d violations: want take-overs with the rank's datagrams outstanding",
			cc["fastpath_takeovers"], cc["rd_fastpath_taken"], cc["fastpath_violations"])
	}
	if cc["datagrams_out"] >= fpRMAWrites {
		t.Errorf("client's daemon: its engine sent %d datagrams for %d Writes: the rank sent none itself", cc["datagrams_out"], fpRMAWrites)
	}
	t.Logf("client's daemon counters %v; server's %v", cc, srv.Counters)
	da.CheckAlive(t)
	db.CheckAlive(t)
	return cli
}

// TestFastpathRMAWriteRefused: a Write the rank sent itself to a key the
// target never gave is refused there (an error message comes back, the
// target holding back its acknowledgement). The daemon has no work
// request to complete with the error, and the rank would complete the
// Write once acknowledged: the daemon fails the QP instead, and the
// provider completes the Write with FI_EIO (docs/fastpath.md "RDMA Writes
// the rank sends itself"). Never a success.
//
// Whether the rank or its daemon sends the bad Write depends on who owns
// the socket at that moment (a take-over may be under way): a Write the
// daemon sent is refused with FI_EACCES and the QP stays up (the daemon
// path, checked too), and the attempt is repeated with fresh daemons, at
// most fprmaRefusedAttempts times, until the rank sent it.
func TestFastpathRMAWriteRefused(t *testing.T) {
	needProvider(t)
	const fprmaRefusedAttempts = 5
	for attempt := 1; attempt <= fprmaRefusedAttempts; attempt++ {
		if fprmaRefusedOnce(t, attempt) {
			return
		}
	}
	t.Errorf("in %d attempts the rank never sent the refused Write itself (the daemon always did)", fprmaRefusedAttempts)
}

// fprmaRefusedOnce runs one attempt of TestFastpathRMAWriteRefused: false
// when the daemon sent the bad Write (its outcome checked).
func fprmaRefusedOnce(t *testing.T, attempt int) bool {
	o := daemontest.Options{Extra: []string{"-fastpath-lease", "1ms", "-datagram-size", "1472"}}
	da := daemon(t, fmt.Sprintf("fprmabad%d-a", attempt), o)
	db := daemon(t, fmt.Sprintf("fprmabad%d-b", attempt), o)
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(120*time.Second))
	defer cancel()
	env := fprmaEnv(t)
	s := startFPBin(t, ctx, nil, 0, da, "t_fi_fprma", env, "server")
	ready := strings.Fields(s.await(t, ctx, "server", "READY "))
	if len(ready) != 4 {
		t.Fatalf("server: %q", ready)
	}
	c := startFPBin(t, ctx, nil, 0, db, "t_fi_fprma", env, "client", ready[1], ready[2], ready[3], "bad")
	refused := c.await(t, ctx, "client", "REFUSED ")
	c.await(t, ctx, "client", "DONE")
	cli, ctext := oneQP(t, db, "RD")
	t.Logf("attempt %d, client: %s; its daemon: %s", attempt, refused, strings.TrimSpace(ctext))
	c.end(t, ctx, "client", "CLIENT OK")
	if strings.Contains(c.errb.String(), "at a hand-back, 0 failed") {
		// The daemon sent it: FI_EACCES, the QP up.
		if !strings.Contains(refused, "err=13 ") || cli.State != "RTS" {
			t.Errorf("client: %s, QP %s: a Write the daemon sent and the target refused wants FI_EACCES (13) and the QP in RTS",
				refused, cli.State)
		}
		da.CheckAlive(t)
		db.CheckAlive(t)
		return false
	}
	if !strings.Contains(refused, "err=5 ") { // FI_EIO
		t.Errorf("client: %s: want FI_EIO (5), the rank's pending Writes failed with the QP", refused)
	}
	if !strings.Contains(c.errb.String(), "at a hand-back, 1 failed") {
		t.Errorf("client: the refused Write was not one the rank sent itself:\n%s", c.errb.String())
	}
	if cli.State != "ERROR" || cli.Counters["rd_error_msgs_unmatched"] == 0 {
		t.Errorf("client's QP: state %s, %d error messages unmatched: want ERROR after the rank's Write was refused",
			cli.State, cli.Counters["rd_error_msgs_unmatched"])
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
	return true
}

// fprmaEnv is t_fi_fprma's environment: RDM's fast path on, the
// provider's log of its counts (at the endpoint's close), the provider
// built with ASan and UBSan when the machine can (sanitized_test.go).
func fprmaEnv(t *testing.T) []string {
	t.Helper()
	env := append(append(atomSanEnv(), native...), "IWARPD_TEST_TIMEOUT_SCALE="+os.Getenv("IWARPD_TEST_TIMEOUT_SCALE"),
		"FI_IWARPD_FASTPATH_RDM=1", "FI_LOG_LEVEL=info", "FI_LOG_PROV=iwarpd", "FI_LOG_SUBSYS=ep_data")
	sanOnce.Do(buildSanitized)
	if sanErr != "" {
		t.Fatal(sanErr)
	}
	if sanDir != "" {
		env = append(env, sanEnv...)
	} else {
		t.Logf("the provider is not sanitized: %s", sanSkip)
	}
	return env
}

// startFPBin starts the provider test program prog (c/build/prov) on d,
// in namespace idx of pair unless nil, as startFP starts t_fi_fastpath.
func startFPBin(t *testing.T, ctx context.Context, pair *netns.Pair, idx int, d *daemontest.Daemon, prog string, env []string,
	args ...string) *fpSide {
	t.Helper()
	s := &fpSide{lines: make(chan string, 64)}
	s.cmd = command(ctx, pair, idx, filepath.Join(provDir, "prov", prog), args...)
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
