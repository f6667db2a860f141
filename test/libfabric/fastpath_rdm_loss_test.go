package libfabric

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// TestFastpathRDMLoss: the RDM fast path's ping-pong (t_fi_fastpath -rdm)
// across two network namespaces that each drop 5 % of the packets they
// receive (nftables, one wire packet at a time). The ranks send their
// eager messages themselves and complete them when the kernel accepted
// them (docs/fastpath.md "The provider's RDM endpoints"): what the network
// loses, the daemons must resend from the ranks' copies. Every message
// arrives exactly once, in order, intact, every send completes once (the
// program checks); each daemon's counters must show retransmissions of its
// rank's own datagrams (rd_fastpath_resent) well beyond the tail probes of
// a run without loss, and no violation. Then the client sends 15 more
// messages and closes its endpoint at once: every one must still arrive
// (fi_close waits for the rank's own sends to be acknowledged).
func TestFastpathRDMLoss(t *testing.T) {
	needProvider(t)
	if ok, why := netns.Available(); !ok {
		t.Skip("skipping the network-namespace test: " + why)
	}
	const prefix = "iwfl"
	if err := netns.RemoveStale(prefix); err != nil {
		t.Logf("removing stale namespaces: %v", err)
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.93.1/24"), netip.MustParsePrefix("169.254.93.2/24")}
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
		t.Skip("no nftables loss: ", err)
	}
	const minResent = 20
	o := func(i int) daemontest.Options {
		return daemontest.Options{NS: pair, NSIdx: i, Addr: addrs[i].Addr().String(),
			Extra: []string{"-fastpath-lease", "1ms", "-datagram-size", "1472"}}
	}
	da := daemon(t, "fprdml-a", o(0))
	db := daemon(t, "fprdml-b", o(1))
	srv, cli := runFPPingPongNS(t, pair, da, db, "RD", []string{"-rdm"}) // the fast path is the default
	for _, q := range []struct {
		who string
		qp  proto.QPInfo
	}{{"server", srv}, {"client", cli}} {
		c := q.qp.Counters
		if q.qp.Fastpath == "" {
			t.Errorf("%s: QP %+v has no fast-path page", q.who, q.qp)
			continue
		}
		// About 2000 datagrams the rank sent itself, 5 % of them lost:
		// about 100 resent (116 and 115 in a run). Without loss the same
		// program has 1 or 2 (tail probes: TestFastpathRDMPingPong).
		if c["rd_fastpath_resent"] < minResent {
			t.Errorf("%s: the daemon resent %d of its rank's datagrams at 5 %% loss, want at least %d (counters %v)",
				q.who, c["rd_fastpath_resent"], minResent, c)
		}
		if c["fastpath_violations"] != 0 {
			t.Errorf("%s: %d fast-path violations", q.who, c["fastpath_violations"])
		}
		t.Logf("%s: rd_fastpath_resent %d, rd_fastpath_taken %d, rd_retransmits %d, hand-backs %d, take-overs %d, releases %d",
			q.who, c["rd_fastpath_resent"], c["rd_fastpath_taken"], c["rd_retransmits"], c["fastpath_handbacks"],
			c["fastpath_takeovers"], c["fastpath_releases"])
	}
	// The client's last messages, sent by its rank and closed at once:
	// fi_close must wait for their acknowledgements, or what the network
	// lost of them is never resent (the QP is gone). The server's
	// namespace now drops about 20 % (a second rule of 16 %).
	if out, err := exec.Command("ip", "netns", "exec", pair.Names[0], "nft", "add", "rule", "inet", "iwarp_fiatomic", "in",
		"meta", "l4proto", "udp", "numgen", "random", "mod", "100", "<", "16", "drop").CombinedOutput(); err != nil {
		t.Fatalf("nft: more loss for the tail: %v: %s", err, out)
	}
	srvTail := runFPTail(t, pair, da, db, fpTail)
	t.Logf("tail: the server took %d more messages; its daemon: %v", fpTail, srvTail.Counters)
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// fpTail: the messages the client sends right before it closes (-tail),
// fewer than the rank may have outstanding per peer (proto.FPRDRing 16),
// so that its rank sends every one itself (one through the daemon would
// make fi_close wait for the daemon's send, whose acknowledgement covers
// the earlier ones too); at about 20 % loss one of them at least is lost
// in 1 − 0.8^15 ≈ 96 % of the runs.
const fpTail = 15

// runFPTail runs t_fi_fastpath -rdm -tail n between pair's namespaces
// (the server on da, the client on db), the client closing its endpoint
// right after its last sends; every message must arrive. It returns the
// server's QP.
func runFPTail(t *testing.T, pair *netns.Pair, da, db *daemontest.Daemon, n int) proto.QPInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(240*time.Second))
	defer cancel()
	env := append(append(atomSanEnv(), native...), "IWARPD_TEST_TIMEOUT_SCALE="+os.Getenv("IWARPD_TEST_TIMEOUT_SCALE"))
	if sanDir != "" {
		env = append(env, sanEnv...)
	}
	flags := []string{"-rdm", "-tail", strconv.Itoa(n)}
	s := startFP(t, ctx, pair, 0, da, env, append(flags, "server")...)
	ready := strings.Fields(s.await(t, ctx, "server", "READY "))
	c := startFP(t, ctx, pair, 1, db, env, append(flags, "client", ready[1])...)
	c.await(t, ctx, "client", "DONE") // its endpoint is closed
	s.await(t, ctx, "server", "DONE") // every message arrived
	srv, _ := oneQP(t, da, "RD")
	s.end(t, ctx, "server", "SERVER OK")
	c.end(t, ctx, "client", "CLIENT OK")
	return srv
}
