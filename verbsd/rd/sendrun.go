package rd

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
)

// The send fast lane (docs/rd.md "Sending runs"). On an MTU-1500 path a
// 1 MiB message is over 700 datagrams, and the per-datagram path — one
// Endpoint.Send, one look-up of the work request or response by its
// token, one translation of its octets, one build of its headers by the
// encoders per datagram — cost about as much CPU as the kernel's UDP
// send. A run is the datagrams of one message that go out now in a row:
// llp/rd assigns their sequence numbers in one call (rd.SendRun), their
// source octets are translated once, and their headers are a template
// built once by the encoders with the fields that differ between
// segments written in: the RD Sequence Number and ACKREQ flag, the DDP
// L bit and MO or TO, a Write-Record's Message Offset. On the wire
// nothing changes, octet for octet (verbsd/e2e TestRDSendRunsWire), and
// every datagram stays a token of its own for the state machine: it is
// retransmitted and rebuilt alone by the per-datagram path (build).
//
// A run is sent only where it is the same as the per-datagram path: a
// Read Response whose source is not process memory (which has its
// read-ahead, respSource), a Send or Write-Record whose octets translate
// without a fault (a fault fails the work request datagram by datagram,
// payload); anything else goes datagram by datagram.

// runMin is the fewest datagrams worth a run.
const runMin = 2

// Offsets in a datagram's headers (docs/wire-format.md: key header, RD
// header, DDP header, RDMAP header) of the fields a run writes per
// datagram.
const (
	offRD       = dgram.KeyHeaderLen
	offRDFlags  = offRD + 1  // RD flags octet (ACKREQ)
	offRDSeq    = offRD + 12 // RD Sequence Number
	offDDP      = offRD + dgram.RDHeaderLen
	offDDPTO    = offDDP + 6  // tagged: TO (8 octets)
	offDDPMO    = offDDP + 14 // untagged: MO
	offWrecMO   = offDDP + ddp.TaggedHeaderLen + 8
	ddpLastFlag = 0x40 // the L bit of DDP control octet 0 (RFC 5041 §4.2)
)

// SetSendRuns turns the send fast lane of engine c's RD QPs on (the
// default) or off, for tests that compare it with the per-datagram path.
// Call it on c's engine thread.
func SetSendRuns(c *rnic.Engine, on bool) { engOf(c).noRuns = !on }

// runSpec is one run being built: the template and what changes per
// datagram.
type runSpec struct {
	run    rd.SentRun
	first  uint32 // segment index of the run's first datagram
	segs   *ddp.Segmenter
	tagged bool
	wrec   bool // a Write-Record: its header's Message Offset per segment
	ackReq bool // ACKREQ on the last datagram besides the window's (a Write-Record's end)
	parts  [][]byte
}

// runCount is how many datagrams of a message of segs, from segment
// first on, with dlen octets and nio iovecs each, may go in a run now:
// what the peer's window and the batch have room for, at least runMin,
// else 0. full: the batch is what stops the run short of the message's
// end (its next datagram would not fit).
func (e *Engine) runCount(b *batch, peer netip.AddrPort, segs *ddp.Segmenter, first uint32, dlen, nio int) (n int, full bool) {
	want := min(int(segs.Count()-first), b.q.Rd.ep.SendRoom(peer))
	if want < runMin {
		return 0, false
	}
	n = min(want, maxBatch-b.n)
	n = e.Sb.Room(peer, dlen, nio, e.Cfg.PollBatch, n)
	if n < runMin {
		return 0, false
	}
	return n, n < want
}

