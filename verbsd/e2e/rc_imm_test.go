package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"golang.org/x/sys/unix"
)

// Tests of merge_send_imm (rc/imm.go): a raw peer sends the RFC 7306
// sequences a merging receiver must handle, and reads what a merging
// sender writes; two engine QPs exchange merged Sends with Immediate mixed
// with everything else.

func mergedImm(v uint32) []byte {
	d := rdmap.MakeMergedImmediateData(v)
	return d.Raw[:]
}

// wantRecv is an expected receive completion.
type wantRecv struct {
	wrid   uint64
	op     proto.WCOpcode
	data   []byte // ByteLen and the octets placed in the receive's slot
	imm    uint32
	hasImm bool
	se     bool
}

const immSlot = 8192 // receive i (wrid i+1) is b.mr.Buf[i*immSlot:]

func checkRecv(t *testing.T, b *rcEnd, what string, got proto.CQE, w wantRecv) {
	t.Helper()
	wantFlags := uint8(0)
	if w.hasImm {
		wantFlags |= proto.WCFlagImm
	}
	if w.se {
		wantFlags |= proto.WCFlagSolicited
	}
	if got.Status != proto.WCSuccess || got.WRID != w.wrid || got.Opcode != w.op || got.ByteLen != uint32(len(w.data)) ||
		got.Flags != wantFlags || w.hasImm && got.Imm != w.imm {
		t.Fatalf("%s: completion %+v, want wrid %d opcode %v len %d flags %#x imm %#x", what, got, w.wrid, w.op,
			len(w.data), wantFlags, w.imm)
	}
	off := int(w.wrid-1) * immSlot
	if !bytes.Equal(b.mr.Buf[off:off+len(w.data)], w.data) {
		t.Fatalf("%s: receive %d holds other data", what, w.wrid)
	}
}

