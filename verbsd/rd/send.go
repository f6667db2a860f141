package rd

import (
	"cmp"
	"encoding/binary"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"golang.org/x/sys/unix"
)

// wr is a send work request of an RD QP taken from the SQ: a copy of its
// SQE (consumed from the ring when taken), enough to rebuild any of its
// datagrams, and its progress.
type wr struct {
	seq       uint64
	wrid      uint64
	op        proto.SendOpcode // WRSend(WithImm), WRRDMARead, WRWriteRecord(WithImm) or an atomic
	signaled  bool
	peer      netip.AddrPort
	sges      []proto.SGE
	inline    []byte
	total     int
	segs      ddp.Segmenter
	msn       uint32
	sent      uint32 // segments handed to the state machine
	acked     uint32
	resolved  uint32 // segments acked or failed
	done      bool
	completed bool // its completion is posted (complete then drops it from wrs)
	fatal     bool // a local error: the QP goes to ERROR when it is the head
	status    proto.WCStatus
	term      uint32 // iWARP error of an error message (WCFlagTermValid)
	rreq      [rdmap.ReadRequestLen]byte
	sink      proto.SGE                    // Read: the one sink buffer
	placed    uint32                       // Read: response octets placed
	respFinal bool                         // Read: the last response segment arrived
	rec       rdmap.WriteRecord            // Write-Record: its header (MessageOffset set per segment)
	rkey      uint32                       // Write-Record: the target STag
	to        uint64                       // Write-Record: the tagged offset of the first octet
	areq      [rdmap.AtomicRequestLen]byte // atomic: its Atomic Request (rd/atomic.go)
	reqID     uint32                       // atomic: its Request Identifier
	imm       [rdmap.ImmediateDataLen]byte // Send / Write-Record with Imm: in every segment
}

// resp is an accepted RDMA Read Request being answered.
type resp struct {
	seq      uint64
	peer     netip.AddrPort
	srcStag  uint32
	srcTO    uint64
	segs     ddp.Segmenter
	sent     uint32
	resolved uint32
	dead     bool // the source went away or a datagram failed: send no more
	// Read-ahead of a source in process memory (readAhead): source
	// octets [bufOff, bufOff+len(buf)) of the response, read with one
	// access of the session's copier for many datagrams. nil: none (a
	// mapped source is sent from the mapping itself).
	proc   bool // the source is process memory (rnic/procmem.go)
	buf    []byte
	bufOff uint32
}

// readAheadSize is the most a Read Response reads ahead of its source in
// process memory at once: with 1448-octet datagrams one access of the
// copier (a hand-off to its goroutine, then a pread of /proc/PID/mem) for
// ~180 datagrams, where one per datagram made the copier the bottleneck
// of every large MPI message (docs/benchmarks.md, "MPI large messages").
const readAheadSize = 256 << 10

// maxFreeReadAhead bounds the read-ahead buffers a QP keeps for reuse.
const maxFreeReadAhead = 4

// respSource returns the source octets of segment s of p: from the
// read-ahead buffer when p's source is process memory and s lies ahead
// of what was sent (a retransmission of an older segment is looked up
// alone), else as LookupRemote returns them (this pass only).
func (e *Engine) respSource(q *QP, p *resp, s *ddp.Segment) ([]byte, rdmap.AccessFault) {
	lo, hi := uint64(s.Offset), uint64(s.Offset)+uint64(s.Len)
	if p.proc && s.Len > 0 {
		if lo >= uint64(p.bufOff) && hi <= uint64(p.bufOff)+uint64(len(p.buf)) {
			return p.buf[lo-uint64(p.bufOff) : hi-uint64(p.bufOff)], 0
		}
		if p.buf == nil || lo >= uint64(p.bufOff)+uint64(len(p.buf)) {
			if b := e.readAhead(q, p, s.Offset); b != nil {
				return b[:s.Len], 0
			}
		}
	}
	return q.LookupRemote(p.srcStag, p.srcTO+lo, uint64(s.Len), proto.AccessRemoteRead)
}

