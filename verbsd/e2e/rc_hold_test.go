package e2e

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/config"
)

// Tests of hold_recv (rc/hold.go): a raw peer sends untagged messages to
// a QP that has no receive posted; the engine holds them, keeps placing
// and answering what follows (Writes, Read Requests), and completes them
// in MSN order on the receives posted afterwards. Past its bounds it
// terminates as RFC 5040 does without the option.

// waitCounter waits until counter name of n reaches want.
func waitCounter(t *testing.T, n *rcEnd, name string, want int64) {
	t.Helper()
	deadline := time.Now().Add(rcWait)
	for {
		got := n.counters()[name]
		if got == want {
			return
		}
		if got > want || time.Now().After(deadline) {
			t.Fatalf("%s %d, want %d", name, got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRCHoldRecv: every kind of untagged message arrives before any
// receive is posted (single and multi-segment Sends, a merged Send with
// Immediate, a Write with Immediate's Immediate Data, a zero-length Send
// with SE, a merged Immediate Data no Send follows); a Write and a Read
// Request among them are served at once; then receives posted one by one
// complete in order with the right data and flags; once the hold is empty
// a Send goes straight to a posted receive again.
func TestRCHoldRecv(t *testing.T) {
	srv, path := rcServer(t)
	b := newRCEnd(t, srv, path, rcOpts{mergeImm: true, holdRecv: true})
	p, _ := rcParams(true, false, 4, 4)
	r := connectRaw(t, b, p, false, 0)
	data := func(n, seed int) []byte {
		d := make([]byte, n)
		rcFill(d, seed)
		return d
	}
	msg := func(op rdmap.Opcode, payload []byte) { r.send(r.untagged(op, 0, true), payload) }
	const wOff = 40 * immSlot
	d1, d2, d3, d8 := data(100, 1), data(3000, 2), data(64, 3), data(700, 8)
	w1 := data(500, 21)
	msg(rdmap.OpSend, d1)
	h := r.untagged(rdmap.OpSend, 0, false)
	r.send(h, d2[:1000])
	h.MO = 1000
	r.send(h, d2[1000:2000])
	h.MO, h.Last = 2000, true
	r.send(h, d2[2000:])
	msg(rdmap.OpImmediateData, mergedImm(0x11))
	msg(rdmap.OpSend, d3)
	r.send(tagged(rdmap.OpWrite, b.mr.RKey, b.mr.Addr(wOff), true), w1)
	msg(rdmap.OpImmediateData, immRaw(0x15)) // a Write with Immediate's: WCRecvRDMAWithImm
	msg(rdmap.OpSendSE, nil)
	msg(rdmap.OpImmediateDataSE, mergedImm(0x21)) // a merged Immediate Data a Read Request follows
	rr := rdmap.ReadRequest{SinkStag: 9, Size: 16, SourceStag: b.mr.RKey, SourceTO: b.mr.Addr(wOff)}
	r.send(r.untagged(rdmap.OpReadRequest, 0, true), rr.Append(nil))
	msg(rdmap.OpSend, d8)
	want := []wantRecv{
		{wrid: 1, op: proto.WCRecv, data: d1},
		{wrid: 2, op: proto.WCRecv, data: d2},
		{wrid: 3, op: proto.WCRecv, data: d3, imm: 0x11, hasImm: true},
		{wrid: 4, op: proto.WCRecvRDMAWithImm, imm: 0x15, hasImm: true},
		{wrid: 5, op: proto.WCRecv, se: true},
		{wrid: 6, op: proto.WCRecv, imm: 0x21, hasImm: true, se: true},
		{wrid: 7, op: proto.WCRecv, data: d8},
	}
	// The Read Request is answered while every message before it waits
	// for a receive: the hold holds no other traffic back.
	if h, rest, err := r.next(); err != nil || !h.Tagged || h.Stag != 9 || !bytes.Equal(rest, w1[:16]) {
		t.Fatalf("read response %+v %x %v", h, rest, err)
	}
	if !bytes.Equal(b.mr.Buf[wOff:wOff+len(w1)], w1) {
		t.Fatal("the Write behind the held Sends is not in place")
	}
	waitCounter(t, b, "rc_recv_held", int64(len(want)))
	b.noCQE(b.rcq, "nothing posted")
	if b.state() != proto.QPStateRTS {
		t.Fatalf("QP in %v, want RTS", b.state())
	}
	for _, w := range want {
		b.postRecv(w.wrid, b.mr.SGE(int(w.wrid-1)*immSlot, immSlot))
		got := b.waitCQEs(b.rcq, 1, "held message")
		checkRecv(t, b, "held message", got[0], w)
	}
	// The hold is empty: a Send takes a posted receive directly.
	b.postRecv(8, b.mr.SGE(7*immSlot, immSlot))
	d9 := data(33, 9)
	msg(rdmap.OpSend, d9)
	checkRecv(t, b, "direct", b.waitCQEs(b.rcq, 1, "direct")[0], wantRecv{wrid: 8, op: proto.WCRecv, data: d9})
	if c := b.counters(); c["rc_recv_held"] != int64(len(want)) || c["rc_held_dropped"] != 0 || c["messages_in"] != int64(len(want)+1) {
		t.Fatalf("counters rc_recv_held %d rc_held_dropped %d messages_in %d", c["rc_recv_held"], c["rc_held_dropped"], c["messages_in"])
	}
}

// TestRCHoldBounds: past -rc-hold-msgs or -rc-hold-bytes the message that
// does not fit gets RFC 5041's Terminate "invalid MSN, no buffer" naming
// its DDP header; the messages held are dropped with the QP's flush
// (counted), and the receives posted after complete flushed.
func TestRCHoldBounds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		msgs, bytes int
		sizes       []int
	}{
		{"messages", 3, 1 << 20, []int{10, 10, 10, 10}},
		{"octets", 100, 5000, []int{2000, 2000, 2000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, path := rcServer(t, func(c *config.Config) { c.RCHoldMsgs, c.RCHoldBytes = tc.msgs, tc.bytes })
			b := newRCEnd(t, srv, path, rcOpts{holdRecv: true})
			p, _ := rcParams(true, false, 4, 4)
			r := connectRaw(t, b, p, false, 0)
			var last []byte
			for i, n := range tc.sizes {
				h := r.untagged(rdmap.OpSend, 0, true)
				r.send(h, make([]byte, n))
				if i == len(tc.sizes)-1 {
					last = h.Append(nil)
				}
			}
			_, term := r.terminate()
			if term.Err != iwerr.DDPInvalidMSNNoBuffer || !bytes.Equal(term.DDPHeader, last) {
				t.Fatalf("terminate %v naming %x, want %v naming the last Send %x", term.Err, term.DDPHeader, iwerr.DDPInvalidMSNNoBuffer, last)
			}
			b.waitClosed()
			held := int64(len(tc.sizes) - 1)
			waitCounter(t, b, "rc_held_dropped", held)
			if c := b.counters(); c["rc_recv_held"] != held || c["messages_in"] != 0 {
				t.Fatalf("rc_recv_held %d messages_in %d, want %d and 0", c["rc_recv_held"], c["messages_in"], held)
			}
			b.postRecv(1, b.mr.SGE(0, 4096))
			if c := b.waitCQEs(b.rcq, 1, "after the end"); c[0].Status != proto.WCWRFlushErr {
				t.Fatalf("receive after the end: %+v, want flushed", c[0])
			}
			if h := srv.Device().Users.Held(uint32(os.Getuid()))[config.ResHeld]; h != 0 {
				t.Fatalf("the user still holds %d held octets", h)
			}
		})
	}
}

// TestRCHoldGracefulEnd: messages held when the peer closes gracefully
// (TCP FIN after them) and no receive is posted are dropped with the
// QP's flush, counted; a receive posted after the end completes flushed.
func TestRCHoldGracefulEnd(t *testing.T) {
	srv, path := rcServer(t)
	b := newRCEnd(t, srv, path, rcOpts{holdRecv: true})
	p, _ := rcParams(true, false, 4, 4)
	r := connectRaw(t, b, p, false, 0)
	d := make([]byte, 5000)
	rcFill(d, 5)
	r.send(r.untagged(rdmap.OpSend, 0, true), d)
	r.send(r.untagged(rdmap.OpSend, 0, true), d[:10])
	waitCounter(t, b, "rc_recv_held", 2)
	r.conn.Close()
	b.waitClosed()
	waitCounter(t, b, "rc_held_dropped", 2)
	b.postRecv(1, b.mr.SGE(0, 8192))
	if c := b.waitCQEs(b.rcq, 1, "after the end"); c[0].Status != proto.WCWRFlushErr {
		t.Fatalf("receive after the end: %+v, want flushed", c[0])
	}
}
