package libfabric

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// The rank's own Reads and atomics (issue 22; docs/fastpath.md "Reads and
// atomics the rank sends itself"): c/prov/tests/t_fi_fpreq.c between two
// processes on two daemons with a 1 ms lease, the provider under ASan and
// UBSan.

// TestFastpathReqs: 3000 fi_read / fi_fetch_atomic / fi_atomic /
// fi_compare_atomic (8 octets, every 97th a 3000-octet Read and every 13th
// one of 1800 octets through the daemon), at most 8 outstanding, the client pausing 20 ms every 150 with
// requests outstanding: every request completes exactly once with its
// value (every fetch-add original once, the CmpSwap chain unbroken, the
// server's counters exact). The rank must have sent Reads and atomics
// itself and completed them both ways — on a response it read, and at a
// hand-back after its daemon imported them (rd_fastpath_reqs_taken) — none
// failed.
func TestFastpathReqs(t *testing.T) {
	needProvider(t)
	o := daemontest.Options{Extra: []string{"-fastpath-lease", "1ms", "-datagram-size", "1472"}}
	da := daemon(t, "fpreq-a", o)
	db := daemon(t, "fpreq-b", o)
	runFPReq(t, nil, da, db)
}

// TestFastpathReqsMixedSizes: the same with the server's daemon at
// -datagram-size 1472 and the client's at the default: the client's rank
// sends 1800-octet Reads itself (one datagram of its size), and the
// server answers each in two segments, which the rank leaves to its
// daemon (a take-over); the daemon places both into the request's data
// area of the page and the Read completes at the hand-back with every
// octet checked.
func TestFastpathReqsMixedSizes(t *testing.T) {
	needProvider(t)
	da := daemon(t, "fpreqmix-a", daemontest.Options{Extra: []string{"-fastpath-lease", "1ms", "-datagram-size", "1472"}})
	db := daemon(t, "fpreqmix-b", daemontest.Options{Extra: []string{"-fastpath-lease", "1ms"}})
	runFPReq(t, nil, da, db)
}

// TestFastpathReqsLoss: the same across two network namespaces, each
// dropping 5 % of the packets it receives: lost requests and responses
// are retransmitted (the requests by the daemon from the rank's copies),
// and every request still completes exactly once with its value.
func TestFastpathReqsLoss(t *testing.T) {
	needProvider(t)
	if ok, why := netns.Available(); !ok {
		t.Skip("skipping the network-namespace test: " + why)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("skipping: nft not installed")
	}
	const prefix = "iwfq"
	if err := netns.RemoveStale(prefix); err != nil {
		t.Logf("removing stale namespaces: %v", err)
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.92.1/24"), netip.MustParsePrefix("169.254.92.2/24")}
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
	da := daemon(t, "fpreqloss-a", daemontest.Options{NS: pair, NSIdx: 0, Addr: addrs[0].Addr().String(), Extra: ex})
	db := daemon(t, "fpreqloss-b", daemontest.Options{NS: pair, NSIdx: 1, Addr: addrs[1].Addr().String(), Extra: ex})
	cli := runFPReq(t, pair, da, db)
	t.Logf("client's daemon: rd_fastpath_resent=%d rd_retransmits=%d", cli.Counters["rd_fastpath_resent"], cli.Counters["rd_retransmits"])
	if cli.Counters["rd_fastpath_resent"] == 0 {
		t.Errorf("client's daemon resent none of the rank's datagrams at 5 %% loss")
	}
}

var fpReqCounts = regexp.MustCompile(`RDM fast path: (\d+) reads and (\d+) atomics sent by the rank, (\d+) completed on their response, (\d+) after a take-over, (\d+) in error, (\d+) flushed`)

// fpReqLog reads the provider's counts of the rank's requests from its
// log: reads, atomics, on a response, at a hand-back, failed, flushed.
func fpReqLog(t *testing.T, who, log string) []int {
	t.Helper()
	m := fpReqCounts.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("%s: no count of the rank's Reads and atomics in its log:\n%s", who, log)
	}
	n := make([]int, 6)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return n
}

