package e2e

import (
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rc"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// readRequests reads k FPDUs from the engine, all Read Requests.
func (r *rawPeer) readRequests(k int) []rdmap.ReadRequest {
	r.t.Helper()
	var out []rdmap.ReadRequest
	for range k {
		h, rest, err := r.next()
		if err != nil {
			r.t.Fatal(err)
		}
		if h.Tagged || h.QN != rdmap.QNReadRequest {
			r.t.Fatalf("got %+v, want a Read Request", h)
		}
		rr, _, err := rdmap.ParseReadRequest(rest)
		if err != nil {
			r.t.Fatal(err)
		}
		out = append(out, rr)
	}
	return out
}

// quiet checks that the engine sends nothing for a moment.
func (r *rawPeer) quiet(what string) {
	r.t.Helper()
	r.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 64)
	if n, _ := r.conn.Read(buf); n > 0 {
		r.t.Fatalf("%s: the engine sent % x", what, buf[:n])
	}
}

// respond answers a Read Request with one Read Response segment.
func (r *rawPeer) respond(rr rdmap.ReadRequest, fill byte) {
	data := make([]byte, rr.Size)
	for i := range data {
		data[i] = fill
	}
	r.send(tagged(rdmap.OpReadResponse, rr.SinkStag, rr.SinkTO, true), data)
}

