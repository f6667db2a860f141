package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/verbsd/config"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

// Engines per core (docs/engines.md): CQs and SRQs shared by QPs that two
// engines serve at once, QP destruction and session close with QPs on
// several engines, and what Inspect says of the engines.

func twoEngines(c *config.Config) { c.Engines = 2 }

// engineOf is the engine Inspect names for each QPN.
func engineOf(t *testing.T, path string) map[uint32]int {
	t.Helper()
	ic := must(verbsdtest.Dial(path, true))(t)
	defer ic.Close()
	in := must(ic.Inspect())(t)
	m := map[uint32]int{}
	for _, s := range in.Sessions {
		for _, q := range s.QPs {
			m[q.QPN] = q.Engine
		}
	}
	return m
}

// engCaps: deep rings, so that a round is posted whole.
var engCaps = proto.QPCaps{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 1, MaxRecvSGE: 1}

// engSlot is each message's buffer slot; a message carries its stream
// and sequence number in its first 8 octets, then a pattern.
const engSlot = 1024

func engMsgSize(i int) int { return 8 + (i*37)%(engSlot-8) }

func fillMsg(b []byte, stream, seq int) {
	binary.LittleEndian.PutUint32(b, uint32(stream))
	binary.LittleEndian.PutUint32(b[4:], uint32(seq))
	for j := 8; j < len(b); j++ {
		b[j] = byte(stream*7 + seq*13 + j)
	}
}

func checkMsg(b []byte) (stream, seq int, ok bool) {
	if len(b) < 8 {
		return 0, 0, false
	}
	stream, seq = int(binary.LittleEndian.Uint32(b)), int(binary.LittleEndian.Uint32(b[4:]))
	for j := 8; j < len(b); j++ {
		if b[j] != byte(stream*7+seq*13+j) {
			return stream, seq, false
		}
	}
	return stream, seq, true
}

// engStream is one UD stream of a test: from sends to ah, message i in
// slot base+i of mr; its receives complete on QP to.
type engStream struct {
	from *verbsdtest.QP
	to   uint32 // QPN of the receiving QP
	mr   *verbsdtest.MR
	ah   proto.AddressVector
	base int
}

// engWindow bounds each stream's messages sent and not yet received, so
// that no receiving socket buffer overflows (UD drops then) even at the
// kernel's default rmem_max.
const engWindow = 32