var (
	fpReqRequests = regexp.MustCompile(`REQUESTS \d+ fadds=(\d+) sums=(\d+) cas=(\d+)`)
	atomicsPosted = regexp.MustCompile(`atomics posted: (\d+) fi_atomic, (\d+) fi_fetch_atomic, (\d+) fi_compare_atomic`)
	atomicsServed = regexp.MustCompile(`served by the rank as a target: \d+ Write-Records, \d+ Reads, (\d+) atomics \((\d+) CmpSwap, (\d+) of them finding another value\)`)
)

// submatches returns re's numbered submatches in s as integers, or nil.
func submatches(re *regexp.Regexp, s string) []int {
	m := re.FindStringSubmatch(s)
	if m == nil {
		return nil
	}
	n := make([]int, len(m)-1)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return n
}

// checkAtomicCounts compares the provider's close counts (FI_LOG_LEVEL=info,
// docs/fastpath.md "Counts") with what t_fi_fpreq's client posted (its
// REQUESTS line): the client's provider counts each fi_atomic,
// fi_fetch_atomic and fi_compare_atomic once; the server's rank
// (fprd_rma_rx.h) and its daemon (atomics_in: executed, replays not
// counted) executed together exactly as many as were posted, each once;
// the rank's CmpSwaps were at most those posted and none found a value
// other than the one compared (the client's chain k -> k+1 always names
// the current value).
func checkAtomicCounts(t *testing.T, reqs, clog, slog string, daemonAtomics int64) {
	t.Helper()
	want := submatches(fpReqRequests, reqs)
	got := submatches(atomicsPosted, clog)
	served := submatches(atomicsServed, slog)
	if want == nil || got == nil || served == nil {
		t.Fatalf("no counts: REQUESTS %v, client's atomics posted %v, server's served %v", want, got, served)
	}
	t.Logf("client posted %d fi_atomic, %d fi_fetch_atomic, %d fi_compare_atomic; server's rank executed %d atomics (%d CmpSwap, %d unequal), its daemon %d",
		got[0], got[1], got[2], served[0], served[1], served[2], daemonAtomics)
	if got[0] != want[1] || got[1] != want[0] || got[2] != want[2] {
		t.Errorf("client's provider counted %d fi_atomic, %d fi_fetch_atomic, %d fi_compare_atomic; the client posted %d, %d, %d",
			got[0], got[1], got[2], want[1], want[0], want[2])
	}
	posted := want[0] + want[1] + want[2]
	if served[0] == 0 || served[0]+int(daemonAtomics) != posted || served[1] > want[2] || served[2] != 0 {
		t.Errorf("server's rank executed %d atomics (%d CmpSwap, %d unequal), its daemon %d: want some by the rank, %d in all (each posted once), at most %d CmpSwap, none unequal",
			served[0], served[1], served[2], daemonAtomics, posted, want[2])
	}
}

// runFPReq runs t_fi_fpreq's server on da and client on db (in pair's
// namespaces 0 and 1 unless nil), checks what TestFastpathReqs says and
// returns the client's QP.
func runFPReq(t *testing.T, pair *netns.Pair, da, db *daemontest.Daemon) proto.QPInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(240*time.Second))
	defer cancel()
	env := fprmaEnv(t)
	s := startFPBin(t, ctx, pair, 0, da, "t_fi_fpreq", env, "server")
	ready := strings.Fields(s.await(t, ctx, "server", "READY "))
	if len(ready) != 4 {
		t.Fatalf("server: %q", ready)
	}
	c := startFPBin(t, ctx, pair, 1, db, "t_fi_fpreq", env, "client", ready[1], ready[2], ready[3])
	s.await(t, ctx, "server", "DONE")
	reqs := c.await(t, ctx, "client", "REQUESTS ")
	t.Logf("client: %s", reqs)
	c.await(t, ctx, "client", "DONE")
	srv, _ := oneQP(t, da, "RD")
	cli, ctext := oneQP(t, db, "RD")
	t.Logf("client's daemon: %s", strings.TrimSpace(ctext))
	s.end(t, ctx, "server", "SERVER OK")
	c.end(t, ctx, "client", "CLIENT OK")
	n := fpReqLog(t, "client", c.errb.String())
	t.Logf("client's provider: %d Reads and %d atomics sent by the rank, %d completed on their response, %d at a hand-back, %d failed, %d flushed",
		n[0], n[1], n[2], n[3], n[4], n[5])
	if n[0] == 0 || n[1] == 0 || n[2] == 0 || n[3] == 0 || n[4] != 0 || n[5] != 0 || n[2]+n[3] != n[0]+n[1] {
		t.Errorf("client: want Reads and atomics sent by the rank, completed both on their response and at a hand-back, none failed, each once")
	}
	cc := cli.Counters
	if cc["rd_fastpath_reqs_taken"] == 0 || cc["rd_fastpath_reqs_resolved"] != cc["rd_fastpath_reqs_taken"] || cc["fastpath_violations"] != 0 {
		t.Errorf("client's daemon: %d requests of the rank's taken over, %d resolved, %d violations: want some taken, each resolved",
			cc["rd_fastpath_reqs_taken"], cc["rd_fastpath_reqs_resolved"], cc["fastpath_violations"])
	}
	if n[3] < int(cc["rd_fastpath_reqs_taken"]) {
		t.Errorf("client: %d completed at a hand-back, but its daemon took %d over", n[3], cc["rd_fastpath_reqs_taken"])
	}
	checkAtomicCounts(t, reqs, c.errb.String(), s.errb.String(), srv.Counters["atomics_in"])
	t.Logf("client's daemon counters %v; server's %v", cc, srv.Counters)
	da.CheckAlive(t)
	db.CheckAlive(t)
	return cli
}