// respRun sends the next datagrams of Read Response p as one run, as
// many as the window and the batch allow; it does nothing where the
// per-datagram path must go on (fill's loop after it).
func (e *Engine) respRun(b *batch, p *resp, now time.Time) {
	q := b.q
	r := q.Rd
	if e.noRuns || b.full || p.dead || p.proc || p.sent >= p.segs.Count() {
		return
	}
	s0 := p.segs.Segment(p.sent)
	dlen := dgram.KeyHeaderLen + dgram.RDHeaderLen + ddp.TaggedHeaderLen + s0.Len + crc32c.Size
	n, full := e.runCount(b, p.peer, &p.segs, p.sent, dlen, 3)
	if n == 0 {
		return
	}
	last := p.segs.Segment(p.sent + uint32(n) - 1)
	lo, hi := uint64(s0.Offset), uint64(last.Offset)+uint64(last.Len)
	mem, fault := q.LookupRemote(p.srcStag, p.srcTO+lo, hi-lo, proto.AccessRemoteRead)
	if fault != 0 {
		return // datagram by datagram: the one that faults ends the response
	}
	run, err := r.ep.SendRun(now, p.peer, makeToken(tokResp, p.seq, p.sent), n)
	if err != nil || run.N == 0 {
		return
	}
	sp := runSpec{run: run, first: p.sent, segs: &p.segs, tagged: true, parts: append(r.runParts[:0], mem)}
	octets := e.buildRun(b, p.peer, &sp, nil)
	r.runParts = dropParts(sp.parts)
	p.sent += uint32(run.N)
	r.count(readBytesOut, int64(octets))
	b.full = full && run.N == n
}

// wrRun sends the next datagrams of work request w (a Send or a
// Write-Record, with or without Immediate Data) as one run, as fill's
// per-datagram loop would; it does nothing where that loop must go on.
func (e *Engine) wrRun(b *batch, w *wr, now time.Time) {
	q := b.q
	r := q.Rd
	if e.noRuns || b.full || w.done || w.sent >= w.segs.Count() {
		return
	}
	var ulp []byte
	var rh [rdmap.WriteRecordImmLen]byte
	tagged := false
	switch {
	case w.op == proto.WRSend:
	case w.op == proto.WRSendWithImm:
		ulp = w.imm[:]
	case w.op.WriteRecord():
		tagged = true
		ulp = w.writeRecordHeader(rh[:0], w.segs.Segment(w.sent).Offset) // rd/wrec_rd.go
	default:
		return // Reads and atomics: one datagram
	}
	s0 := w.segs.Segment(w.sent)
	nio := 3 + len(w.sges) // a datagram's pieces: at most one per SGE
	dlen := dgram.KeyHeaderLen + dgram.RDHeaderLen + s0.Header.Len() + len(ulp) + s0.Len + crc32c.Size
	n, full := e.runCount(b, w.peer, &w.segs, w.sent, dlen, nio)
	if n == 0 {
		return
	}
	last := w.segs.Segment(w.sent + uint32(n) - 1)
	parts, ok := e.runPayload(q, w, int(s0.Offset), int(last.Offset)+last.Len)
	if !ok {
		return // datagram by datagram: the one that faults fails w, payload
	}
	run, err := r.ep.SendRun(now, w.peer, makeToken(tokWR, w.seq, w.sent), n)
	if err != nil || run.N == 0 {
		return
	}
	sp := runSpec{run: run, first: w.sent, segs: &w.segs, tagged: tagged, wrec: w.op.WriteRecord(), parts: parts}
	w.sent += uint32(run.N)
	if w.sent == w.segs.Count() {
		e.count(q, rnic.CMessagesOut, 1)
		e.count(q, rnic.CBytesOut, int64(w.total))
		// A Write-Record's last datagram asks for the ACK when nothing is
		// queued behind it (fill).
		sp.ackReq = w.op.WriteRecord() && w == r.wrs[len(r.wrs)-1]
	}
	e.buildRun(b, w.peer, &sp, ulp)
	r.runParts = dropParts(sp.parts)
	b.full = full && run.N == n
}

// dropParts forgets the source octets of a finished run (their memory is
// the client's or the session's staging) and returns the array for reuse.
func dropParts(parts [][]byte) [][]byte {
	clear(parts)
	return parts[:0]
}

