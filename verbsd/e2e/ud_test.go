package e2e

import (
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

func TestSendRecvSizes(t *testing.T) {
	_, path := startServer(t, nil)
	const buf = 2 << 20
	a := newNode(t, path, buf, verbsdtest.QPOptions{})
	b := newNode(t, path, buf, verbsdtest.QPOptions{})
	ahB := a.ah(t, b)
	maxSingle := 1472 - 4 - 18
	sizes := []int{0, 1, 100, maxSingle, maxSingle + 1, 3 * maxSingle, 100000, 1 << 20}
	for i, size := range sizes {
		src := a.mr.Buf[:size]
		fill(src, i)
		clear(b.mr.Buf[:size+8])
		b.postRecv(t, uint64(1000+i), 0, 1<<20+4)
		flags := proto.SendSignaled
		if i%2 == 1 {
			flags |= proto.SendSolicited
		}
		a.send(t, ahB, uint64(i), flags, 0, size)
		sc := waitCQEs(t, a.scq, 1, "send")[0]
		if sc.Status != proto.WCSuccess || sc.WRID != uint64(i) || sc.Opcode != proto.WCSend || int(sc.ByteLen) != size {
			t.Fatalf("size %d: send completion %+v", size, sc)
		}
		rc := waitCQEs(t, b.rcq, 1, "recv")[0]
		if rc.Status != proto.WCSuccess || rc.WRID != uint64(1000+i) || rc.Opcode != proto.WCRecv || int(rc.ByteLen) != size {
			t.Fatalf("size %d: receive completion %+v", size, rc)
		}
		if rc.Src != addrOf(t, a.qp.Addr) || rc.QPN != b.qp.QPN || rc.Flags&proto.WCFlagSrcValid == 0 {
			t.Fatalf("size %d: receive completion source %v qpn %d flags %#x, want %v %d", size, rc.Src, rc.QPN, rc.Flags, a.qp.Addr, b.qp.QPN)
		}
		if got := rc.Flags&proto.WCFlagSolicited != 0; got != (i%2 == 1) {
			t.Fatalf("size %d: solicited flag %v", size, got)
		}
		checkBytes(t, "received", b.mr.Buf[:size], src)
	}
}

func TestManyMessagesAndInline(t *testing.T) {
	_, path := startServer(t, nil)
	a := newNode(t, path, 1<<20, verbsdtest.QPOptions{SigAll: true})
	b := newNode(t, path, 1<<20, verbsdtest.QPOptions{})
	ahB := a.ah(t, b)
	const count, slot, window = 2000, 256, 128
	posted, received := 0, 0
	for posted < window {
		b.postRecv(t, uint64(posted), (posted%window)*slot, slot)
		posted++
	}
	for i := range count {
		off := (i % window) * slot
		msg := a.mr.Buf[off : off+64]
		fill(msg, i)
		if i%3 == 0 { // inline
			e := proto.SQE{WRID: uint64(i), Opcode: proto.WRSend, Flags: proto.SendInline, AH: ahB}
			for a.qp.PostSend(e, nil, msg) != nil {
				a.scq.Poll()
			}
		} else {
			a.send(t, ahB, uint64(i), 0, off, 64)
		}
		// Keep at most half a window in flight so no datagram finds the
		// receive queue empty.
		for i+1-received > window/2 {
			for _, rc := range b.rcq.Wait(1, wait()) {
				if rc.Status != proto.WCSuccess || rc.ByteLen != 64 || rc.WRID != uint64(received) {
					t.Fatalf("message %d: completion %+v", received, rc)
				}
				roff := (received % window) * slot
				want := make([]byte, 64)
				fill(want, received)
				checkBytes(t, "message", b.mr.Buf[roff:roff+64], want)
				b.postRecv(t, uint64(posted), (posted%window)*slot, slot)
				posted++
				received++
			}
			a.scq.Poll()
		}
	}
	for received < count {
		got := b.rcq.Wait(1, wait())
		if len(got) == 0 {
			t.Fatalf("received %d of %d messages", received, count)
		}
		for _, rc := range got {
			if rc.Status != proto.WCSuccess || rc.WRID != uint64(received) {
				t.Fatalf("message %d: completion %+v", received, rc)
			}
			received++
		}
	}
	c := qpCounters(t, path, b.qp.QPN)
	if c["messages_in"] != count || c["drop_no_recv"] != 0 {
		t.Errorf("receiver counters %v", c)
	}
}

// TestSharedReceiveQueue delivers to two QPs from one SRQ.
func TestSharedReceiveQueue(t *testing.T) {
	_, path := startServer(t, nil)
	a := newNode(t, path, 1<<16, verbsdtest.QPOptions{})
	b, srq, prod := srqNode(t, path, 16, 2)
	b.qp = srqQP(t, b, srq)
	for i := range 4 {
		if err := b.c.PostRecv(prod, uint64(i), []proto.SGE{b.mr.SGE(i*1024, 1024)}); err != nil {
			t.Fatal(err)
		}
	}
	ah := a.ah(t, b)
	fill(a.mr.Buf[:3000], 5)
	a.send(t, ah, 1, 0, 0, 100)
	a.send(t, ah, 2, 0, 100, 2900) // two segments, into 1024-octet buffers: too long
	got := waitCQEs(t, b.rcq, 2, "srq receives")
	if got[0].Status != proto.WCSuccess || got[0].ByteLen != 100 || got[0].WRID != 0 {
		t.Fatalf("first: %+v", got[0])
	}
	checkBytes(t, "srq", b.mr.Buf[:100], a.mr.Buf[:100])
	if got[1].Status != proto.WCLocLenErr || got[1].WRID != 1 {
		t.Fatalf("too long: %+v", got[1])
	}
}

// TestSharedReceiveQueueBacklog: two UD QPs on one SRQ, both parked with
// messages waiting in their sockets (no receive posted, ud/backlog.go);
// receives posted to the SRQ wake both, and every message of each is
// delivered, in its QP's order, none dropped.
func TestSharedReceiveQueueBacklog(t *testing.T) {
	_, path := startServer(t, nil)
	a := newNode(t, path, 1<<16, verbsdtest.QPOptions{})
	b, srq, prod := srqNode(t, path, 128, 1)
	qps := [2]*verbsdtest.QP{srqQP(t, b, srq), srqQP(t, b, srq)}
	ahs := [2]proto.AddressVector{must(a.c.CreateAH(a.pd, qps[0].Addr))(t), must(a.c.CreateAH(a.pd, qps[1].Addr))(t)}
	const perQP = 40
	for i := range 2 * perQP {
		fill(a.mr.Buf[i*64:i*64+64], i)
		a.send(t, ahs[i%2], uint64(i), proto.SendSignaled, i*64, 64)
	}
	waitCQEs(t, a.scq, 2*perQP, "sends")
	deadline := time.Now().Add(wait())
	for _, q := range qps {
		for qpCounters(t, path, q.QPN)["recv_parked"] == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("QP %d never parked: %v", q.QPN, qpCounters(t, path, q.QPN))
			}
			time.Sleep(time.Millisecond)
		}
		if c := qpCounters(t, path, q.QPN); c["datagrams_in"] != 0 {
			t.Fatalf("QP %d read %d datagrams with no receive posted", q.QPN, c["datagrams_in"])
		}
	}
	for i := range 2 * perQP {
		if err := b.c.PostRecv(prod, uint64(1000+i), []proto.SGE{b.mr.SGE(i*64, 64)}); err != nil {
			t.Fatal(err)
		}
	}
	got := waitCQEs(t, b.rcq, 2*perQP, "srq receives")
	next := [2]int{0, 1} // the message each QP delivers next
	for _, r := range got {
		k := 0
		if r.QPN == qps[1].QPN {
			k = 1
		}
		i := next[k]
		next[k] += 2
		off := int(r.WRID-1000) * 64
		want := make([]byte, 64)
		fill(want, i)
		if r.Status != proto.WCSuccess || r.ByteLen != 64 || string(b.mr.Buf[off:off+64]) != string(want) {
			t.Fatalf("QP %d: completion %+v is not message %d", r.QPN, r, i)
		}
	}
	for _, q := range qps {
		if c := qpCounters(t, path, q.QPN); c["messages_in"] != perQP || c["drop_no_recv"] != 0 {
			t.Errorf("QP %d: messages_in %d drop_no_recv %d, want %d, 0", q.QPN, c["messages_in"], c["drop_no_recv"], perQP)
		}
	}
}

// srqNode is a client with a PD, a 64 KiB MR, CQs (256 deep) and an SRQ of
// depth receives of maxSGE SGEs; its QPs come from srqQP.
func srqNode(t *testing.T, path string, depth, maxSGE uint32) (*node, uint32, *shm.Producer) {
	t.Helper()
	b := &node{c: dial(t, path)}
	b.pd = must(b.c.AllocPD())(t)
	b.mr = must(b.c.RegMR(b.pd, 1<<16, proto.AccessLocalWrite))(t)
	b.scq = must(b.c.CreateCQ(256, 0))(t)
	b.rcq = must(b.c.CreateCQ(256, 0))(t)
	srq, prod := createSRQ(t, b.c, b.pd, depth, maxSGE)
	return b, srq, prod
}

// srqQP is a UD QP of b on srq, in RTS.
func srqQP(t *testing.T, b *node, srq uint32) *verbsdtest.QP {
	t.Helper()
	caps := defaultCaps
	caps.MaxRecvWR = 0
	q := must(b.c.CreateQP(b.pd, b.scq, b.rcq, caps, verbsdtest.QPOptions{SRQ: srq}))(t)
	if err := q.ToRTS(); err != nil {
		t.Fatal(err)
	}
	return q
}