// TestRCOrdFence: with ORD 2 at most two Read Requests are outstanding; a
// fenced Send waits for every earlier Read; Read Responses are matched in
// order; completions come in posting order.
func TestRCOrdFence(t *testing.T) {
	srv, path := rcServer(t)
	a := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
	p, _ := rcParams(false, false, 2, 2)
	r := connectRaw(t, a, p, true, 0)
	for i := range 3 {
		a.postSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRRDMARead, Flags: proto.SendSignaled, RKey: 0x100, RemoteAddr: uint64(i) << 20},
			[]proto.SGE{a.mr.SGE(i*100, 10)}, nil)
	}
	a.postSend(proto.SQE{WRID: 3, Opcode: proto.WRSend, Flags: proto.SendSignaled | proto.SendFence}, []proto.SGE{a.mr.SGE(1000, 5)}, nil)
	rrs := r.readRequests(2)
	for i, rr := range rrs {
		if rr.SinkStag != a.mr.LKey || rr.SinkTO != a.mr.Addr(i*100) || rr.Size != 10 || rr.SourceStag != 0x100 || rr.SourceTO != uint64(i)<<20 {
			t.Fatalf("read request %d: %+v", i, rr)
		}
	}
	r.quiet("ORD 2 reached")
	r.respond(rrs[0], 0xa0)
	rrs = append(rrs, r.readRequests(1)...)
	r.quiet("fenced Send behind outstanding Reads")
	r.respond(rrs[1], 0xa1)
	r.quiet("fenced Send behind the last Read")
	r.respond(rrs[2], 0xa2)
	h, rest, err := r.next()
	if err != nil || h.Tagged || h.QN != rdmap.QNSend || len(rest) != 5 {
		t.Fatalf("after the reads: %+v % x %v", h, rest, err)
	}
	cs := a.waitCQEs(a.scq, 4, "reads and fenced send")
	for i, c := range cs {
		if c.WRID != uint64(i) || c.Status != proto.WCSuccess {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	for i := range 3 {
		if a.mr.Buf[i*100] != byte(0xa0+i) || a.mr.Buf[i*100+9] != byte(0xa0+i) {
			t.Fatalf("read %d not placed", i)
		}
	}
}

// TestRCTerminateReceived: the peer's Terminate (RFC or siw layout) fails
// the oldest outstanding work request with the reported error, flushes the
// rest, and moves the QP to ERROR.
func TestRCTerminateReceived(t *testing.T) {
	for _, siw := range []bool{false, true} {
		t.Run(map[bool]string{false: "rfc", true: "siw-layout"}[siw], func(t *testing.T) {
			srv, path := rcServer(t)
			a := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
			p, _ := rcParams(true, false, 4, 4)
			r := connectRaw(t, a, p, true, 0)
			a.postRecv(10, a.mr.SGE(0, 10))
			a.postSend(proto.SQE{WRID: 1, Opcode: proto.WRRDMARead, Flags: proto.SendSignaled, RKey: 0x100}, []proto.SGE{a.mr.SGE(0, 10)}, nil)
			rr := r.readRequests(1)[0]
			a.postSend(proto.SQE{WRID: 2, Opcode: proto.WRRDMARead, Flags: proto.SendSignaled | proto.SendFence, RKey: 0x100}, []proto.SGE{a.mr.SGE(0, 10)}, nil)
			dh := ddp.Header{Version: 1, ULPControl: uint8(rdmap.MakeControl(rdmap.OpReadRequest)), QN: 1, MSN: 1, Last: true}
			term := rdmap.TerminateFor(iwerr.RDMAPAccessRights, dh.Append(nil), rr.Append(nil))
			term.SetSegmentLength(46)
			term.SiwLayout = siw
			r.send(r.untagged(rdmap.OpTerminate, 0, true), term.Append(nil))
			a.waitState(proto.QPStateError)
			cs := a.waitCQEs(a.scq, 2, "send queue")
			if cs[0].WRID != 1 || cs[0].Status != proto.WCRemAccessErr || cs[0].Flags&proto.WCFlagTermValid == 0 ||
				cs[0].Term != rnic.TermWord(iwerr.RDMAPAccessRights) {
				t.Fatalf("terminated read: %+v", cs[0])
			}
			if cs[1].WRID != 2 || cs[1].Status != proto.WCWRFlushErr {
				t.Fatalf("flushed read: %+v", cs[1])
			}
			if c := a.waitCQEs(a.rcq, 1, "receive")[0]; c.WRID != 10 || c.Status != proto.WCWRFlushErr {
				t.Fatalf("flushed receive: %+v", c)
			}
			reason, tm := a.waitClosed()
			if reason != rc.ClosedTermReceived || tm == nil || tm.Err != iwerr.RDMAPAccessRights || tm.SiwLayout != siw {
				t.Fatalf("onRCClosed(%v, %+v)", reason, tm)
			}
			// Posting to the ERROR QP flushes.
			a.postSend(proto.SQE{WRID: 3, Opcode: proto.WRSend, Flags: proto.SendSignaled}, nil, nil)
			if c := a.waitCQEs(a.scq, 1, "post in ERROR")[0]; c.WRID != 3 || c.Status != proto.WCWRFlushErr {
				t.Fatalf("post in ERROR: %+v", c)
			}
		})
	}
}

// TestRCInvalidate: Send with Invalidate invalidates the target's STag
// (reported in the receive completion) and a later Write to it is refused
// with a Terminate; local invalidation stops local and remote use.
func TestRCInvalidate(t *testing.T) {
	srv, path := rcServer(t)
	a := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
	b := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
	pi, pr := rcParams(true, false, 4, 4)
	connectRC(t, a, b, pi, pr, 0)
	// b's second MR, the one a invalidates.
	target, err := b.c.RegMR(b.pd, 4096, proto.AccessLocalWrite|proto.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	a.postSend(proto.SQE{WRID: 1, Opcode: proto.WRRDMAWrite, Flags: proto.SendSignaled, RKey: target.RKey, RemoteAddr: target.Addr(0)}, nil, []byte("before"))
	b.postRecv(5, b.mr.SGE(0, 64))
	a.postSend(proto.SQE{WRID: 2, Opcode: proto.WRSendInvalidate, Flags: proto.SendSignaled | proto.SendSolicited, InvStag: target.RKey}, nil, []byte("inv"))
	a.waitCQEs(a.scq, 2, "write, send-inv")
	c := b.waitCQEs(b.rcq, 1, "send with invalidate")[0]
	if c.Flags&proto.WCFlagWithInv == 0 || c.InvStag != target.RKey || c.Flags&proto.WCFlagSolicited == 0 || c.ByteLen != 3 {
		t.Fatalf("receive of Send with SE and Invalidate: %+v", c)
	}
	if string(target.Buf[:6]) != "before" {
		t.Fatalf("write before invalidation not placed: %q", target.Buf[:6])
	}
	// b cannot use it locally either.
	b.postSend(proto.SQE{WRID: 9, Opcode: proto.WRSend, Flags: proto.SendSignaled}, []proto.SGE{target.SGE(0, 4)}, nil)
	if c := b.waitCQEs(b.scq, 1, "send from invalidated MR")[0]; c.Status != proto.WCLocProtErr {
		t.Fatalf("local use of an invalidated STag: %+v", c)
	}
	// b's QP is now in ERROR (local error): it sends a Terminate.
	b.waitState(proto.QPStateError)
	a.waitState(proto.QPStateError)
	if r, tm := a.waitClosed(); r != rc.ClosedTermReceived || tm == nil || tm.Err != iwerr.RDMAPCatastrophicStream {
		t.Fatalf("a: onRCClosed(%v, %+v)", r, tm)
	}

	// Remote access to an invalidated STag, and local invalidation.
	srv2, path2 := rcServer(t)
	a = newRCEnd(t, srv2, path2, rcOpts{bufSize: 1 << 16})
	b = newRCEnd(t, srv2, path2, rcOpts{bufSize: 1 << 16})
	connectRC(t, a, b, pi, pr, 0)
	b.postSend(proto.SQE{WRID: 1, Opcode: proto.WRLocalInvalidate, Flags: proto.SendSignaled, InvStag: b.mr.RKey}, nil, nil)
	if c := b.waitCQEs(b.scq, 1, "local invalidate")[0]; c.Status != proto.WCSuccess || c.Opcode != proto.WCLocalInvalidate {
		t.Fatalf("local invalidate: %+v", c)
	}
	a.postSend(proto.SQE{WRID: 2, Opcode: proto.WRRDMAWrite, Flags: proto.SendSignaled, RKey: b.mr.RKey, RemoteAddr: b.mr.Addr(0)}, nil, []byte("after"))
	b.waitState(proto.QPStateError)
	if r, tm := b.waitClosed(); r != rc.ClosedTermSent || tm.Err != iwerr.DDPInvalidStag {
		t.Fatalf("b: onRCClosed(%v, %+v)", r, tm)
	}
	if r, tm := a.waitClosed(); r != rc.ClosedTermReceived || tm.Err != iwerr.DDPInvalidStag {
		t.Fatalf("a: onRCClosed(%v, %+v)", r, tm)
	}
	if string(b.mr.Buf[:5]) == "after" {
		t.Fatal("write to an invalidated STag was placed")
	}
}

// TestRCPeerToPeer: each RTR type; the responder's Send posted before the
// RTR waits for it, and the RTR consumes no receive.
func TestRCPeerToPeer(t *testing.T) {
	for _, rtr := range []mpa.RTRType{mpa.RTRWrite, mpa.RTRRead, mpa.RTRSend} {
		t.Run(rtr.String(), func(t *testing.T) {
			srv, path := rcServer(t)
			a := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
			b := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
			pi, pr := rcParams(true, false, 4, 4)
			pi.PeerToPeer, pr.PeerToPeer, pi.RTR, pr.RTR = true, true, rtr, rtr
			fa, fb := tcpPair(t)
			b.attach(fb, pr, false, 0)
			a.postRecv(1, a.mr.SGE(0, 16))
			b.postRecv(2, b.mr.SGE(0, 16))
			b.postSend(proto.SQE{WRID: 3, Opcode: proto.WRSend, Flags: proto.SendSignaled}, nil, []byte("responder"))
			b.noCQE(b.scq, "responder before the RTR")
			a.attach(fa, pi, true, 0)
			b.waitCQEs(b.scq, 1, "responder send")
			if c := a.waitCQEs(a.rcq, 1, "initiator receive")[0]; c.WRID != 1 || c.ByteLen != 9 {
				t.Fatalf("initiator receive %+v", c)
			}
			a.postSend(proto.SQE{WRID: 4, Opcode: proto.WRSend, Flags: proto.SendSignaled}, nil, []byte("initiator"))
			if c := b.waitCQEs(b.rcq, 1, "responder receive")[0]; c.WRID != 2 || c.ByteLen != 9 || string(b.mr.Buf[:9]) != "initiator" {
				t.Fatalf("responder receive %+v", c)
			}
			a.waitCQEs(a.scq, 1, "initiator send")
		})
	}
}

// TestRCDisconnect: a graceful disconnect delivers the work posted before
// it, then both QPs end in ERROR with their receives flushed; an abortive
// one sends a Terminate.
func TestRCDisconnect(t *testing.T) {
	a, b := rcPairOf(t, 1<<20, true, false, 1460)
	for i := range 4 {
		b.postRecv(uint64(10+i), b.mr.SGE(i*65536, 65536))
	}
	b.postRecv(99, b.mr.SGE(0, 1))
	a.postRecv(98, a.mr.SGE(0, 1))
	for i := range 4 {
		a.postSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRSend, Flags: proto.SendSignaled}, []proto.SGE{a.mr.SGE(0, 65536)}, nil)
	}
	a.engineQP(func(q *rc.QP) error { q.Engine.DisconnectRC(q, false); return nil })
	cs := a.waitCQEs(a.scq, 4, "sends before the disconnect")
	for i, c := range cs {
		if c.Status != proto.WCSuccess || c.WRID != uint64(i) {
			t.Fatalf("send %d: %+v", i, c)
		}
	}
	rs := b.waitCQEs(b.rcq, 5, "receives")
	for i, c := range rs[:4] {
		if c.Status != proto.WCSuccess || c.ByteLen != 65536 {
			t.Fatalf("receive %d: %+v", i, c)
		}
	}
	if rs[4].WRID != 99 || rs[4].Status != proto.WCWRFlushErr {
		t.Fatalf("flushed receive: %+v", rs[4])
	}
	if c := a.waitCQEs(a.rcq, 1, "a's receive")[0]; c.Status != proto.WCWRFlushErr {
		t.Fatalf("a's receive %+v", c)
	}
	a.waitState(proto.QPStateError)
	b.waitState(proto.QPStateError)
	if r, _ := a.waitClosed(); r != rc.ClosedGraceful {
		t.Fatalf("a: %v", r)
	}
	if r, _ := b.waitClosed(); r != rc.ClosedGraceful {
		t.Fatalf("b: %v", r)
	}

	a, b = rcPairOf(t, 1<<16, false, false, 0)
	a.engineQP(func(q *rc.QP) error { q.Engine.DisconnectRC(q, true); return nil })
	if r, tm := b.waitClosed(); r != rc.ClosedTermReceived || tm.Err != iwerr.RDMAPCatastrophicStream {
		t.Fatalf("b after abort: %v %+v", r, tm)
	}
	if r, _ := a.waitClosed(); r != rc.ClosedTermSent {
		t.Fatalf("a after abort: %v", r)
	}
	a.waitState(proto.QPStateError)
	b.waitState(proto.QPStateError)
}