// TestRCMergedImmReceive: a merging receiver (the engine) fed by a raw
// peer. A tagged Immediate Data takes no receive and completes with the
// next Send (any length, SE on either message, after a Write); an untagged
// one is RFC 7306's (WCRecvRDMAWithImm after a Write, its own receive
// otherwise); a tagged one followed by anything but a Send (another
// Immediate Data, a Write, a Read Request) is delivered in its own receive
// first. Then a held value dies with the connection: every receive left
// is flushed, none carries it.
func TestRCMergedImmReceive(t *testing.T) {
	srv, path := rcServer(t)
	b := newRCEnd(t, srv, path, rcOpts{mergeImm: true})
	const nrecv = 32
	for i := range nrecv {
		b.postRecv(uint64(i+1), b.mr.SGE(i*immSlot, immSlot))
	}
	p, _ := rcParams(true, true, 4, 4)
	r := connectRaw(t, b, p, false, 0)
	data := func(n, seed int) []byte {
		d := make([]byte, n)
		rcFill(d, seed)
		return d
	}
	msg := func(op rdmap.Opcode, payload []byte) { r.send(r.untagged(op, 0, true), payload) }
	write := func(off int, payload []byte) { r.send(tagged(rdmap.OpWrite, b.mr.RKey, b.mr.Addr(off), true), payload) }
	d1, d3, d4, d6, d9, d11 := data(100, 1), data(3000, 3), data(1, 4), data(64, 6), data(333, 9), data(7, 11)
	w1, w2 := data(500, 21), data(40, 22)
	const wOff = nrecv * immSlot
	steps := []struct {
		name string
		run  func()
		want []wantRecv
	}{
		{"merged", func() { msg(rdmap.OpImmediateData, mergedImm(0x11)); msg(rdmap.OpSend, d1) },
			[]wantRecv{{wrid: 1, op: proto.WCRecv, data: d1, imm: 0x11, hasImm: true}}},
		{"immediate SE, 0 octets", func() { msg(rdmap.OpImmediateDataSE, mergedImm(0x12)); msg(rdmap.OpSend, nil) },
			[]wantRecv{{wrid: 2, op: proto.WCRecv, imm: 0x12, hasImm: true, se: true}}},
		{"send SE in two segments", func() {
			msg(rdmap.OpImmediateData, mergedImm(0x13))
			h := r.untagged(rdmap.OpSendSE, 0, false)
			r.send(h, d3[:1000])
			h.MO, h.Last = 1000, true
			r.send(h, d3[1000:])
		}, []wantRecv{{wrid: 3, op: proto.WCRecv, data: d3, imm: 0x13, hasImm: true, se: true}}},
		{"after a write", func() {
			write(wOff, w1)
			msg(rdmap.OpImmediateData, mergedImm(0x14))
			msg(rdmap.OpSend, d4)
		}, []wantRecv{{wrid: 4, op: proto.WCRecv, data: d4, imm: 0x14, hasImm: true}}},
		{"write with immediate unchanged", func() {
			write(wOff+1024, w2)
			msg(rdmap.OpImmediateData, immRaw(0x15))
		}, []wantRecv{{wrid: 5, op: proto.WCRecvRDMAWithImm, imm: 0x15, hasImm: true}}},
		{"RFC 7306 send with immediate unchanged", func() {
			msg(rdmap.OpSend, d6)
			msg(rdmap.OpImmediateDataSE, immRaw(0x16))
		}, []wantRecv{{wrid: 6, op: proto.WCRecv, data: d6}, {wrid: 7, op: proto.WCRecv, imm: 0x16, hasImm: true, se: true}}},
		{"two immediates in a row", func() {
			msg(rdmap.OpImmediateDataSE, mergedImm(0x21))
			msg(rdmap.OpImmediateData, mergedImm(0x22))
			msg(rdmap.OpSend, d9)
		}, []wantRecv{{wrid: 8, op: proto.WCRecv, imm: 0x21, hasImm: true, se: true}, {wrid: 9, op: proto.WCRecv, data: d9, imm: 0x22, hasImm: true}}},
		{"immediate then write", func() {
			msg(rdmap.OpImmediateData, mergedImm(0x31))
			write(wOff+2048, w2)
			msg(rdmap.OpSend, d11)
		}, []wantRecv{{wrid: 10, op: proto.WCRecv, imm: 0x31, hasImm: true}, {wrid: 11, op: proto.WCRecv, data: d11}}},
		{"immediate then untagged immediate", func() {
			msg(rdmap.OpImmediateData, mergedImm(0x41))
			msg(rdmap.OpImmediateData, immRaw(0x42))
		}, []wantRecv{{wrid: 12, op: proto.WCRecv, imm: 0x41, hasImm: true}, {wrid: 13, op: proto.WCRecv, imm: 0x42, hasImm: true}}},
		{"immediate then read request", func() {
			msg(rdmap.OpImmediateData, mergedImm(0x51))
			rr := rdmap.ReadRequest{SinkStag: 9, Size: 8, SourceStag: b.mr.RKey, SourceTO: b.mr.Addr(wOff)}
			r.send(r.untagged(rdmap.OpReadRequest, 0, true), rr.Append(nil))
			msg(rdmap.OpSend, nil)
		}, []wantRecv{{wrid: 14, op: proto.WCRecv, imm: 0x51, hasImm: true}, {wrid: 15, op: proto.WCRecv}}},
	}
	for _, s := range steps {
		s.run()
		got := b.waitCQEs(b.rcq, len(s.want), s.name)
		for i, w := range s.want {
			checkRecv(t, b, s.name, got[i], w)
		}
	}
	if !bytes.Equal(b.mr.Buf[wOff:wOff+len(w1)], w1) || !bytes.Equal(b.mr.Buf[wOff+2048:wOff+2048+len(w2)], w2) {
		t.Fatal("a Write's data is not in place")
	}
	// The Read Response of "immediate then read request" is the first
	// thing the engine sent (the responder waited for our first FPDU).
	if h, rest, err := r.next(); err != nil || !h.Tagged || h.Stag != 9 || !bytes.Equal(rest, w1[:8]) {
		t.Fatalf("read response %+v %x %v", h, rest, err)
	}
	if got := b.counters()["imm_held"]; got != 9 {
		t.Fatalf("imm_held %d, want 9", got)
	}

	// A held value, then the connection ends: nothing carries it.
	msg(rdmap.OpImmediateData, mergedImm(0x61))
	deadline := time.Now().Add(rcWait)
	for b.counters()["imm_held"] != 10 {
		if time.Now().After(deadline) {
			t.Fatal("the last Immediate Data was not held")
		}
		time.Sleep(time.Millisecond)
	}
	r.conn.Close()
	b.waitClosed()
	flushed := b.waitCQEs(b.rcq, nrecv-15, "flush")
	for i, c := range flushed {
		if c.Status != proto.WCWRFlushErr || c.WRID != uint64(16+i) || c.Flags&proto.WCFlagImm != 0 {
			t.Fatalf("flushed receive %+v, want wrid %d flushed without immediate", c, 16+i)
		}
	}
}

// TestRCMergedImmNoRecv: a tagged Immediate Data followed by a Write with
// no receive posted: the held value cannot be delivered, and the engine
// terminates with "invalid MSN, no buffer" naming the Immediate Data.
func TestRCMergedImmNoRecv(t *testing.T) {
	srv, path := rcServer(t)
	b := newRCEnd(t, srv, path, rcOpts{mergeImm: true})
	p, _ := rcParams(true, false, 4, 4)
	r := connectRaw(t, b, p, false, 0)
	h := r.untagged(rdmap.OpImmediateData, 0, true)
	r.send(h, mergedImm(7))
	r.send(tagged(rdmap.OpWrite, b.mr.RKey, b.mr.Addr(0), true), []byte{1, 2, 3})
	_, term := r.terminate()
	if term.Err != iwerr.DDPInvalidMSNNoBuffer || !term.DDPHeaderIncluded || !bytes.Equal(term.DDPHeader, h.Append(nil)) {
		t.Fatalf("terminate %v with DDP header %x, want %v naming %x", term.Err, term.DDPHeader, iwerr.DDPInvalidMSNNoBuffer, h.Append(nil))
	}
	b.waitClosed()
}