// readAhead reads p's source from offset off on, up to readAheadSize
// octets, into p's read-ahead buffer and returns it (nil on a fault: the
// caller looks the segment up alone and fails it as before). A buffer an
// access failed on is dropped, never reused: a stalled copier may still
// write into it (rnic/copier.go).
func (e *Engine) readAhead(q *QP, p *resp, off uint32) []byte {
	r := q.Rd
	n := min(uint64(readAheadSize), uint64(p.segs.MessageLen()-off))
	if p.buf != nil {
		// Datagrams of the batch being built may still point into the
		// old buffer: it is reused only after the batch went out
		// (transmit: the kernel copies at sendmmsg).
		r.retiredBufs = append(r.retiredBufs, p.buf[:cap(p.buf)])
		p.buf = nil
	}
	if k := len(r.freeBufs); k > 0 {
		p.buf, r.freeBufs = r.freeBufs[k-1], r.freeBufs[:k-1]
	} else {
		p.buf = make([]byte, readAheadSize)
	}
	b := p.buf[:n]
	if q.ReadRemote(b, p.srcStag, p.srcTO+uint64(off)) != 0 {
		p.buf = nil
		return nil
	}
	p.buf, p.bufOff = b, off
	return b
}

// dropReadAhead retires p's read-ahead buffer (p is done).
func (r *state) dropReadAhead(p *resp) {
	if p.buf != nil {
		r.retiredBufs = append(r.retiredBufs, p.buf[:cap(p.buf)])
	}
	p.buf = nil
}

// reuseReadAhead makes the retired read-ahead buffers free again once no
// datagram waiting to be sent points into them (after transmit), keeping
// at most maxFreeReadAhead.
func (r *state) reuseReadAhead() {
	for _, b := range r.retiredBufs {
		if len(r.freeBufs) < maxFreeReadAhead {
			r.freeBufs = append(r.freeBufs, b)
		}
	}
	clear(r.retiredBufs)
	r.retiredBufs = r.retiredBufs[:0]
}

// errMsg is an error message (untagged QN 2, opcode Terminate) being sent.
type errMsg struct {
	seq    uint64
	peer   netip.AddrPort
	body   []byte // DDP header + Terminate header (or Atomic Response)
	sent   bool
	done   bool
	atomic bool // an Atomic Response (rd/atomic.go), not an error message
}

// zeroPayload stands in for octets that cannot be read any more (the
// region was deregistered under a datagram the peer still expects).
var zeroPayload [dgram.MaxDatagramSize]byte

// RdMaxPayload is the payload of one RD datagram's DDP segment.
func (e *Engine) RdMaxPayload(tagged bool, ulpHeader int) int {
	return ddp.MaxPayload(dgram.MaxSegment(e.Cfg.DatagramSize, true), tagged, ulpHeader)
}

// take copies newly posted SQEs into r.wrs and consumes them from the
// ring at once (the copy has everything a datagram is rebuilt from), so
// that a work request waiting for one peer — a dead one retries for
// seconds — holds no ring slot that later work requests to other peers
// would need. At most the ring's depth of work requests are taken and not
// completed: with the ring, a QP has at most twice its SQ depth
// outstanding.
func (e *Engine) take(q *QP) bool {
	r := q.Rd
	v := q.SQView()
	head, idx, avail, err := v.Lookahead(q.SQ)
	if err != nil {
		e.count(q, rnic.CWRErrors, 1)
		e.errorQP(q, "send queue producer index is corrupt")
		return true
	}
	took := uint32(0)
	for ; took < avail && uint32(len(r.wrs)) < v.Depth(); took++ {
		w := r.newWR()
		w.seq = r.nextWR
		r.nextWR++
		e.prepare(q, w, v.At(head, idx, took))
		r.wrs = append(r.wrs, w)
		q.SQ.Advance()
	}
	if took > 0 {
		q.SQ.Release()
	}
	return took > 0
}

// maxFreeWRs bounds the finished work-request records an RD QP keeps for
// reuse, so that a steady stream of sends allocates none.
const maxFreeWRs = 64

// newWR returns a cleared work-request record, reused if one is free.
func (r *state) newWR() *wr {
	if n := len(r.freeWRs); n > 0 {
		w := r.freeWRs[n-1]
		r.freeWRs = r.freeWRs[:n-1]
		return w
	}
	return &wr{}
}