// TestRCPeerDies: the peer's socket closes in the middle of a 16 MiB Send:
// the QP goes to ERROR and everything posted completes (flushed), nothing
// hangs.
func TestRCPeerDies(t *testing.T) {
	srv, path := rcServer(t)
	a := newRCEnd(t, srv, path, rcOpts{bufSize: 16 << 20})
	p, _ := rcParams(true, false, 4, 4)
	r := connectRaw(t, a, p, true, 0)
	a.postRecv(50, a.mr.SGE(0, 10))
	a.postSend(proto.SQE{WRID: 1, Opcode: proto.WRSend, Flags: proto.SendSignaled}, []proto.SGE{a.mr.SGE(0, 16<<20)}, nil)
	a.postSend(proto.SQE{WRID: 2, Opcode: proto.WRSend, Flags: proto.SendSignaled}, []proto.SGE{a.mr.SGE(0, 16<<20)}, nil)
	buf := make([]byte, 100000)
	r.conn.SetReadDeadline(time.Now().Add(rcWait))
	if _, err := r.conn.Read(buf); err != nil {
		t.Fatal(err)
	}
	r.conn.SetLinger(0)
	r.conn.Close() // RST
	a.waitState(proto.QPStateError)
	cs := a.waitCQEs(a.scq, 2, "sends")
	for _, c := range cs {
		if c.Status != proto.WCWRFlushErr {
			t.Fatalf("send of a dead connection: %+v", c)
		}
	}
	if c := a.waitCQEs(a.rcq, 1, "receive")[0]; c.Status != proto.WCWRFlushErr {
		t.Fatalf("receive %+v", c)
	}
	if reason, _ := a.waitClosed(); reason != rc.ClosedSocketError {
		t.Fatalf("onRCClosed(%v)", reason)
	}
}