// TestRCMergedImmOptionOff: without merge_send_imm a tagged Immediate Data
// is RFC 7306's: it takes a receive (the tag is data to RFC 7306).
func TestRCMergedImmOptionOff(t *testing.T) {
	srv, path := rcServer(t)
	b := newRCEnd(t, srv, path, rcOpts{})
	for i := range 2 {
		b.postRecv(uint64(i+1), b.mr.SGE(i*immSlot, immSlot))
	}
	p, _ := rcParams(true, false, 4, 4)
	r := connectRaw(t, b, p, false, 0)
	r.send(r.untagged(rdmap.OpImmediateData, 0, true), mergedImm(0x71))
	d := []byte("payload")
	r.send(r.untagged(rdmap.OpSend, 0, true), d)
	got := b.waitCQEs(b.rcq, 2, "option off")
	checkRecv(t, b, "immediate", got[0], wantRecv{wrid: 1, op: proto.WCRecv, imm: 0x71, hasImm: true})
	checkRecv(t, b, "send", got[1], wantRecv{wrid: 2, op: proto.WCRecv, data: d})
}

// TestRCMergedImmSend: a merging sender writes a Send with Immediate as the
// tagged Immediate Data (opcode 0x8 whatever the SE) then the Send (SE
// when solicited), on consecutive MSNs and FPDU for FPDU what a sender of
// those two messages writes; a Write with Immediate keeps RFC 7306's order
// and an untagged Immediate Data. Each work request completes once.
func TestRCMergedImmSend(t *testing.T) {
	srv, path := rcServer(t)
	a := newRCEnd(t, srv, path, rcOpts{mergeImm: true})
	rcFill(a.mr.Buf, 5)
	p, _ := rcParams(true, true, 4, 4)
	const mss = 1460
	r := connectRaw(t, a, p, true, mss)
	type frame struct {
		op      rdmap.Opcode
		payload []byte
	}
	var want []frame
	sizes := []int{100, 0, 5000, 1}
	for i, n := range sizes {
		e := proto.SQE{WRID: uint64(i + 1), Opcode: proto.WRSendWithImm, Flags: proto.SendSignaled, Imm: 0x100 + uint32(i)}
		op := rdmap.OpSend
		if i%2 == 1 {
			e.Flags |= proto.SendSolicited
			op = rdmap.OpSendSE
		}
		a.postSend(e, []proto.SGE{a.mr.SGE(i*8192, n)}, nil)
		want = append(want, frame{rdmap.OpImmediateData, mergedImm(0x100 + uint32(i))}, frame{op, a.mr.Buf[i*8192 : i*8192+n]})
	}
	a.postSend(proto.SQE{WRID: 9, Opcode: proto.WRWriteWithImm, Flags: proto.SendSignaled | proto.SendSolicited, Imm: 0x200,
		RKey: 0x55, RemoteAddr: 0x1000}, []proto.SGE{a.mr.SGE(0, 10)}, nil)
	var msn uint32
	for i, f := range want {
		msn++
		var got []byte
		for {
			h, rest, err := r.next()
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if h.Tagged || h.QN != rdmap.QNSend || h.MSN != msn || h.MO != uint32(len(got)) ||
				rdmap.Control(h.ULPControl).Opcode() != f.op {
				t.Fatalf("message %d: segment %+v, want opcode %v MSN %d MO %d", i, h, f.op, msn, len(got))
			}
			got = append(got, rest...)
			if h.Last {
				break
			}
		}
		if !bytes.Equal(got, f.payload) {
			t.Fatalf("message %d (%v): %d octets differ from the %d sent", i, f.op, len(got), len(f.payload))
		}
	}
	if h, rest, err := r.next(); err != nil || !h.Tagged || h.Stag != 0x55 || !bytes.Equal(rest, a.mr.Buf[:10]) {
		t.Fatalf("write %+v %v", h, err)
	}
	h, rest, err := r.next()
	if err != nil || h.Tagged || h.MSN != msn+1 || rdmap.Control(h.ULPControl).Opcode() != rdmap.OpImmediateDataSE ||
		!bytes.Equal(rest, immRaw(0x200)) {
		t.Fatalf("write's immediate data %+v %x %v", h, rest, err)
	}
	got := a.waitCQEs(a.scq, len(sizes)+1, "sends")
	for i, c := range got {
		wantID, wantOp := uint64(i+1), proto.WCSend
		if i == len(sizes) {
			wantID, wantOp = 9, proto.WCRDMAWrite
		}
		if c.Status != proto.WCSuccess || c.WRID != wantID || c.Opcode != wantOp {
			t.Fatalf("send completion %+v, want wrid %d %v", c, wantID, wantOp)
		}
	}
}

