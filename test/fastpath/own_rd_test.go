package fastpath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// An RD QP whose rank serves its socket itself (c/core/fprd.h,
// verbsd/rd/fastpath.go, docs/fastpath.md "RD"): c/tests/t_fprd.c is the
// rank, on its own daemon; an ofverbs peer through a second daemon sends
// it numbered 8-octet pings, one at a time, and the rank answers each
// with the same number — itself when it owns the socket and has the
// peer's slot, through the daemon otherwise. Now and then the rank stops
// polling until the daemon takes the socket over (and imports the page's
// RD halves), then asks for it back (the daemon exports them again).
// Every ping and every pong must arrive exactly once and in order, both
// paths used both ways.
//
// Ports (test/daemontest doc.go): 26550-26599.
var ownRDBlocks = daemontest.Blocks{Base: 26550, Size: 25, Count: 2}

// pingPong runs n rounds from e (the peer) to the rank at ah: ping i
// out, pong i back, checked in order. It returns the median round trip
// (information).
func pingPong(t *testing.T, e *liveEnd, ah *ofverbs.AH, n int, rank *rankProg) time.Duration {
	t.Helper()
	for i := range 64 {
		off := 32<<10 + i*64
		if k, err := e.qp.PostRecv([]ofverbs.RecvWR{{ID: uint64(i), SGL: []ofverbs.SGE{e.mr.SGE(e.mem[off : off+64])}}}); k != 1 {
			t.Fatalf("peer: post receive: %v", err)
		}
	}
	wcs := make([]ofverbs.WC, 16)
	rtts := make([]time.Duration, 0, n)
	deadline := time.Now().Add(daemontest.Scaled(2 * time.Minute))
	for i := range n {
		b := e.mem[(i%64)*8 : (i%64)*8+8]
		binary.LittleEndian.PutUint64(b, uint64(i))
		start := time.Now()
		wr := ofverbs.SendWR{ID: uint64(i), Opcode: ofverbs.WRSend, AH: ah, Signaled: true, SGL: []ofverbs.SGE{e.mr.SGE(b)}}
		if k, err := e.qp.PostSend([]ofverbs.SendWR{wr}); k != 1 {
			t.Fatalf("peer: post ping %d: %v", i, err)
		}
		got := false
		for spin := 0; !got && spin < 1e9; spin++ {
			k, err := e.rcq.Poll(wcs)
			if err != nil {
				t.Fatalf("peer: poll: %v", err)
			}
			for _, wc := range wcs[:k] {
				if wc.Status != ofverbs.WCSuccess || wc.ByteLen != 8 {
					t.Fatalf("peer: receive completion %+v", wc)
				}
				off := 32<<10 + int(wc.ID)*64
				if v := binary.LittleEndian.Uint64(e.mem[off:]); v != uint64(i) || got {
					t.Fatalf("peer: pong %d after ping %d (got one already: %v)", v, i, got)
				}
				got = true
				if k, err := e.qp.PostRecv([]ofverbs.RecvWR{{ID: wc.ID, SGL: []ofverbs.SGE{e.mr.SGE(e.mem[off : off+64])}}}); k != 1 {
					t.Fatalf("peer: post receive: %v", err)
				}
			}
			if k, _ := e.scq.Poll(wcs); k > 0 {
				for _, wc := range wcs[:k] {
					if wc.Status != ofverbs.WCSuccess {
						t.Fatalf("peer: send completion %+v", wc)
					}
				}
			}
			if !got && spin%1024 == 1023 {
				select {
				case err := <-rank.done:
					rank.done <- err
					t.Fatalf("peer: waiting for pong %d, the rank ended (%v): %s", i, err, rank.err.String())
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("peer: no pong %d within %v; the rank: %s", i, daemontest.Scaled(2*time.Minute), rank.err.String())
				}
			}
		}
		rtts = append(rtts, time.Since(start))
	}
	return median(rtts)
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	for i := 1; i < len(s); i++ { // insertion sort: a few thousand
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}

// rdRun runs t_fprd (args after SOCK) on daemon a, in (nil: here), and
// n rounds of ping-pong from an ofverbs peer on b; it checks that every
// ping and pong arrived once and in order and returns the rank's result
// line's fields, its figures line and the peer's median round trip.
func rdRun(t *testing.T, a, b *daemontest.Daemon, in func(string, ...string) *exec.Cmd, n int, args ...string) (res map[string]int64, fig string, rtt time.Duration, qp proto.QPInfo) {
	t.Helper()
	p := startRankIn(t, in, "t_fprd", a.Sock, args...)
	addr, qkey := p.ready()
	ctx := b.Open(t, "peer")
	e := newLiveEnd(t, "peer", ctx, ofverbs.QPTypeRD)
	ah, err := e.pd.CreateAHTo(ofverbs.Endpoint{Addr: addr, QKey: qkey})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(p.in, "peer %s %d\n", e.qp.Addr(), e.qp.QKey())
	rtt = pingPong(t, e, ah, n, p)
	res = parseResult(t, p.line("result"))
	fig = p.line("figures")
	if res["bad"] != 0 || res["got"] != int64(n) {
		t.Errorf("rank: %d pings in order of %d, %d out of order or twice", res["got"], n, res["bad"])
	}
	qps, text := fastpathQPs(t, a)
	if len(qps) != 1 {
		t.Fatalf("iwarpctl -json qps: %d QPs with a fast-path page, want 1:\n%s", len(qps), text)
	}
	if c := qps[0].Counters; c["fastpath_violations"] != 0 || qps[0].State != "RTS" {
		t.Errorf("QP %+v: want RTS without a violation", qps[0])
	}
	t.Logf("iwarpctl qps:\n%s", text)
	p.finish()
	return res, fig, rtt, qps[0]
}

func TestOwnRDPingPong(t *testing.T) {
	const n, every = 2000, 300
	a := daemontest.Start(t, "rank", daemontest.Options{Ports: ownRDBlocks.Next()})
	b := daemontest.Start(t, "peer", daemontest.Options{Ports: ownRDBlocks.Next()})
	res, fig, rtt, _ := rdRun(t, a, b, nil, n, "pong", strconv.Itoa(n), strconv.Itoa(every))
	t.Logf("rank: %v", res)
	t.Logf("rank: %s; the peer's median round trip %v (information)", fig, rtt)
	if res["rank_rx"] == 0 || res["cq_rx"] == 0 || res["rank_tx"] == 0 || res["daemon_tx"] == 0 {
		t.Errorf("want both paths used both ways: %v", res)
	}
	if res["takeovers"] == 0 || res["handbacks"] < 2 {
		t.Errorf("the page counts %d take-overs and %d hand-backs: want take-overs and hand-backs", res["takeovers"], res["handbacks"])
	}
}

// TestOwnRDLoss: the two daemons in network namespaces, 5 % of the
// packets each receives dropped (nftables): the rank's own datagrams
// that are lost are retransmitted by its daemon from the page's copies
// (the oldest one's timeout is a take-over), its peer's by the peer's
// daemon; every ping and pong still arrives once and in order.
func TestOwnRDLoss(t *testing.T) {
	if ok, why := netns.Available(); !ok {
		t.Skip("skipping the network-namespace test: " + why)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("skipping: nft not installed")
	}
	const prefix, n = "iwfr", 600
	if err := netns.RemoveStale(prefix); err != nil {
		t.Logf("removing stale namespaces: %v", err)
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.81.1/24"), netip.MustParsePrefix("169.254.81.2/24")}
	pair, err := netns.NewPair(fmt.Sprintf("%s%d", prefix, os.Getpid()), addrs, 1500)
	if errors.Is(err, netns.ErrNotPermitted) {
		t.Skip("skipping the network-namespace test: ", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pair.Close(); err != nil {
			t.Errorf("deleting the namespaces: %v", err)
		}
	})
	for i, ns := range pair.Names {
		for _, args := range [][]string{
			{"-n", ns, "link", "set", pair.Links[i], "gso_max_segs", "1"},
			{"netns", "exec", ns, "nft", "add", "table", "inet", "iwarp_fprd"},
			{"netns", "exec", ns, "nft", "add", "chain", "inet", "iwarp_fprd", "in", "{ type filter hook input priority 0 ; }"},
			{"netns", "exec", ns, "nft", "add", "rule", "inet", "iwarp_fprd", "in", "meta", "l4proto", "udp",
				"numgen", "random", "mod", "100", "<", "5", "counter", "drop"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
	}
	a := daemontest.Start(t, "rank", daemontest.Options{Ports: ownRDBlocks.Next(), NS: pair, NSIdx: 0, Addr: addrs[0].Addr().String()})
	b := daemontest.Start(t, "peer", daemontest.Options{Ports: ownRDBlocks.Next(), NS: pair, NSIdx: 1, Addr: addrs[1].Addr().String()})
	in0 := func(name string, args ...string) *exec.Cmd { return pair.Command(0, name, args...) }
	res, fig, rtt, qp := rdRun(t, a, b, in0, n, "pong", strconv.Itoa(n), "200")
	t.Logf("rank: %v", res)
	t.Logf("rank: %s; the peer's median round trip %v (information)", fig, rtt)
	if res["rank_tx"] == 0 {
		t.Errorf("the rank sent nothing itself: %v", res)
	}
	out, _ := exec.Command("ip", "netns", "exec", pair.Names[1], "nft", "list", "chain", "inet", "iwarp_fprd", "in").CombinedOutput()
	t.Logf("the peer's namespace dropped: %s", strings.TrimSpace(string(out)))
	c := qp.Counters
	t.Logf("rank's daemon: rd_fastpath_taken=%d rd_fastpath_resent=%d rd_retransmits=%d rd_timeouts=%d fastpath_takeovers=%d",
		c["rd_fastpath_taken"], c["rd_fastpath_resent"], c["rd_retransmits"], c["rd_timeouts"], c["fastpath_takeovers"])
	if c["rd_fastpath_resent"] == 0 {
		t.Errorf("the rank's daemon resent none of the rank's datagrams at 5 %% loss")
	}
}

// TestOwnRDDestroyAcks: the rank takes the peer's last ping itself — its
// ACK deferred (c/core fprd.c FP_RD_ACK_BATCH) — and destroys its QP at
// once. The daemon takes the socket and the rank's RD halves back first
// (verbsd rd/fastpath.go fpClose), so its closing ACKs and its linger
// know the ping was delivered, and the peer's Send completes successfully.
// Before, the daemon closed with the peers' state of the last hand-back:
// no ACK left, the linger did not answer the retransmissions, and the Send
// failed with WCRetryExcErr (TestAtomicsNetns/rdm-loss5's FI_ETIMEDOUT).
// The peer's daemon retries briefly so that such a failure shows at once.
func TestOwnRDDestroyAcks(t *testing.T) {
	const n = 300
	a := daemontest.Start(t, "rank", daemontest.Options{Ports: ownRDBlocks.Next()})
	b := daemontest.Start(t, "peer", daemontest.Options{Ports: ownRDBlocks.Next(),
		Extra: []string{"-rd-max-retries", "6", "-rd-rto-max", "100ms"}})
	p := startRankIn(t, nil, "t_fprd", a.Sock, "take", strconv.Itoa(n))
	addr, qkey := p.ready()
	e := newLiveEnd(t, "peer", b.Open(t, "peer"), ofverbs.QPTypeRD)
	ah, err := e.pd.CreateAHTo(ofverbs.Endpoint{Addr: addr, QKey: qkey})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(p.in, "peer %s %d\n", e.qp.Addr(), e.qp.QKey())
	pingPong(t, e, ah, n, p)
	last := e.mem[8*64 : 8*64+8] // beside pingPong's ping buffers
	binary.LittleEndian.PutUint64(last, n)
	wr := ofverbs.SendWR{ID: 1 << 40, Opcode: ofverbs.WRSend, AH: ah, Signaled: true, SGL: []ofverbs.SGE{e.mr.SGE(last)}}
	if k, err := e.qp.PostSend([]ofverbs.SendWR{wr}); k != 1 {
		t.Fatalf("peer: post the last ping: %v", err)
	}
	res := parseResult(t, p.line("result"))
	p.line("figures")
	took := p.line("took")
	t.Logf("rank: %v; %s", res, took)
	wcs := make([]ofverbs.WC, 16)
	deadline := time.Now().Add(daemontest.Scaled(30 * time.Second))
	var got *ofverbs.WC
	for got == nil && time.Now().Before(deadline) {
		k, err := e.scq.Poll(wcs)
		if err != nil {
			t.Fatalf("peer: poll: %v", err)
		}
		for i := range wcs[:k] {
			if wcs[i].ID == wr.ID {
				got = &wcs[i]
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	switch {
	case got == nil:
		t.Fatalf("peer: the last ping's Send did not complete within %v (rank: %s)", daemontest.Scaled(30*time.Second), took)
	case got.Status != ofverbs.WCSuccess:
		t.Errorf("peer: the last ping, %s and its QP destroyed at once, completed %v, want success", took, got.Status)
	}
	if f := strings.Fields(took); len(f) < 4 || f[0] != "took" || f[1] != strconv.Itoa(n) || f[3] != "bad=0" {
		t.Errorf("rank: %q, want \"took %d rank|cq bad=0\"", took, n)
	} else if f[2] != "rank" {
		t.Logf("the daemon, not the rank, had the socket when the last ping came: this run checked the daemon's path only")
	}
	p.finish()
}

// TestOwnRDFigures (IWARPD_FASTPATH_BENCH=1): 8-octet RD ping-pong, the
// rank owning its socket against the same program through the daemon,
// alternating, same daemons (information, never asserted).
func TestOwnRDFigures(t *testing.T) {
	if os.Getenv("IWARPD_FASTPATH_BENCH") == "" {
		t.Skip("figures: set IWARPD_FASTPATH_BENCH=1")
	}
	const n = 10000
	a := daemontest.Start(t, "rank", daemontest.Options{Ports: ownRDBlocks.Next()})
	b := daemontest.Start(t, "peer", daemontest.Options{Ports: ownRDBlocks.Next()})
	for round := range 3 {
		for _, mode := range [][]string{{"pong", strconv.Itoa(n), strconv.Itoa(10 * n)}, {"daemon", strconv.Itoa(n)}} {
			res, fig, rtt, _ := rdRun(t, a, b, nil, n, mode...)
			t.Logf("round %d %s: peer's median round trip %v; rank %s; rank_tx=%d daemon_tx=%d", round, mode[0], rtt, fig, res["rank_tx"], res["daemon_tx"])
		}
	}
}