// TestRCSlowReader: a peer that does not read fills the socket; the engine
// stops sending (EPOLLOUT), holds no more than one FPDU, stays responsive,
// and resumes when the peer reads.
func TestRCSlowReader(t *testing.T) {
	srv, path := rcServer(t)
	a := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 20})
	other := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
	p, _ := rcParams(false, false, 4, 4)
	r := connectRaw(t, a, p, true, 0)
	const n = 128
	for i := range n {
		a.postSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRRDMAWrite, Flags: proto.SendSignaled, RKey: 5}, []proto.SGE{a.mr.SGE(0, 1<<20)}, nil)
	}
	time.Sleep(300 * time.Millisecond)
	done := len(a.scq.Poll())
	if done >= n {
		t.Fatalf("all %d MiB written to a peer that reads nothing", n)
	}
	if a.counters()["send_blocked"] == 0 {
		t.Fatal("the engine never saw a full socket")
	}
	// The engine serves others meanwhile.
	if s := other.state(); s != proto.QPStateInit {
		t.Fatalf("other QP: %v", s)
	}
	var held int
	a.engineQP(func(q *rc.QP) error { held = len(q.Conn.Tx.Scratch) + q.Conn.Irq.Len(); return nil })
	if held > 1024 {
		t.Fatalf("%d octets of framing held", held)
	}
	// Drain: every Write completes.
	go func() {
		buf := make([]byte, 1<<20)
		for {
			if _, err := r.conn.Read(buf); err != nil {
				return
			}
		}
	}()
	got := a.waitCQEs(a.scq, n-done, "writes after draining")
	if got[len(got)-1].WRID != n-1 {
		t.Fatalf("last completion %+v", got[len(got)-1])
	}
}