// TestRCMergedImmEngines: two merging engine QPs. Sends with Immediate
// (0 octets to several FPDUs, some solicited) mixed with Sends, Writes and
// Writes with Immediate, posted before the connection exists so that the
// sender batches many of them per writev (rc/txbatch.go): every message
// takes exactly one receive, in order, with its data, its length and its
// value; Writes with Immediate complete as WCRecvRDMAWithImm.
func TestRCMergedImmEngines(t *testing.T) {
	for _, mss := range []int{1460, 9000} {
		t.Run(fmt.Sprintf("mss=%d", mss), func(t *testing.T) { rcMergedImmEngines(t, mss) })
	}
}

func rcMergedImmEngines(t *testing.T, mss int) {
	const n = 200 // < rcCaps.MaxSendWR
	srv, path := rcServer(t)
	a := newRCEnd(t, srv, path, rcOpts{bufSize: 4 << 20, mergeImm: true})
	b := newRCEnd(t, srv, path, rcOpts{bufSize: 4 << 20, mergeImm: true})
	rcFill(a.mr.Buf, 8)
	var want []wantRecv
	merged, off := 0, 0
	for i := range n {
		size := i % 7 * 311
		if i%23 == 5 {
			size = 6000 + i
		}
		e := proto.SQE{WRID: uint64(i), Flags: proto.SendSignaled}
		sge := []proto.SGE{a.mr.SGE(off, size)}
		wr := wantRecv{wrid: uint64(len(want) + 1), op: proto.WCRecv, data: a.mr.Buf[off : off+size]}
		switch {
		case i%4 == 0 || i%23 == 5:
			e.Opcode, e.Imm = proto.WRSendWithImm, uint32(i)*0x01010101
			wr.imm, wr.hasImm = e.Imm, true
			merged++
			if i%8 == 0 {
				e.Flags |= proto.SendSolicited
				wr.se = true
			}
		case i%4 == 1:
			e.Opcode = proto.WRSend
		case i%4 == 2:
			e.Opcode, e.RKey, e.RemoteAddr = proto.WRRDMAWrite, b.mr.RKey, b.mr.Addr(2<<20+off%(1<<20))
			wr = wantRecv{}
		default:
			e.Opcode, e.Imm, e.RKey, e.RemoteAddr = proto.WRWriteWithImm, uint32(i), b.mr.RKey, b.mr.Addr(2<<20+off%(1<<20))
			wr = wantRecv{wrid: wr.wrid, op: proto.WCRecvRDMAWithImm, imm: e.Imm, hasImm: true}
		}
		a.postSend(e, sge, nil)
		if wr.wrid != 0 {
			want = append(want, wr)
		}
		off += size
	}
	for i := range want {
		b.postRecv(uint64(i+1), b.mr.SGE(i*immSlot, immSlot))
	}
	pi, pr := rcParams(true, false, 4, 4)
	connectRC(t, a, b, pi, pr, mss)
	got := b.waitCQEs(b.rcq, len(want), "receives")
	for i, w := range want {
		checkRecv(t, b, fmt.Sprintf("receive %d", i+1), got[i], w)
	}
	sent := a.waitCQEs(a.scq, n, "sends")
	for i, c := range sent {
		if c.Status != proto.WCSuccess || c.WRID != uint64(i) {
			t.Fatalf("send completion %d: %+v", i, c)
		}
	}
	if c := b.counters(); c["imm_held"] != int64(merged) || c["drop_no_recv"] != 0 {
		t.Fatalf("counters imm_held %d drop_no_recv %d, want %d and 0", c["imm_held"], c["drop_no_recv"], merged)
	}
}

// TestMergeSendImmRCOnly: merge_send_imm on a UD QP is refused (its Send
// with Immediate is one message already; RD takes the same check).
func TestMergeSendImmRCOnly(t *testing.T) {
	_, path := rcServer(t)
	n := newRCEnd(t, nil, path, rcOpts{})
	for _, typ := range []proto.QPType{proto.QPTypeUD} {
		req := proto.CreateQPRequest{PD: n.pd, Type: typ, SendCQ: n.scq.Handle, RecvCQ: n.rcq.Handle, Caps: rcCaps, MergeSendImm: true}
		_, err := n.c.Call(proto.OpCreateQP, req, nil)
		if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "merge_send_imm") {
			t.Fatalf("%v QP with merge_send_imm: %v, want EINVAL naming the option", typ, err)
		}
	}
}
