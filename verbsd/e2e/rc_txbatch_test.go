package e2e

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rc"
	"golang.org/x/sys/unix"
)

// TestRCBatchWire posts a mix of small and medium work requests (Sends
// inline and gathered, Send with Solicited Event and with Invalidate,
// Writes, Reads, Send and Write with Imm) before the connection exists,
// so that the engine finds them all at once and writes the FPDUs of many
// of them per writev (rc/txbatch.go); the sockets are small so that
// with block, the messages are larger and the raw peer reads nothing
// until the engine finds its socket full, so that writes come back short
// inside batches that span several messages. The raw peer reads the stream
// and compares it octet for octet with the FPDUs framed one message at a
// time by an independent mpa.Sender (headers, MSNs, markers, CRCs); it
// answers the Reads, and every work request completes, successfully and
// in posting order. Without block, send_calls (writev calls) shows the
// batching: at most one per four messages, where every message took at
// least one writev before.
func TestRCBatchWire(t *testing.T) {
	for _, block := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			t.Run(fmt.Sprintf("markers=%v/block=%v", markers, block), func(t *testing.T) { rcBatchWire(t, markers, block) })
		}
	}
}

func rcBatchWire(t *testing.T, markers, block bool) {
	const n = 240 // < rcCaps.MaxSendWR
	srv, path := rcServer(t)
	a := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 20})
	rcFill(a.mr.Buf, 3)
	p, _ := rcParams(true, markers, 4, 4)

	// An EMSS of 4000 (fixed: loopback's MSS is larger): a batch holds up
	// to 4000 octets of FPDUs, and the medium messages take three.
	const mss = 4000
	maxT, maxU := ddp.MaxPayload(mpa.MULPDU(mss, markers), true, 0), ddp.MaxPayload(mpa.MULPDU(mss, markers), false, 0)
	exp := mpa.NewSender(true, markers)
	var want []byte
	var msn [3]uint32
	emit := func(segs ddp.Segmenter, payload []byte) {
		for i := range segs.Count() {
			s := segs.Segment(i)
			want = exp.AppendFPDU(want, s.Header.Append(nil), payload[s.Offset:int(s.Offset)+s.Len])
		}
	}
	untagged := func(op rdmap.Opcode, inv uint32, qn uint32, payload []byte) {
		msn[qn]++
		segs, _ := ddp.UntaggedSegments(uint8(rdmap.MakeControl(op)), inv, qn, msn[qn], uint32(len(payload)), maxU)
		emit(segs, payload)
	}
	type read struct{ sink, src, size int }
	var reads []read
	off := 0
	for i := range n {
		size := 1 + i%97
		if block {
			size = 1 + i%97*8
		}
		if i%40 == 7 || block && i%10 == 7 {
			size = 9000 + i // three FPDUs, more than the sockets' buffers
		}
		buf := a.mr.Buf[off : off+size]
		e := proto.SQE{WRID: uint64(i), Flags: proto.SendSignaled}
		var sges []proto.SGE
		var inline []byte
		switch {
		case i%60 == 30: // a Read of what we wrote; the raw peer answers it
			e.Opcode, e.RKey, e.RemoteAddr = proto.WRRDMARead, 0x77, uint64(1<<20+off)
			sges = []proto.SGE{a.mr.SGE(512<<10+off, size)}
			rr := rdmap.ReadRequest{SinkStag: a.mr.LKey, SinkTO: a.mr.Addr(512<<10 + off), Size: uint32(size), SourceStag: 0x77, SourceTO: uint64(1<<20 + off)}
			untagged(rdmap.OpReadRequest, 0, rdmap.QNReadRequest, rr.Append(nil))
			reads = append(reads, read{512<<10 + off, off, size})
		case i%50 == 4:
			e.Opcode, e.Imm = proto.WRSendWithImm, uint32(i)
			sges = []proto.SGE{a.mr.SGE(off, size)}
			untagged(rdmap.OpSend, 0, rdmap.QNSend, buf)
			untagged(rdmap.OpImmediateData, 0, rdmap.QNSend, immRaw(uint32(i)))
		case i%50 == 29:
			e.Opcode, e.Imm, e.RKey, e.RemoteAddr = proto.WRWriteWithImm, uint32(i), 0x55, uint64(off)
			e.Flags |= proto.SendSolicited
			sges = []proto.SGE{a.mr.SGE(off, size)}
			segs, _ := ddp.TaggedSegments(uint8(rdmap.MakeControl(rdmap.OpWrite)), 0x55, uint64(off), uint32(size), maxT)
			emit(segs, buf)
			untagged(rdmap.OpImmediateDataSE, 0, rdmap.QNSend, immRaw(uint32(i)))
		case i%5 == 0 && size <= int(rcCaps.MaxInline):
			e.Opcode, inline = proto.WRSend, buf
			untagged(rdmap.OpSend, 0, rdmap.QNSend, buf)
		case i%5 == 1 && size > 1:
			e.Opcode = proto.WRSend
			sges = []proto.SGE{a.mr.SGE(off, 1), a.mr.SGE(off+1, size-1)}
			untagged(rdmap.OpSend, 0, rdmap.QNSend, buf)
		case i%5 == 2:
			e.Opcode, e.RKey, e.RemoteAddr = proto.WRRDMAWrite, 0x55, uint64(off)
			sges = []proto.SGE{a.mr.SGE(off, size)}
			segs, _ := ddp.TaggedSegments(uint8(rdmap.MakeControl(rdmap.OpWrite)), 0x55, uint64(off), uint32(size), maxT)
			emit(segs, buf)
		case i%5 == 3:
			e.Opcode, e.Flags = proto.WRSend, e.Flags|proto.SendSolicited
			sges = []proto.SGE{a.mr.SGE(off, size)}
			untagged(rdmap.OpSendSE, 0, rdmap.QNSend, buf)
		default:
			e.Opcode, e.InvStag = proto.WRSendInvalidate, 0x1000+uint32(i)
			sges = []proto.SGE{a.mr.SGE(off, size)}
			untagged(rdmap.OpSendInvalidate, 0x1000+uint32(i), rdmap.QNSend, buf)
		}
		a.postSend(e, sges, inline)
		off += size
	}
	if off > 512<<10 {
		t.Fatalf("test bug: %d octets posted", off)
	}

	// Only now the connection: every work request is on the SQ.
	c1, c2 := netPair(t)
	if err := c2.SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	fd := fdOf(t, c1)
	a.attach(fd, p, true, mss)
	if err := a.engineQP(func(q *rc.QP) error {
		return unix.SetsockoptInt(q.Conn.Fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096)
	}); err != nil {
		t.Fatal(err)
	}
	r := &rawPeer{t: t, conn: c2, snd: mpa.NewSender(true, markers), crc: true, markers: markers}

	// With block, nothing is read until the engine finds the socket full
	// (some 300 KiB are posted, the sockets hold a few).
	// The small socket buffers make the blocking variant slow (seconds
	// under -race): its bounds scale with IWARPD_TEST_TIMEOUT_SCALE.
	deadline := time.Now().Add(scaled(3 * rcWait))
	for i := 0; block && a.counters()["send_blocked"] == 0; i++ {
		if i > 10000 || time.Now().After(deadline) {
			// attach forces a 16 MiB send buffer (setRCBuffers) before
			// the test can shrink it: on a busy machine the engine may
			// write everything in between. A precondition not met, not a
			// wrong behaviour (seen once in CI); the other variants ran.
			t.Skip("the engine wrote every message before the send buffer was shrunk: the socket never filled this run")
		}
		time.Sleep(time.Millisecond)
	}
	got := make([]byte, 0, len(want))
	buf := make([]byte, 64<<10)
	deadline = time.Now().Add(scaled(3 * rcWait))
	for i := 0; len(got) < len(want); i++ {
		if i > 1_000_000 || time.Now().After(deadline) {
			t.Fatalf("raw peer: %d of %d octets", len(got), len(want))
		}
		c2.SetReadDeadline(deadline)
		k, err := c2.Read(buf[:min(len(buf), len(want)-len(got))])
		got = append(got, buf[:k]...)
		if err != nil {
			t.Fatalf("raw peer after %d of %d octets: %v", len(got), len(want), err)
		}
	}
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		t.Fatalf("the stream differs from one-message-at-a-time framing at octet %d of %d", i, len(want))
	}
	// Answer the Reads (in order): their completions free the others'.
	for _, rd := range reads {
		r.send(tagged(rdmap.OpReadResponse, a.mr.LKey, a.mr.Addr(rd.sink), true), a.mr.Buf[rd.src:rd.src+rd.size])
	}
	for i, c := range a.waitCQEs(a.scq, n, "sends") {
		if c.Status != proto.WCSuccess || c.WRID != uint64(i) {
			t.Fatalf("CQE %d: %+v", i, c)
		}
	}
	for _, rd := range reads {
		checkBytes(t, "read", a.mr.Buf[rd.sink:rd.sink+rd.size], a.mr.Buf[rd.src:rd.src+rd.size])
	}
	cs := a.counters()
	t.Logf("messages_out %d, send_calls %d, send_blocked %d", cs["messages_out"], cs["send_calls"], cs["send_blocked"])
	if cs["messages_out"] < n || !block && cs["send_calls"]*4 > cs["messages_out"] {
		t.Fatalf("messages_out %d in %d writev calls: not batched", cs["messages_out"], cs["send_calls"])
	}
}

func immRaw(v uint32) []byte {
	d := rdmap.MakeImmediateData(v)
	return d.Raw[:]
}
