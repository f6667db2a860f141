package fastpath

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
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
func pingPong(t *testing.T, e *liveEnd, ah *ofverbs.AH, n int) time.Duration {
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
			if !got && spin%1024 == 1023 && time.Now().After(deadline) {
				t.Fatalf("peer: no pong %d within %v", i, daemontest.Scaled(2*time.Minute))
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

func TestOwnRDPingPong(t *testing.T) {
	n, every := 2000, 300
	if os.Getenv("IWARPD_FASTPATH_BENCH") != "" {
		n, every = 20000, 100000 // the figures: no pause
	}
	a := daemontest.Start(t, "rank", daemontest.Options{Ports: ownRDBlocks.Next()})
	b := daemontest.Start(t, "peer", daemontest.Options{Ports: ownRDBlocks.Next()})
	p := startRankProg(t, "t_fprd", a.Sock, "pong", strconv.Itoa(n), strconv.Itoa(every))
	addr, qkey := p.ready()

	ctx := b.Open(t, "peer")
	e := newLiveEnd(t, "peer", ctx, ofverbs.QPTypeRD)
	ah, err := e.pd.CreateAHTo(ofverbs.Endpoint{Addr: addr, QKey: qkey})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(p.in, "peer %s %d\n", e.qp.Addr(), e.qp.QKey())
	rtt := pingPong(t, e, ah, n)

	res := parseResult(t, p.line("result"))
	t.Logf("rank: %v", res)
	t.Logf("rank: %s; the peer's median round trip %v (information)", p.line("figures"), rtt)
	if res["bad"] != 0 || res["got"] != int64(n) {
		t.Errorf("rank: %d pings in order of %d, %d out of order or twice", res["got"], n, res["bad"])
	}
	if res["rank_rx"] == 0 || res["cq_rx"] == 0 || res["rank_tx"] == 0 || res["daemon_tx"] == 0 {
		t.Errorf("want both paths used both ways: %v", res)
	}
	if n/every > 1 && (res["takeovers"] == 0 || res["handbacks"] < 2) {
		t.Errorf("the page counts %d take-overs and %d hand-backs: want take-overs and hand-backs", res["takeovers"], res["handbacks"])
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
}