// pump runs the streams at once, count messages each, and returns every
// completion of cqs until want of them arrived (bounded by wait()).
func pump(t *testing.T, sts []engStream, count int, cqs []*verbsdtest.CQ, want int) []proto.CQE {
	t.Helper()
	sent, recvd := make([]int, len(sts)), make([]int, len(sts))
	var got []proto.CQE
	deadline := time.Now().Add(wait())
	for len(got) < want {
		for s, st := range sts {
			for sent[s] < count && sent[s]-recvd[s] < engWindow {
				i := sent[s]
				off := (st.base + i) * engSlot
				n := engMsgSize(i)
				fillMsg(st.mr.Buf[off:off+n], s, i)
				e := proto.SQE{WRID: uint64(i), Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: st.ah}
				if err := st.from.PostSend(e, []proto.SGE{st.mr.SGE(off, n)}, nil); errors.Is(err, verbsdtest.ErrFull) {
					break
				} else if err != nil {
					t.Fatalf("stream %d send %d: %v", s, i, err)
				}
				sent[s]++
			}
		}
		polled := 0
		for _, cq := range cqs {
			for _, e := range cq.Poll() {
				got = append(got, e)
				polled++
				for s, st := range sts {
					if e.Opcode == proto.WCRecv && e.QPN == st.to {
						recvd[s]++
					}
				}
			}
		}
		if polled == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d completions of %d in %v (sent %v, received %v)", len(got), want, wait(), sent, recvd)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return got
}

// TestEnginesSharedCQ: one CQ takes the send and receive completions of
// two UD streams whose four QPs two engines serve at once (a1, b2 on
// one engine; b1, a2 on the other): every completion arrives once, in
// order per QP and opcode, round after round.
func TestEnginesSharedCQ(t *testing.T) {
	_, path := startServer(t, twoEngines)
	c := dial(t, path)
	pd := must(c.AllocPD())(t)
	const count, rounds = 400, 4
	mr := must(c.RegMR(pd, 4*count*engSlot, proto.AccessLocalWrite))(t)
	cq := must(c.CreateCQ(4096, 0))(t)
	var qps [4]*verbsdtest.QP // a1, b1, b2, a2: placed on engines 0, 1, 0, 1
	for i := range qps {
		qps[i] = must(c.CreateQP(pd, cq, cq, engCaps, verbsdtest.QPOptions{}))(t)
		if err := qps[i].ToRTS(); err != nil {
			t.Fatal(err)
		}
	}
	a1, b1, b2, a2 := qps[0], qps[1], qps[2], qps[3]
	eng := engineOf(t, path)
	if eng[a1.QPN] == eng[b1.QPN] || eng[a2.QPN] == eng[b2.QPN] || eng[a1.QPN] != eng[b2.QPN] {
		t.Fatalf("placement %v: want each stream across both engines (spread)", eng)
	}
	streams := []struct{ from, to *verbsdtest.QP }{{a1, b1}, {a2, b2}}
	for round := range rounds {
		for s, st := range streams {
			for i := range count {
				off := ((2+s)*count + i) * engSlot
				if err := c.PostRecv(st.to.RQ, uint64(i), []proto.SGE{mr.SGE(off, engSlot)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		var sts []engStream
		for s, st := range streams {
			sts = append(sts, engStream{from: st.from, to: st.to.QPN, mr: mr, ah: must(c.CreateAH(pd, st.to.Addr))(t), base: s * count})
		}
		got := pump(t, sts, count, []*verbsdtest.CQ{cq}, 4*count)
		next := map[string]uint64{}
		for _, e := range got {
			key := fmt.Sprintf("%d/%v", e.QPN, e.Opcode)
			if e.Status != proto.WCSuccess || e.WRID != next[key] {
				t.Fatalf("round %d: completion %+v: want WRID %d of %s (lost, duplicated or out of order)", round, e, next[key], key)
			}
			next[key]++
			if e.Opcode != proto.WCRecv {
				continue
			}
			s := 0
			if e.QPN == b2.QPN {
				s = 1
			}
			off := ((2+s)*count + int(e.WRID)) * engSlot
			if stream, seq, ok := checkMsg(mr.Buf[off : off+int(e.ByteLen)]); !ok || stream != s || seq != int(e.WRID) {
				t.Fatalf("round %d: receive %+v holds stream %d message %d (intact %v)", round, e, stream, seq, ok)
			}
		}
		for _, q := range qps {
			op := proto.WCSend
			if q == b1 || q == b2 {
				op = proto.WCRecv
			}
			if n := next[fmt.Sprintf("%d/%v", q.QPN, op)]; n != count {
				t.Fatalf("round %d: QP %d: %d completions, want %d", round, q.QPN, n, count)
			}
		}
		if extra := cq.Wait(1, 10*time.Millisecond); len(extra) != 0 {
			t.Fatalf("round %d: a completion more than posted: %+v", round, extra)
		}
	}
}

// TestEnginesSharedSRQ: two UD QPs on different engines take their
// receives from one SRQ while two streams arrive at once: every receive
// completes once, with the message it claims, and each stream's messages
// arrive in order at their QP.
func TestEnginesSharedSRQ(t *testing.T) {
	_, path := startServer(t, twoEngines)
	c := dial(t, path)
	pd := must(c.AllocPD())(t)
	const count, rounds = 400, 4
	mr := must(c.RegMR(pd, 4*count*engSlot, proto.AccessLocalWrite))(t)
	scq := must(c.CreateCQ(4096, 0))(t)
	rcq := must(c.CreateCQ(4096, 0))(t)
	srqH, srq := createSRQ(t, c, pd, 1024, 1)
	var rs, ss [2]*verbsdtest.QP // created r0, r1, s0, s1: engines 0, 1, 0, 1
	for i := range rs {
		caps := engCaps
		caps.MaxRecvWR, caps.MaxRecvSGE = 0, 0
		rs[i] = must(c.CreateQP(pd, scq, rcq, caps, verbsdtest.QPOptions{SRQ: srqH}))(t)
		if err := rs[i].ToRTS(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range ss {
		ss[i] = must(c.CreateQP(pd, scq, rcq, engCaps, verbsdtest.QPOptions{}))(t)
		if err := ss[i].ToRTS(); err != nil {
			t.Fatal(err)
		}
	}
	if eng := engineOf(t, path); eng[rs[0].QPN] == eng[rs[1].QPN] {
		t.Fatalf("placement %v: want the SRQ's QPs on both engines", eng)
	}
	for round := range rounds {
		// 2*count receives in an SRQ of 1024: post them as room appears.
		for i := range 2 * count {
			if err := postSRQ(c, srq, uint64(round*2*count+i), mr.SGE((2*count+i)*engSlot, engSlot)); err != nil {
				t.Fatal(err)
			}
		}
		var sts []engStream
		for s := range ss {
			sts = append(sts, engStream{from: ss[s], to: rs[s].QPN, mr: mr, ah: must(c.CreateAH(pd, rs[s].Addr))(t), base: s * count})
		}
		var recvs []proto.CQE
		for _, e := range pump(t, sts, count, []*verbsdtest.CQ{scq, rcq}, 4*count) {
			if e.Opcode == proto.WCRecv {
				recvs = append(recvs, e)
			} else if e.Status != proto.WCSuccess {
				t.Fatalf("round %d: send %+v", round, e)
			}
		}
		if len(recvs) != 2*count {
			t.Fatalf("round %d: %d receive completions, want %d", round, len(recvs), 2*count)
		}
		seen := map[uint64]bool{}
		next := [2]int{}
		for _, e := range recvs {
			i := int(e.WRID) - round*2*count
			if e.Status != proto.WCSuccess || i < 0 || i >= 2*count || seen[e.WRID] {
				t.Fatalf("round %d: receive %+v: failed, foreign or consumed twice", round, e)
			}
			seen[e.WRID] = true
			off := (2*count + i) * engSlot
			stream, seq, ok := checkMsg(mr.Buf[off : off+int(e.ByteLen)])
			if !ok || stream > 1 || e.QPN != rs[stream].QPN || seq != next[stream] {
				t.Fatalf("round %d: receive %+v holds stream %d message %d (intact %v), want message %d on QP %d",
					round, e, stream, seq, ok, next[min(stream, 1)], rs[min(stream, 1)].QPN)
			}
			next[stream]++
		}
	}
}

// postSRQ posts one receive into an SRQ, waiting (bounded) for room.
func postSRQ(c *verbsdtest.Client, srq *shm.Producer, wrid uint64, sge proto.SGE) error {
	deadline := time.Now().Add(wait())
	for {
		err := c.PostRecv(srq, wrid, []proto.SGE{sge})
		if !errors.Is(err, verbsdtest.ErrFull) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("SRQ full for %v: the daemon took no receive", wait())
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// TestEnginesDestroyAndClose: QPs on both engines destroyed while their
// peers send to them, then a session closed with QPs left on both: the
// engines end with no QP and the daemon serves a new session.
func TestEnginesDestroyAndClose(t *testing.T) {
	_, path := startServer(t, twoEngines)
	c := dial(t, path)
	pd := must(c.AllocPD())(t)
	mr := must(c.RegMR(pd, 64*engSlot, proto.AccessLocalWrite))(t)
	cq := must(c.CreateCQ(4096, 0))(t)
	var qps []*verbsdtest.QP
	for range 8 {
		q := must(c.CreateQP(pd, cq, cq, engCaps, verbsdtest.QPOptions{}))(t)
		if err := q.ToRTS(); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			if err := c.PostRecv(q.RQ, uint64(i), []proto.SGE{mr.SGE(i*engSlot, engSlot)}); err != nil {
				t.Fatal(err)
			}
		}
		qps = append(qps, q)
	}
	if eng := engineOf(t, path); eng[qps[0].QPN] == eng[qps[1].QPN] {
		t.Fatalf("placement %v: want QPs on both engines", eng)
	}
	// Each QP sends to the next; half of them, two on each engine, are
	// destroyed meanwhile.
	for i, q := range qps {
		ah := must(c.CreateAH(pd, qps[(i+1)%len(qps)].Addr))(t)
		off := (16 + i) * engSlot
		fillMsg(mr.Buf[off:off+64], i, 0)
		if err := q.PostSend(proto.SQE{WRID: 1, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}, []proto.SGE{mr.SGE(off, 64)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{1, 2, 5, 6} {
		if _, err := c.Call(proto.OpDestroyQP, proto.Handle{Handle: qps[i].Handle}, nil); err != nil {
			t.Fatalf("destroying QP %d: %v", qps[i].Handle, err)
		}
	}
	in := inspectAll(t, path)
	if in.Counters["qps"] != 4 || len(in.Engines) != 2 || in.Engines[0].QPs+in.Engines[1].QPs != 4 {
		t.Fatalf("after destroying 4 of 8: qps %d, engines %+v", in.Counters["qps"], in.Engines)
	}
	c.Close() // the rest, on both engines, go with the session
	deadline := time.Now().Add(wait())
	for {
		in = inspectAll(t, path)
		if len(in.Sessions) == 0 && in.Engines[0].QPs == 0 && in.Engines[1].QPs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after close: %d sessions, engines %+v", len(in.Sessions), in.Engines)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A new session works on both engines.
	a, b := newNode(t, path, 1<<16, verbsdtest.QPOptions{}), newNode(t, path, 1<<16, verbsdtest.QPOptions{})
	if eng := engineOf(t, path); eng[a.qp.QPN] == eng[b.qp.QPN] {
		t.Fatalf("placement %v after the close: want both engines used", eng)
	}
	ah := must(a.c.CreateAH(a.pd, b.qp.Addr))(t)
	if err := b.c.PostRecv(b.qp.RQ, 7, []proto.SGE{b.mr.SGE(0, 64)}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(proto.SQE{WRID: 9, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}, []proto.SGE{a.mr.SGE(0, 64)}, nil); err != nil {
		t.Fatal(err)
	}
	if r := b.rcq.Wait(1, wait()); len(r) != 1 || r[0].WRID != 7 || r[0].Status != proto.WCSuccess {
		t.Fatalf("receive after the close: %+v", r)
	}
}

// TestEnginesInspect: Inspect lists each engine with its QPs, and the
// engines' counters add up in the daemon's.
func TestEnginesInspect(t *testing.T) {
	_, path := startServer(t, func(c *config.Config) { c.Engines = 3 })
	a, b := newNode(t, path, 1<<16, verbsdtest.QPOptions{}), newNode(t, path, 1<<16, verbsdtest.QPOptions{})
	ah := must(a.c.CreateAH(a.pd, b.qp.Addr))(t)
	for i := range 10 {
		if err := b.c.PostRecv(b.qp.RQ, uint64(i), []proto.SGE{b.mr.SGE(0, 64)}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}, []proto.SGE{a.mr.SGE(0, 64)}, nil); err != nil {
			t.Fatal(err)
		}
		if r := b.rcq.Wait(1, wait()); len(r) != 1 {
			t.Fatalf("message %d not received", i)
		}
	}
	in := inspectAll(t, path)
	if len(in.Engines) != 3 {
		t.Fatalf("engines %+v, want 3", in.Engines)
	}
	per := map[int]int{}
	for _, s := range in.Sessions {
		for _, q := range s.QPs {
			per[q.Engine]++
		}
	}
	for i, e := range in.Engines {
		if e.ID != i || e.QPs != per[i] || e.UptimeNS <= 0 {
			t.Fatalf("engine %d: %+v, want %d QPs (Inspect's QPs say)", i, e, per[i])
		}
	}
	if per[0] != 1 || per[1] != 1 || per[2] != 0 {
		t.Fatalf("QPs per engine %v: want 1, 1, 0 (spread)", per)
	}
	if in.Counters["messages_out"] != 10 || in.Counters["messages_in"] != 10 || in.Counters["qps"] != 2 {
		t.Fatalf("counters %v: want the engines' sums (10 out, 10 in, 2 QPs)", in.Counters)
	}
}

func inspectAll(t *testing.T, path string) proto.Inspect {
	t.Helper()
	ic := must(verbsdtest.Dial(path, true))(t)
	defer ic.Close()
	return must(ic.Inspect())(t)
}