// runPayload translates octets [lo, hi) of w's payload, one slice per
// SGE they touch (kept in r.runParts); false if any does not translate.
func (e *Engine) runPayload(q *QP, w *wr, lo, hi int) ([][]byte, bool) {
	r := q.Rd
	parts := r.runParts[:0]
	if w.inline != nil {
		return append(parts, w.inline[lo:hi]), true
	}
	pos := 0
	for _, sge := range w.sges {
		a, z := max(lo, pos), min(hi, pos+int(sge.Length))
		start := pos
		pos += int(sge.Length)
		if a >= z {
			continue
		}
		part := proto.SGE{Addr: sge.Addr + uint64(a-start), Length: uint32(z - a), LKey: sge.LKey}
		m, st := q.Translate(part, q.PD, false)
		if st != proto.WCSuccess {
			r.runParts = dropParts(parts)
			return nil, false
		}
		parts = append(parts, m)
	}
	return parts, true
}

// buildRun adds the run's datagrams to the batch (which has room for
// them, runCount): the headers of the first built by the encoders, each
// next one a copy with its fields written in, its payload the next
// octets of sp.parts, its CRC32c over headers and payload (the payload's
// first read on this side: the kernel's copy then finds it in cache). It
// returns the payload octets.
func (e *Engine) buildRun(b *batch, peer netip.AddrPort, sp *runSpec, ulp []byte) int {
	q := b.q
	r := q.Rd
	s0 := sp.segs.Segment(sp.first)
	h0 := sp.run.Header(0)
	h0.Flags &^= dgram.FlagAckReq // set per datagram below
	var tmpl [scratchStride]byte
	t := dgram.Keys{QKey: r.peerKey(peer), SrcQKey: q.Qkey}.Append(tmpl[:0])
	t = h0.Append(t)
	t = s0.Header.Append(t)
	t = append(t, ulp...)
	hlen := len(t)
	part, at := 0, 0 // the next payload octet: sp.parts[part][at]
	octets := 0
	crc := !q.NoCRC
	pieces := e.Pieces[:0]
	for i := range sp.run.N {
		s := sp.segs.Segment(sp.first + uint32(i))
		sc := r.scratch[b.n*scratchStride : (b.n+1)*scratchStride : (b.n+1)*scratchStride]
		hdr := sc[:hlen]
		copy(hdr, t)
		binary.BigEndian.PutUint32(hdr[offRDSeq:], h0.Seq+uint32(i))
		if i == sp.run.N-1 && (sp.run.LastAckReq || sp.ackReq) {
			hdr[offRDFlags] |= byte(dgram.FlagAckReq)
		}
		if s.Header.Last {
			hdr[offDDP] |= ddpLastFlag
		} else {
			hdr[offDDP] &^= ddpLastFlag
		}
		if sp.tagged {
			binary.BigEndian.PutUint64(hdr[offDDPTO:], s.Header.TO)
		} else {
			binary.BigEndian.PutUint32(hdr[offDDPMO:], s.Header.MO)
		}
		if sp.wrec {
			binary.BigEndian.PutUint32(hdr[offWrecMO:], s.Offset)
		}
		pieces = pieces[:0]
		for need := s.Len; need > 0; {
			p := sp.parts[part]
			k := min(len(p)-at, need)
			pieces = append(pieces, p[at:at+k])
			need -= k
			if at += k; at == len(p) {
				part, at = part+1, 0
			}
		}
		var c uint32
		if crc {
			c = crc32c.Update(0, hdr)
			for _, p := range pieces {
				c = crc32c.Update(c, p)
			}
		}
		trailer := sc[hlen : hlen+crc32c.Size]
		binary.LittleEndian.PutUint32(trailer, c)
		e.Sb.Push(peer, hdr, pieces, trailer, ud.DgramRef{})
		b.n++
		octets += s.Len
	}
	e.Pieces = pieces[:0] // its array is reused
	return octets
}