// freeWR takes back w, completed and out of r.wrs (nothing else points to
// a work request: tokens name it by sequence number, wrBySeq).
func (r *state) freeWR(w *wr) {
	if len(r.freeWRs) < maxFreeWRs {
		*w = wr{sges: w.sges[:0]}
		r.freeWRs = append(r.freeWRs, w)
	}
}

// prepare validates the SQE in slot into w; a bad one is done (fatal).
func (e *Engine) prepare(q *QP, w *wr, slot []byte) {
	r := q.Rd
	var raw [proto.SQEHeaderLen]byte
	copy(raw[:], slot)
	sqe := proto.GetSQE(raw[:])
	w.wrid, w.op, w.signaled = sqe.WRID, sqe.Opcode, sqe.Flags&proto.SendSignaled != 0 || q.SigAll
	fail := func(st proto.WCStatus) { w.done, w.fatal, w.status = true, true, st }
	known := sqe.Opcode == proto.WRSend || sqe.Opcode == proto.WRRDMARead || sqe.Opcode.WriteRecord() ||
		sqe.Opcode == proto.WRSendWithImm || sqe.Opcode.Atomic()
	if !sqe.KnownFlags() || sqe.Flags&proto.SendFence != 0 || !known {
		fail(proto.WCLocQPOpErr)
		return
	}
	dst, st := e.Destination(&sqe) // ud/dest.go: a bad one fails this work request only
	if st != proto.WCSuccess {
		w.done, w.status = true, st
		return
	}
	w.peer = dst
	r.setPeerKey(dst, sqe.QKey) // rd/keys.go
	inline := sqe.Flags&proto.SendInline != 0
	if sqe.Opcode.Atomic() {
		if st := e.prepareAtomic(q, w, &sqe, slot, inline); st != proto.WCSuccess { // rd/atomic.go
			fail(st)
		}
		return
	}
	if inline {
		if sqe.InlineLen > q.Caps.MaxInline || sqe.Opcode == proto.WRRDMARead {
			fail(proto.WCLocLenErr)
			return
		}
		w.inline = append([]byte(nil), slot[proto.SQEHeaderLen:proto.SQEHeaderLen+int(sqe.InlineLen)]...)
		w.total = len(w.inline)
	} else {
		if uint32(sqe.NumSGE) > q.Caps.MaxSendSGE || (sqe.Opcode == proto.WRRDMARead && sqe.NumSGE > 1) {
			fail(proto.WCLocLenErr)
			return
		}
		var sraw [proto.SGELen]byte
		for i := range int(sqe.NumSGE) {
			off := proto.SQEHeaderLen + i*proto.SGELen
			copy(sraw[:], slot[off:off+proto.SGELen])
			sge := proto.GetSGE(sraw[:])
			if _, _, st := q.Session.CheckSGE(sge, q.PD, sqe.Opcode == proto.WRRDMARead); st != proto.WCSuccess {
				fail(st)
				return
			}
			w.sges = append(w.sges, sge)
			w.total += int(sge.Length)
		}
	}
	if w.total > r.cfg.MaxMsg {
		fail(proto.WCLocLenErr)
		return
	}
	switch sqe.Opcode {
	case proto.WRSend, proto.WRSendWithImm:
		op, hdr := rdmap.OpSend, 0
		if sqe.Flags&proto.SendSolicited != 0 {
			op = rdmap.OpSendSE
		}
		if sqe.Opcode == proto.WRSendWithImm {
			// The datagram profile's Send with Immediate: opcode Immediate
			// Data, its 8 octets before the payload of every segment
			// (docs/atomics.md).
			op, hdr = rdmap.OpImmediateData, rdmap.ImmediateDataLen
			if sqe.Flags&proto.SendSolicited != 0 {
				op = rdmap.OpImmediateDataSE
			}
			w.imm = rdmap.MakeImmediateData(sqe.Imm).Raw
		}
		r.msn[rdmap.QNSend]++
		w.msn = r.msn[rdmap.QNSend]
		w.segs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(op)), 0, rdmap.QNSend, w.msn, uint32(w.total),
			e.RdMaxPayload(false, hdr))
	case proto.WRRDMARead:
		if len(w.sges) == 1 {
			w.sink = w.sges[0]
		}
		if w.total > 0 && uint64(w.total)-1 > math.MaxUint64-sqe.RemoteAddr {
			fail(proto.WCLocQPOpErr)
			return
		}
		rr := rdmap.ReadRequest{SinkStag: w.sink.LKey, SinkTO: w.sink.Addr, Size: uint32(w.total),
			SourceStag: sqe.RKey, SourceTO: sqe.RemoteAddr}
		rr.Append(w.rreq[:0])
		r.msn[rdmap.QNReadRequest]++
		w.msn = r.msn[rdmap.QNReadRequest]
		w.segs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpReadRequest)), 0, rdmap.QNReadRequest, w.msn,
			rdmap.ReadRequestLen, e.RdMaxPayload(false, 0))
	case proto.WRWriteRecord, proto.WRWriteRecordWithImm:
		if st := e.prepareWriteRecord(q, w, &sqe); st != proto.WCSuccess { // ud/wrec_send.go
			fail(st)
		}
	}
}