// TestRCSharedSRQ: two RC QPs take their receives from one SRQ.
func TestRCSharedSRQ(t *testing.T) {
	srv, path := rcServer(t)
	b1 := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
	// The SRQ, in b1's session and PD.
	reg, err := shm.Create("srq", proto.RingBytes(64, proto.RQEStride(2)))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ring, err := shm.NewRing(reg.Mem, proto.RingSRQ, 64, proto.RQEStride(2), true)
	if err != nil {
		t.Fatal(err)
	}
	var h proto.Handle
	if _, err := b1.c.Call(proto.OpCreateSRQ, proto.CreateSRQRequest{PD: b1.pd, MaxWR: 64, MaxSGE: 2}, &h, reg.FD()); err != nil {
		t.Fatal(err)
	}
	srq := shm.NewProducer(ring)
	s1 := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16, c: b1.c, pd: b1.pd, srq: h.Handle})
	s2 := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16, c: b1.c, pd: b1.pd, srq: h.Handle})
	a1 := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
	a2 := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
	pi, pr := rcParams(true, false, 4, 4)
	connectRC(t, a1, s1, pi, pr, 0)
	connectRC(t, a2, s2, pi, pr, 0)
	for i := range 4 {
		b1.postRecvOn(srq, uint64(i), b1.mr.SGE(i*100, 100))
	}
	a1.postSend(proto.SQE{WRID: 1, Opcode: proto.WRSend}, nil, []byte("from a1"))
	c1 := s1.waitCQEs(s1.rcq, 1, "s1")[0]
	a2.postSend(proto.SQE{WRID: 1, Opcode: proto.WRSend}, nil, []byte("from a2"))
	a1.postSend(proto.SQE{WRID: 1, Opcode: proto.WRSend}, nil, []byte("again a1"))
	c2 := s2.waitCQEs(s2.rcq, 1, "s2")[0]
	c3 := s1.waitCQEs(s1.rcq, 1, "s1 again")[0]
	if c1.WRID != 0 || c1.QPN != s1.qpn || c2.QPN != s2.qpn || c3.QPN != s1.qpn || c2.WRID == c3.WRID || c2.WRID == 0 {
		t.Fatalf("SRQ completions %+v %+v %+v", c1, c2, c3)
	}
	if string(b1.mr.Buf[:7]) != "from a1" || string(b1.mr.Buf[c2.WRID*100:c2.WRID*100+7]) != "from a2" {
		t.Fatal("SRQ buffers not filled")
	}
}
