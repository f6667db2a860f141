package hostile

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// A rank that lies in its RD QP's fast-path page (proto/fastpath_rd.go,
// verbsd/rd/fastpath.go, docs/fastpath.md "RD"), run as another user
// (c/tests/t_fprd.c garbage): it answers pings from a peer of root's on
// the same engine until it owns the socket with the peer's slot, then
// writes garbage over the slot's halves and ring and stops renewing. At
// the take-over the engine's check of the halves fails its QP alone (ERROR,
// one violation, the reason in the log); the bystander keeps flowing, the
// daemon lives, and the peer's QP is not harmed beyond its own unanswered
// pings.
func TestFastpathHostileRDRank(t *testing.T) {
	d := daemontest.Start(t, "fprd", daemontest.Options{Ports: nextPorts(), Extra: []string{"-socket-mode", "0666", "-engines", "1"}})
	openSocket(t, d)
	by := startBystander(t, d)

	ctx := d.Open(t, "pinger")
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := ctx.AllocBuffer(8192)
	if err != nil {
		t.Fatal(err)
	}
	mem := buf.Bytes()
	mr, err := pd.RegMR(mem, ofverbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(256, nil)
	if err != nil {
		t.Fatal(err)
	}
	for seed := 1; seed <= 3; seed++ {
		t.Run(fmt.Sprintf("garbage-%d", seed), func(t *testing.T) {
			qp, err := pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeRD, SendCQ: cq, RecvCQ: cq,
				Cap: ofverbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			defer qp.Close()
			if err := qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
				t.Fatal(err)
			}
			for i := range 32 {
				off := 4096 + i*64
				if k, err := qp.PostRecv([]ofverbs.RecvWR{{ID: uint64(i), SGL: []ofverbs.SGE{mr.SGE(mem[off : off+64])}}}); k != 1 {
					t.Fatalf("pinger: post receive: %v", err)
				}
			}
			p := startFPProg(t, "t_fprd", otherUID, d.Sock, "garbage", strconv.Itoa(seed))
			fmt.Fprintf(p.in, "peer %s %d\n", qp.Addr(), qp.QKey())
			ah, err := pd.CreateAHTo(ofverbs.Endpoint{Addr: p.addr, QKey: p.qkey})
			if err != nil {
				t.Fatal(err)
			}
			// Ping until the lying rank's QP fails (bounded); a ping the
			// rank no longer answers times out.
			wcs := make([]ofverbs.WC, 16)
			var q proto.QPInfo
			pongs := 0
			for i := 0; i < 400; i++ {
				if q = fastpathRow(t, d.Sock); q.State == "ERROR" {
					break
				}
				b := mem[(i%32)*8 : (i%32)*8+8]
				binary.LittleEndian.PutUint64(b, uint64(i))
				if k, err := qp.PostSend([]ofverbs.SendWR{{ID: uint64(i), Opcode: ofverbs.WRSend, AH: ah, SGL: []ofverbs.SGE{mr.SGE(b)}}}); k != 1 {
					t.Fatalf("pinger: post ping %d: %v", i, err)
				}
				deadline := time.Now().Add(daemontest.Scaled(50 * time.Millisecond))
				for got := false; !got && time.Now().Before(deadline); {
					k, _ := cq.Poll(wcs)
					for _, wc := range wcs[:k] {
						if wc.Opcode == ofverbs.WCRecv && wc.Status == ofverbs.WCSuccess {
							got = true
							pongs++
							off := 4096 + int(wc.ID)*64
							qp.PostRecv([]ofverbs.RecvWR{{ID: wc.ID, SGL: []ofverbs.SGE{mr.SGE(mem[off : off+64])}}})
						}
					}
					if k == 0 {
						time.Sleep(50 * time.Microsecond)
					}
				}
			}
			daemontest.Eventually(t, "the lying rank's RD QP failing", 20*time.Second, func() bool {
				q = fastpathRow(t, d.Sock)
				return q.State == "ERROR"
			})
			c := q.Counters
			t.Logf("%d pongs before the garbage; the rank's QP: %s, fast path %s, %d hand-backs, %d take-overs, %d releases, %d violations",
				pongs, q.State, q.Fastpath, c["fastpath_handbacks"], c["fastpath_takeovers"], c["fastpath_releases"], c["fastpath_violations"])
			if q.Fastpath != "off" || q.Counters["fastpath_violations"] != 1 || q.Counters["fastpath_handbacks"] == 0 {
				t.Errorf("lying rank's QP: %+v: want the fast path off after one violation, after a hand-back", q)
			}
			by.progressed(t, "a rank lying in its RD halves")
			p.finish(t)
		})
	}
	by.progressed(t, "after the lying RD ranks")
	if !d.Alive() {
		t.Fatal("the daemon died")
	}
	if log := d.Stderr.String(); !strings.Contains(log, "peer slot 0") {
		t.Errorf("the daemon's log does not say which field of the RD halves failed the QP:\n%s", log)
	}
}