// poll runs the state machine's timers and acts on what it reports.
func (e *Engine) poll(q *QP, now time.Time) bool {
	r := q.Rd
	r.actions = r.ep.Poll(now, r.actions[:0])
	work := len(r.actions) > 0
	for i := range r.actions {
		e.action(q, &r.actions[i], now)
	}
	logDead(q, r.actions) // peer_log.go
	if e.drainBacklog(q, now) {
		work = true
	}
	return work
}

// pending is what poll left to send: retransmissions and ACKs.
type pending struct {
	peer netip.AddrPort
	tok  rd.Token
	h    dgram.RDHeader
}

func (e *Engine) action(q *QP, a *rd.Action, now time.Time) {
	r := q.Rd
	switch a.Kind {
	case rd.Retransmit:
		r.retx = append(r.retx, pending{a.Peer, a.Token, a.Header})
	case rd.SendAck:
		r.acks = append(r.acks, pending{a.Peer, a.Token, a.Header})
	case rd.Acked:
		if a.N > 1 {
			e.resolveAcked(q, a.Token, a.N) // llp/rd Config.AckedRuns
		} else {
			e.resolve(q, a.Token, true)
		}
	case rd.Failed:
		e.resolve(q, a.Token, false)
	case rd.DeliverHeld:
		e.deliverHeld(q, a.Peer, a.Header.Seq, now)
	case rd.PeerReset:
		e.resolve(q, a.Token, false)
	case rd.DiscardHeld:
		r.dropPeerRecv(a.Peer)
	}
}

// resolve records that a token was acknowledged (ok) or given up.
func (e *Engine) resolve(q *QP, tok rd.Token, ok bool) {
	r := q.Rd
	kind, seq, _ := splitToken(tok)
	switch kind {
	case tokWR:
		w := r.wrBySeq(seq)
		if w == nil {
			return
		}
		w.resolved++
		if ok {
			w.acked++
			if w.op != proto.WRRDMARead && !w.op.Atomic() && w.acked == w.segs.Count() && !w.done {
				w.done, w.status = true, proto.WCSuccess
			}
			return
		}
		if !w.done {
			r.count(retryExceeded, 1)
			w.done, w.status = true, proto.WCRetryExcErr
		}
	case tokResp:
		for _, p := range r.resps {
			if p.seq == seq {
				p.resolved++
				if !ok {
					p.dead = true
				}
			}
		}
	case tokErrMsg:
		for _, m := range r.errs {
			if m.seq == seq {
				m.done = true
			}
		}
	case tokRank:
		e.fpResolve(q, tok, ok) // rd/fastpath.go
	}
}

// resolveAcked is n calls of resolve(q, tok+i, true), i = 0..n-1 (an
// Acked action of llp/rd's AckedRuns: the datagrams of a run a cumulative
// ACK covered): the tokens of one work request or response — one
// sequence number, consecutive segments — are resolved at once, one
// look-up for them all.
func (e *Engine) resolveAcked(q *QP, tok rd.Token, n uint32) {
	r := q.Rd
	for n > 0 {
		kind, seq, seg := splitToken(tok)
		k := min(n, 1<<tokSegBits-seg) // the tokens left with this kind and sequence number
		switch kind {
		case tokWR:
			if w := r.wrBySeq(seq); w != nil {
				// resolve completes w when its acked count reaches
				// the segments' count: on the way from acked to
				// acked+k.
				c := w.segs.Count()
				reach := w.acked < c && w.acked+k >= c
				w.resolved += k
				w.acked += k
				if reach && w.op != proto.WRRDMARead && !w.op.Atomic() && !w.done {
					w.done, w.status = true, proto.WCSuccess
				}
			}
		case tokResp:
			for _, p := range r.resps {
				if p.seq == seq {
					p.resolved += k
				}
			}
		default:
			for i := range k {
				e.resolve(q, tok+rd.Token(i), true)
			}
		}
		tok += rd.Token(k)
		n -= k
	}
}

