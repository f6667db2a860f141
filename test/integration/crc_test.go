package integration

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestRDNoCRC: RD QPs with CRC off (ofverbs QPInitAttr.NoCRC, agreed out of
// band: datagram-iwarp.md §4, docs/rd.md "CRC") between two daemons: Sends
// up to 1 MiB and a 1 MB RDMA Read arrive whole, no datagram is dropped for
// its CRC. Then a QP with CRC on sends to the CRC-off QP: the CRC-off side
// takes its DATA (it checks nothing) but its ACKs carry a trailer of 0,
// which the CRC-on side drops and counts (drop_crc); the Send fails with
// WCRetryExcErr, and the CRC-on daemon's log says once what it saw (a
// trailer of 0: the peer has CRC off) and what to do, and its dead-peer
// line names the CRC setting.
func TestRDNoCRC(t *testing.T) {
	// RD ports 19760-19779 (nothing else of the suite uses them).
	fast := []string{"-rd-max-retries", "6", "-rd-rto-max", "50ms"}
	da := startDaemon(t, "crc-a", daemontest.Options{Extra: append([]string{"-rd-ports", "19760-19769"}, fast...)})
	db := startDaemon(t, "crc-b", daemontest.Options{Extra: append([]string{"-rd-ports", "19770-19779"}, fast...)})
	a := newRDEndCRC(t, "a", da.Open(t, "crc-a"), 2<<20, true)
	b := newRDEndCRC(t, "b", db.Open(t, "crc-b"), 2<<20, true)
	ah, err := a.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{0, 1400, 65536, 1 << 20} {
		b.recv(t, uint64(i), 2<<20)
		if st := rdSendOnce(t, a, b, ah, uint64(i), n); st != ofverbs.WCSuccess {
			t.Fatalf("send %d octets with CRC off on both QPs: %v", n, st)
		}
	}
	const readLen = 1000000
	for i := range b.mem[:readLen] {
		b.mem[i] = byte(i * 13)
	}
	clear(a.mem[:readLen])
	a.post(t, ofverbs.SendWR{ID: 50, Opcode: ofverbs.WRRDMARead, AH: ah, Signaled: true, RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr(),
		SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:readLen])}})
	if wc, err := a.wait(a.scq, 30*time.Second); err != nil || wc.Status != ofverbs.WCSuccess || !bytes.Equal(a.mem[:readLen], b.mem[:readLen]) {
		t.Fatalf("read with CRC off: %+v %v", wc, err)
	}
	for _, d := range []*daemon{da, db} {
		if n := d.counters(t)["drop_crc"]; n != 0 {
			t.Errorf("daemon %s dropped %d datagrams for their CRC with CRC off on both QPs", d.Name, n)
		}
	}

	// A QP with CRC on (on daemon b) sends to a's CRC-off QP.
	c := newRDEndCRC(t, "c", db.Open(t, "crc-c"), 1<<20, false)
	ahc, err := c.pd.CreateAHTo(a.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	a.recv(t, 70, 1<<20)
	c.post(t, ofverbs.SendWR{ID: 70, Opcode: ofverbs.WRSend, AH: ahc, Signaled: true, SGL: []ofverbs.SGE{c.mr.SGE(c.mem[:5000])}})
	wc, err := c.wait(c.scq, 20*time.Second)
	if err != nil || wc.ID != 70 || wc.Status != ofverbs.WCRetryExcErr {
		t.Fatalf("send from a CRC-on QP to a CRC-off QP: %+v %v (want WCRetryExcErr: its ACKs are dropped)", wc, err)
	}
	if n := db.counters(t)["drop_crc"]; n == 0 {
		t.Errorf("daemon %s (CRC on) counted no drop_crc", db.Name)
	}
	daemontest.Eventually(t, "daemon b's log to explain the drops", 10*time.Second, func() bool {
		log := db.Stderr.String()
		return strings.Contains(log, "CRC32c trailer 0x00000000 does not match (a trailer of 0: that peer's QP most likely has CRC off)") &&
			strings.Contains(log, "the peer's CRC setting may differ")
	})
	if n := strings.Count(db.Stderr.String(), "does not match (a trailer of 0"); n != 1 {
		t.Errorf("daemon b logged the CRC mismatch %d times, want once per QP", n)
	}
}

// TestUDCRCMismatch: a UD QP with CRC off sends to one with CRC on (one
// daemon, loopback). The datagram carries a trailer of 0; the receiver
// drops it (no receive completes), counts it (drop_crc), and the daemon
// logs once for the QP that the peer most likely has CRC off and that
// both ends must agree (ud/crc_log.go): UD has no retransmission to fail,
// so the log line and the counter are all a user sees.
func TestUDCRCMismatch(t *testing.T) {
	d := startDaemon(t, "ud-crc", daemontest.Options{})
	ctx := d.Open(t, "ud-crc")
	udQP := func(name string, noCRC bool) *rdEnd {
		e := &rdEnd{name: name, ctx: ctx, wcs: make([]ofverbs.WC, 1)}
		var err error
		if e.pd, err = ctx.AllocPD(); err != nil {
			t.Fatal(err)
		}
		buf, err := ctx.AllocBuffer(1 << 16)
		if err != nil {
			t.Fatal(err)
		}
		e.mem = buf.Bytes()
		if e.mr, err = e.pd.RegMR(e.mem, ofverbs.AccessLocalWrite); err != nil {
			t.Fatal(err)
		}
		if e.scq, err = ctx.CreateCQ(16, nil); err != nil {
			t.Fatal(err)
		}
		if e.rcq, err = ctx.CreateCQ(16, nil); err != nil {
			t.Fatal(err)
		}
		e.qp, err = e.pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: e.scq, RecvCQ: e.rcq, NoCRC: noCRC,
			Cap: ofverbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := udQP("a", true), udQP("b", false)
	ah, err := a.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	b.recv(t, 1, 4096)
	for i := range 3 {
		a.post(t, ofverbs.SendWR{ID: uint64(10 + i), Opcode: ofverbs.WRSend, AH: ah, Signaled: true, SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:1000])}})
		if wc, err := a.wait(a.scq, 10*time.Second); err != nil || wc.Status != ofverbs.WCSuccess {
			t.Fatalf("UD send %d: %+v %v", i, wc, err)
		}
	}
	daemontest.Eventually(t, "the CRC-on QP's drops to be counted", 10*time.Second, func() bool {
		return d.counters(t)["drop_crc"] >= 3
	})
	if n, err := b.rcq.Poll(b.wcs); err != nil || n != 0 {
		t.Fatalf("the CRC-on QP completed a receive of a datagram with a trailer of 0: %d %+v %v", n, b.wcs[0], err)
	}
	log := d.Stderr.String()
	if n := strings.Count(log, "UD QP"); n != 1 || !strings.Contains(log, "CRC32c trailer 0x00000000 does not match (a trailer of 0") ||
		!strings.Contains(log, "FI_IWARPD_DGRAM_CRC alike") {
		t.Errorf("want one log line for the QP's CRC drops, naming the trailer of 0 and FI_IWARPD_DGRAM_CRC (%d lines):\n%s", n, log)
	}
}