// TestFastpathReqsRefused: a fetch-add and a Read to a key the target
// never gave complete with an error (FI_EACCES: the target's error
// message names the request's MSN of QN 1, which the daemon matches
// against the requests it imported), never a success, and the QP stays
// up: a fetch-add afterwards returns the right original value. Whether
// the rank or its daemon sends a refused request depends on who owns the
// socket at that moment: the attempt is repeated with fresh daemons, at
// most fpReqRefusedAttempts times, until the rank sent one of them.
func TestFastpathReqsRefused(t *testing.T) {
	needProvider(t)
	const fpReqRefusedAttempts = 5
	for attempt := 1; attempt <= fpReqRefusedAttempts; attempt++ {
		if fpReqRefusedOnce(t, attempt) {
			return
		}
	}
	t.Errorf("in %d attempts the rank never sent a refused request itself (the daemon always did)", fpReqRefusedAttempts)
}

func fpReqRefusedOnce(t *testing.T, attempt int) bool {
	o := daemontest.Options{Extra: []string{"-fastpath-lease", "1ms", "-datagram-size", "1472"}}
	da := daemon(t, fmt.Sprintf("fpreqbad%d-a", attempt), o)
	db := daemon(t, fmt.Sprintf("fpreqbad%d-b", attempt), o)
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(120*time.Second))
	defer cancel()
	env := fprmaEnv(t)
	s := startFPBin(t, ctx, nil, 0, da, "t_fi_fpreq", env, "server")
	ready := strings.Fields(s.await(t, ctx, "server", "READY "))
	if len(ready) != 4 {
		t.Fatalf("server: %q", ready)
	}
	c := startFPBin(t, ctx, nil, 0, db, "t_fi_fpreq", env, "client", ready[1], ready[2], ready[3], "bad")
	r1 := c.await(t, ctx, "client", "REFUSED ")
	r2 := c.await(t, ctx, "client", "REFUSED ")
	c.await(t, ctx, "client", "AFTER ok")
	c.await(t, ctx, "client", "DONE")
	cli, ctext := oneQP(t, db, "RD")
	t.Logf("attempt %d, client: %s; %s; its daemon: %s", attempt, r1, r2, strings.TrimSpace(ctext))
	c.end(t, ctx, "client", "CLIENT OK")
	for _, r := range []string{r1, r2} {
		if !strings.Contains(r, "err=13 ") { // FI_EACCES
			t.Errorf("client: %s: want FI_EACCES (13)", r)
		}
	}
	if cli.State != "RTS" || cli.Counters["fastpath_violations"] != 0 {
		t.Errorf("client's QP: state %s, %d violations: want RTS after refused requests", cli.State, cli.Counters["fastpath_violations"])
	}
	n := fpReqLog(t, "client", c.errb.String())
	t.Logf("client's provider: %d Reads, %d atomics by the rank, %d on their response, %d at a hand-back, %d failed", n[0], n[1], n[2], n[3], n[4])
	da.CheckAlive(t)
	db.CheckAlive(t)
	return n[4] > 0
}