// wrBySeq finds the work request seq among those not completed (wrs is
// in sequence order, with gaps where work requests completed out of
// order).
func (r *state) wrBySeq(seq uint64) *wr {
	i, ok := slices.BinarySearchFunc(r.wrs, seq, func(w *wr, s uint64) int { return cmp.Compare(w.seq, s) })
	if !ok {
		return nil
	}
	return r.wrs[i]
}

// wrCanSend reports whether w (segments left to send) may send its next
// segment now: its peer's window is open and, for a Read not yet started,
// the ORD allows one more.
func (r *state) wrCanSend(w *wr) bool {
	if w.op.ReadOrAtomic() && w.sent == 0 && r.readsOut >= r.cfg.ORD {
		return false
	}
	return r.ep.CanSend(w.peer)
}

// toSend reports whether w has segments to send.
func (w *wr) toSend() bool { return !w.done && w.sent < w.segs.Count() }

// sendable reports whether new DATA is waiting for an open window.
func (r *state) sendable() bool {
	if len(r.retx) > 0 || len(r.acks) > 0 {
		return true
	}
	for _, m := range r.errs {
		if !m.sent && r.ep.CanSend(m.peer) {
			return true
		}
	}
	for _, p := range r.resps {
		if !p.dead && p.sent < p.segs.Count() && r.ep.CanSend(p.peer) {
			return true
		}
	}
	r.blocked.reset()
	for _, w := range r.wrs {
		if w.fatal {
			return false // the QP fails there
		}
		if !w.toSend() {
			continue
		}
		if r.blocked.has(w.peer) {
			continue
		}
		if r.wrCanSend(w) {
			return true
		}
		r.blocked.add(w.peer)
	}
	return false
}

// batch builds one sendmmsg vector of RD datagrams in e.sb.
type batch struct {
	e    *ud.Engine
	q    *QP
	n    int
	full bool
}

// add appends one datagram: the key header (the peer's Q_Key as q knows
// it, q's own), h, the DDP header dh, an optional RDMAP header, payload
// pieces; crc per the QP.
func (b *batch) add(peer netip.AddrPort, h *dgram.RDHeader, dh *ddp.Header, ulp []byte, pieces [][]byte) bool {
	r := b.q.Rd
	if b.n == maxBatch {
		b.full = true
		return false
	}
	dlen := dgram.KeyHeaderLen + dgram.RDHeaderLen + crc32c.Size + len(ulp)
	if dh != nil {
		dlen += dh.Len()
	}
	for _, p := range pieces {
		dlen += len(p)
	}
	if !b.e.Sb.Fits(peer, dlen, 2+len(pieces), b.e.Cfg.PollBatch) {
		b.full = true
		return false
	}
	sc := r.scratch[b.n*scratchStride : (b.n+1)*scratchStride : (b.n+1)*scratchStride]
	hdr := dgram.Keys{QKey: r.peerKey(peer), SrcQKey: b.q.Qkey}.Append(sc[:0])
	hdr = h.Append(hdr)
	if dh != nil {
		hdr = dh.Append(hdr)
	}
	hdr = append(hdr, ulp...)
	var c uint32
	if !b.q.NoCRC {
		c = crc32c.Update(0, hdr)
		for _, p := range pieces {
			c = crc32c.Update(c, p)
		}
	}
	trailer := sc[len(hdr) : len(hdr)+crc32c.Size]
	binary.LittleEndian.PutUint32(trailer, c)
	b.e.Sb.Push(peer, hdr, pieces, trailer, ud.DgramRef{})
	b.n++
	return true
}

// build appends the DATA datagram of token tok with RD header h.
func (e *Engine) build(b *batch, peer netip.AddrPort, tok rd.Token, h *dgram.RDHeader) bool {
	q := b.q
	r := q.Rd
	kind, seq, seg := splitToken(tok)
	switch kind {
	case tokWR:
		w := r.wrBySeq(seq)
		if w == nil {
			return true // resolved meanwhile
		}
		s := w.segs.Segment(seg)
		if w.op == proto.WRRDMARead {
			return b.add(peer, h, &s.Header, w.rreq[:], nil)
		}
		if w.op.Atomic() {
			// Longer than the scratch's room for an RDMAP header: a piece.
			return b.add(peer, h, &s.Header, nil, append(e.Pieces[:0], w.areq[:]))
		}
		var ulp []byte
		if w.op == proto.WRSendWithImm {
			ulp = w.imm[:]
		}
		if w.op.WriteRecord() {
			var rh [rdmap.WriteRecordImmLen]byte
			ulp = w.writeRecordHeader(rh[:0], s.Offset) // ud/wrec_send.go
		}
		pieces := e.payload(q, w, int(s.Offset), s.Len)
		return b.add(peer, h, &s.Header, ulp, pieces)
	case tokResp:
		for _, p := range r.resps {
			if p.seq != seq {
				continue
			}
			s := p.segs.Segment(seg)
			mem, fault := e.respSource(q, p, &s)
			if fault != 0 {
				mem = zeroPayload[:s.Len]
				p.dead = true
			}
			e.Pieces = append(e.Pieces[:0], mem)
			return b.add(peer, h, &s.Header, nil, e.Pieces)
		}
	case tokErrMsg:
		for _, m := range r.errs {
			if m.seq == seq {
				return b.add(peer, h, nil, nil, append(e.Pieces[:0], m.body))
			}
		}
	case tokRank:
		return e.fpBuild(b, peer, tok, h) // rd/fastpath.go: a datagram the rank sent itself
	}
	return true
}

// payload translates octets [off, off+n) of w's payload (for this pass);
// if the memory went away the datagram carries zeros and w fails.
func (e *Engine) payload(q *QP, w *wr, off, n int) [][]byte {
	if w.inline != nil {
		return append(e.Pieces[:0], w.inline[off:off+n])
	}
	r := q.Rd
	bufs := r.sgBufs[:0]
	// Only the part of each SGE inside [off, off+n): a process MR's source
	// is read from the process (rnic/stage.go), octets this datagram does not
	// carry are not.
	pos := 0
	for _, sge := range w.sges {
		lo, hi := max(off, pos), min(off+n, pos+int(sge.Length))
		pos += int(sge.Length)
		if lo >= hi {
			continue
		}
		part := proto.SGE{Addr: sge.Addr + uint64(lo-(pos-int(sge.Length))), Length: uint32(hi - lo), LKey: sge.LKey}
		b, st := q.Translate(part, q.PD, false)
		if st != proto.WCSuccess {
			if !w.done {
				w.done, w.status = true, st
			}
			return append(e.Pieces[:0], zeroPayload[:n])
		}
		bufs = append(bufs, b)
	}
	r.sgBufs = bufs[:0]
	e.Pieces = append(e.Pieces[:0], bufs...) // kept: its array is reused
	return e.Pieces
}

// send sends what is due: retransmissions, ACKs, error messages, Read
// Responses, then the send queue's new segments, as far as the windows
// allow, batched into sendmmsg calls.
func (e *Engine) send(q *QP, now time.Time) bool {
	q.Blocked = false
	work := false
	if q.State == proto.QPStateRTS && e.take(q) {
		work = true
	}
	for range 4 { // bounded work per pass
		b := &batch{e: e.Engine, q: q}
		e.Sb.Reset(q.Gso)
		e.fill(b, now)
		msgs := e.Sb.Finish()
		if len(msgs) == 0 {
			break
		}
		work = true
		e.transmit(q, msgs)
		q.Rd.reuseReadAhead()
		if !b.full || q.Blocked {
			break
		}
	}
	return work
}

// fill fills one batch.
func (e *Engine) fill(b *batch, now time.Time) {
	q := b.q
	r := q.Rd
	k := 0
	for ; k < len(r.retx) && !b.full; k++ {
		p := &r.retx[k]
		if !e.build(b, p.peer, p.tok, &p.h) {
			break
		}
	}
	r.retx = r.retx[:copy(r.retx, r.retx[k:])]
	k = 0
	for ; k < len(r.errs) && !b.full; k++ {
		m := r.errs[k]
		if m.sent || !r.ep.CanSend(m.peer) {
			continue
		}
		tok := makeToken(tokErrMsg, m.seq, 0)
		h, err := r.ep.Send(now, m.peer, tok)
		if err != nil {
			continue
		}
		m.sent = true
		if !b.add(m.peer, &h, nil, nil, append(e.Pieces[:0], m.body)) {
			r.deferDatagram(m.peer, tok, h)
			break
		}
	}
	k = 0
	for ; k < len(r.acks) && !b.full; k++ {
		p := &r.acks[k]
		if !b.add(p.peer, &p.h, nil, nil, nil) {
			break
		}
		r.count(acksOut, 1)
	}
	r.acks = r.acks[:copy(r.acks, r.acks[k:])]
	for _, p := range r.resps {
		e.respRun(b, p, now) // rd/sendrun.go: a run of its datagrams, where it may
		for !b.full && !p.dead && p.sent < p.segs.Count() && r.ep.CanSend(p.peer) {
			tok := makeToken(tokResp, p.seq, p.sent)
			h, err := r.ep.Send(now, p.peer, tok)
			if err != nil {
				break
			}
			p.sent++
			r.count(readBytesOut, int64(p.segs.Segment(p.sent-1).Len))
			if !e.build(b, p.peer, tok, &h) {
				r.deferDatagram(p.peer, tok, h)
			}
		}
	}
	if q.State != proto.QPStateRTS {
		return
	}
	// Work requests go out in posting order per peer; a peer whose window
	// is closed (or a Read the ORD holds back) stops only the later work
	// requests to that peer, not those to others (docs/rd.md).
	r.blocked.reset()
	for _, w := range r.wrs {
		if b.full {
			return
		}
		if w.fatal {
			return // the QP fails there
		}
		if !w.toSend() {
			continue
		}
		if r.blocked.has(w.peer) {
			continue
		}
		e.wrRun(b, w, now) // rd/sendrun.go: a run of its datagrams, where it may
		for !b.full && w.sent < w.segs.Count() && r.wrCanSend(w) {
			tok := makeToken(tokWR, w.seq, w.sent)
			h, err := r.ep.Send(now, w.peer, tok)
			if err != nil {
				break
			}
			if w.op.ReadOrAtomic() && w.sent == 0 {
				r.readsOut++ // Reads and atomics share the ORD
			}
			w.sent++
			if w.sent == w.segs.Count() && w.op != proto.WRRDMARead {
				e.count(q, rnic.CMessagesOut, 1)
				e.count(q, rnic.CBytesOut, int64(w.total))
			}
			if w.sent == w.segs.Count() && w.op.WriteRecord() && w == r.wrs[len(r.wrs)-1] {
				// A Write-Record completes when its last datagram is
				// acknowledged and the target has no reply to carry
				// that ACK: without asking, the initiator waited out
				// the peer's -rd-ack-delay (200 µs) for every
				// MPI_Put + flush (docs/rd.md "Limits and choices").
				// Only when nothing is queued behind it: a stream of
				// Write-Records asks once, at its end.
				h.Flags |= dgram.FlagAckReq
			}
			if !e.build(b, w.peer, tok, &h) {
				r.deferDatagram(w.peer, tok, h)
			}
		}
		if w.sent < w.segs.Count() {
			r.blocked.add(w.peer) // its later work requests wait for it
		}
	}
}

// deferDatagram queues a new DATA datagram the batch had no room for (it
// has its sequence number already) to go first in the next batch. Left to
// the state machine it would wait for a retransmission timeout: with 1 MiB
// batches the last datagram of every 1 MiB message did (RTO per message).
func (r *state) deferDatagram(peer netip.AddrPort, tok rd.Token, h dgram.RDHeader) {
	r.retx = append(r.retx, pending{peer, tok, h})
}

// transmit hands a batch to the kernel. Datagrams the kernel does not
// take are lost as far as the state machine knows: it retransmits them.
func (e *Engine) transmit(q *QP, msgs []unix.Mmsghdr) {
	off := 0
	for off < len(msgs) {
		sent, err := e.Sendmmsg(q.FD, msgs[off:])
		e.count(q, rnic.CSendCalls, 1)
		for m := off; m < off+max(sent, 0); m++ {
			refs := e.Sb.MsgDgrams(m)
			if len(refs) > 1 {
				e.count(q, rnic.CGSOSends, 1)
			}
			e.count(q, rnic.CDatagramsOut, int64(len(refs)))
		}
		off += max(sent, 0)
		if off == len(msgs) {
			return
		}
		if rnic.ClientSockBroken(q.QP.QP, err) { // rnic/qpsock.go: the client broke its socket
			e.SocketFailed(q.QP.QP, "sendmmsg", err)
			return
		}
		if err == nil || ud.TransientSendError(err) {
			q.Blocked = true
			e.count(q, rnic.CSendBlocked, 1)
			return
		}
		if len(e.Sb.MsgDgrams(off)) > 1 && ud.GSORefused(err) {
			q.Gso = false
			e.count(q, rnic.CGSOFallback, 1)
		}
		e.count(q, rnic.CSendErrors, 1)
		off++ // that message is lost
	}
}

// complete completes the work requests whose datagrams are all
// resolved, in posting order per peer (a work request waits for the
// earlier ones to its own peer only: one unreachable peer does not hold
// back the completions of the others, docs/rd.md); a fatal one (a local
// error) when every one before it has completed. It forgets finished
// responses and error messages.
func (e *Engine) complete(q *QP) bool {
	r := q.Rd
	work := false
	r.blocked.reset() // peers with an earlier work request not completed
	for _, w := range r.wrs {
		if w.completed {
			continue
		}
		if w.fatal {
			break
		}
		if !r.blocked.has(w.peer) && w.done && w.resolved >= w.sent {
			e.completeWR(q, w)
			w.completed = true
			work = true
			continue
		}
		r.blocked.add(w.peer)
	}
	if work { // forget the completed ones (take may take as many more)
		n := 0
		for _, w := range r.wrs {
			if w.completed {
				r.freeWR(w)
				continue
			}
			r.wrs[n] = w
			n++
		}
		clear(r.wrs[n:])
		r.wrs = r.wrs[:n]
	}
	if len(r.wrs) > 0 {
		if w := r.wrs[0]; w.fatal && w.done && w.resolved >= w.sent {
			r.wrs[0] = nil
			r.wrs = r.wrs[1:]
			e.count(q, rnic.CWRErrors, 1)
			e.PostCQE(q.Session, q.SendCQ, &proto.CQE{WRID: w.wrid, Status: w.status, Opcode: proto.WCSend, QPN: q.QPN})
			e.errorQP(q, "work request "+w.status.String()) // flush flushes the later ones
			return true
		}
	}
	n := 0
	for _, p := range r.resps {
		if (p.dead || p.sent == p.segs.Count()) && p.resolved >= p.sent {
			r.dropReadAhead(p)
			continue
		}
		r.resps[n] = p
		n++
	}
	clear(r.resps[n:])
	r.resps = r.resps[:n]
	n = 0
	for _, m := range r.errs {
		if m.done {
			if m.atomic {
				r.atomicOut--
			}
			continue
		}
		r.errs[n] = m
		n++
	}
	clear(r.errs[n:])
	r.errs = r.errs[:n]
	return work
}

// wcOpcode is the completion opcode of w.
func wcOpcode(w *wr) proto.WCOpcode { return rnic.WCOpcodeOf(w.op) }

// completeWR posts w's completion (if signaled or failed).
func (e *Engine) completeWR(q *QP, w *wr) {
	r := q.Rd
	if w.op.ReadOrAtomic() && w.sent > 0 {
		r.readsOut--
	}
	if w.status != proto.WCSuccess {
		e.count(q, rnic.CWRErrors, 1)
	}
	if w.signaled || w.status != proto.WCSuccess {
		cqe := proto.CQE{WRID: w.wrid, Status: w.status, Opcode: wcOpcode(w), ByteLen: uint32(w.total), QPN: q.QPN}
		if w.term != 0 {
			cqe.Term, cqe.Flags = w.term, proto.WCFlagTermValid
		}
		e.PostCQE(q.Session, q.SendCQ, &cqe)
	}
}
