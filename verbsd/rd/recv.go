package rd

import (
	"errors"
	"iter"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"golang.org/x/sys/unix"
)

// inMsg is the Send being received from one peer: the receive it claimed
// (consumed from the ring when its first segment arrived; RD delivers a
// peer's segments in order, so one message per peer is in progress).
type inMsg struct {
	raw     []byte // copy of the RQE
	wrid    uint64
	msn     uint32
	got     uint32
	imm     uint32 // Send with Immediate (hasImm): the value
	hasImm  bool
	discard bool // too long: the receive completed with an error, drop the rest
	claimed bool // raw holds a receive not completed
}

// receive reads q's socket (recvmmsg into the slots' scratch: RD
// datagrams are copied to their destination after the state machine
// judged them) and handles every datagram.
func (e *Engine) receive(q *QP, now time.Time) bool {
	rb := e.Rb
	work := false
	budget := e.Cfg.PollBatch
	for budget > 0 {
		rb.Nrqe, rb.Used = 0, 0
		want := min(budget, ud.RecvSlots)
		got, err := ud.SysRecvmmsg(q.FD, rb.Prepare(want))
		if err != nil {
			if errors.Is(err, unix.EAGAIN) {
				q.Readable = false
			} else if q.ClientSock && !errors.Is(err, unix.EINTR) {
				e.SocketFailed(q.QP.QP, "recvmmsg", err) // rnic/qpsock.go: never the engine's
			}
			break
		}
		work = true
		budget -= got
		e.count(q, rnic.CRecvCalls, 1)
		rb.Received(got)
		e.judge(q, got, now)
		if got < want {
			q.Readable = false
			break
		}
	}
	return work
}

// judge handles every datagram of the first got slots of e.Rb: those
// that continue a run in the fast lane, the others one by one.
func (e *Engine) judge(q *QP, got int, now time.Time) {
	r := q.Rd
	for src, b := range e.datagrams(q, got, r.buf) {
		if r.run.active && e.runTake(q, src, b) { // rd/recv_run.go
			continue
		}
		e.runEnd(q)
		e.datagram(q, src, b, now)
	}
	e.runEnd(q)
}

// datagrams yields each datagram of the first got slots of e.rb (a
// GRO-coalesced buffer cut into its datagrams; truncated ones dropped),
// in place when it lies in one piece of its slot, else copied into buf,
// with its source; counted on q (nil: the daemon's
// counters only).
func (e *Engine) datagrams(q *QP, got int, buf []byte) iter.Seq2[netip.AddrPort, []byte] {
	return func(yield func(netip.AddrPort, []byte) bool) {
		for i := range got {
			s := &e.Rb.Slots[i]
			if s.Trunc {
				e.count(q, rnic.CDatagramsIn, 1)
				e.count(q, rnic.CDropTruncated, 1)
				continue
			}
			step := s.N
			if s.Gso > 0 && s.N > s.Gso {
				e.count(q, rnic.CGROCoalesced, 1)
				step = s.Gso
			}
			for off := 0; off < s.N; off += step {
				n := min(step, s.N-off)
				e.count(q, rnic.CDatagramsIn, 1)
				b := within(s.View, off, n)
				if b == nil {
					b = buf[:n]
					rnic.CopyRange(b, s.View, off)
				}
				if !yield(s.Src, b) {
					return
				}
			}
		}
	}
}

// within returns octets [off, off+n) of the concatenation of pieces when
// they lie in one piece (nil otherwise): every datagram of a GRO-coalesced
// slot but the first lies in its tail, and is judged there without a
// copy. Nothing keeps it past the yield (a held datagram is copied:
// holdCopy), and the slot is not received into again before the batch
// is done.
func within(pieces [][]byte, off, n int) []byte {
	for _, p := range pieces {
		if off < len(p) {
			if off+n <= len(p) {
				return p[off : off+n : off+n]
			}
			return nil
		}
		off -= len(p)
	}
	return nil
}

// datagram judges one RD datagram from src.
func (e *Engine) datagram(q *QP, src netip.AddrPort, b []byte, now time.Time) {
	r := q.Rd
	if q.State != proto.QPStateRTR && q.State != proto.QPStateRTS {
		e.count(q, rnic.CDropNotReady, 1)
		return
	}
	if k, err := dgram.ParseKeys(b); err == nil && k.QKey != q.Qkey {
		e.count(q, rnic.CDropQKey, 1) // not for this QP: nothing of it is acted upon
		return
	}
	d, err := dgram.ParseRD(b, !q.NoCRC)
	if err != nil {
		if errors.Is(err, dgram.ErrBadCRC) {
			e.count(q, rnic.CDropCRC, 1)
			badCRC(q, src, d.CRC) // rd/crc_log.go
		} else {
			r.count(dropFraming, 1)
		}
		return
	}
	r.learnPeerKey(src, d.Keys.SrcQKey) // rd/keys.go
	if d.RD.Type == dgram.RDAck {
		r.ep.Receive(now, src, d.RD, true)
		return
	}
	seg := d.Segment
	ready := e.ready(q, src, seg)
	if ready && !r.ep.InOrder(src, d.RD.Seq) && !r.storeRoom(len(seg)) {
		ready = false // out of order and the reorder store is full: the sender resends it
		r.count(reorderFull, 1)
	}
	switch r.ep.Receive(now, src, d.RD, ready) {
	case rd.Deliver:
		e.deliverSeq(q, src, d.RD.Seq, seg, now)
		e.runOpen(q, src, b, &d, now) // the next datagrams may continue it (rd/recv_run.go)
	case rd.Hold:
		r.held[heldKey{src, d.RD.Seq}] = r.holdCopy(seg)
		r.heldN++
	}
}

// needsRecv reports whether seg needs a posted receive to be delivered:
// it starts a Send (it claims a receive), or it is the last segment of a
// Write-Record (RD delivers a record whole and in order, so that segment
// completes it into the head receive: without one the completion would
// be lost, wrec_no_recv). Either then gets NOTREADY flow control.
// On a QP created with quiet_records a Write-Record without Immediate
// takes no receive (proto.CreateQPRequest.QuietRecords): its last segment
// is delivered whether or not one is posted.
func needsRecv(q *QP, seg []byte) bool {
	h, _, err := ddp.Parse(seg)
	if err != nil {
		return false
	}
	if h.Tagged {
		op := rdmap.Control(h.ULPControl).Opcode()
		return h.Last && op.IsWriteRecord() && !(q.QuietRecords && op == rdmap.OpWriteRecord)
	}
	return h.QN == rdmap.QNSend && h.MO == 0
}

// isRecord reports whether seg is a Write-Record segment.
func isRecord(seg []byte) bool {
	return len(seg) >= 2 && seg[0]&0x80 != 0 && rdmap.Control(seg[1]).Opcode().IsWriteRecord()
}

// ready reports whether the datagram seg from src could be delivered
// now: a Send's first segment and a Write-Record's last need a posted
// receive, a Read Request room among the responses, and nothing from src
// may wait in the backlog.
func (e *Engine) ready(q *QP, src netip.AddrPort, seg []byte) bool {
	if len(q.Rd.backlog[src]) > 0 {
		return false
	}
	return e.canDeliver(q, src, seg)
}

// canDeliver reports whether an in-order datagram from src can be acted
// on now: one that needs a receive needs a posted one, and a Read or
// Atomic Request (queue number 1, RFC 5040 §5.1, RFC 7306) room in the
// IRD. Datagrams released from the reorder store and the backlog pass the
// same test as those arriving in order: a held Read Request delivered past
// a full IRD was answered with a remote operation error (iwarp-perf -t rd
// read-bw, once in CI).
func (e *Engine) canDeliver(q *QP, src netip.AddrPort, seg []byte) bool {
	r := q.Rd
	if needsRecv(q, seg) {
		return e.recvAvailable(q, src, seg)
	}
	if len(seg) >= ddp.UntaggedHeaderLen && seg[0]&0x80 == 0 {
		if h, _, err := ddp.Parse(seg); err == nil && h.QN == rdmap.QNReadRequest {
			return len(r.resps)+r.atomicOut < r.cfg.IRD // Reads and atomics share the IRD
		}
	}
	return true
}

// recvAvailable reports whether seg (needsRecv) from src can have a
// receive: a Send claims one, a Write-Record completes into the ring's
// head.
func (e *Engine) recvAvailable(q *QP, src netip.AddrPort, seg []byte) bool {
	if m := q.Rd.inMsg(src); m != nil && m.claimed && !isRecord(seg) {
		return true // the abandoned message's receive is reused
	}
	n, err := q.RecvRing().Available()
	return err == nil && n > 0
}

// deliverHeld delivers a held datagram now in order (or queues it in the
// backlog if it needs a receive and none is posted).
func (e *Engine) deliverHeld(q *QP, peer netip.AddrPort, seq uint32, now time.Time) {
	r := q.Rd
	k := heldKey{peer, seq}
	seg, ok := r.held[k]
	if !ok {
		return
	}
	if len(r.backlog[peer]) > 0 || !e.canDeliver(q, peer, seg) {
		r.backlog[peer] = append(r.backlog[peer], k)
		r.count(backlogged, 1)
		return
	}
	delete(r.held, k)
	r.heldN--
	e.deliverSeq(q, peer, seq, seg, now)
	r.release(seg)
}

// drainBacklog delivers backlogged datagrams that can be acted on now
// (canDeliver).
func (e *Engine) drainBacklog(q *QP, now time.Time) bool {
	r := q.Rd
	work := false
	for peer, keys := range r.backlog {
		n := 0
		for n < len(keys) {
			seg := r.held[keys[n]]
			if !e.canDeliver(q, peer, seg) {
				break
			}
			delete(r.held, keys[n])
			r.heldN--
			e.deliverSeq(q, peer, keys[n].seq, seg, now)
			r.release(seg)
			n++
			work = true
		}
		if n == len(keys) {
			delete(r.backlog, peer)
		} else {
			r.backlog[peer] = keys[n:]
		}
	}
	return work
}

// dropPeerRecv forgets what peer was sending us (its sequence space was
// reset): held and backlogged datagrams.
func (r *state) dropPeerRecv(peer netip.AddrPort) {
	for k, seg := range r.held {
		if k.peer == peer {
			delete(r.held, k)
			r.heldN--
			r.release(seg)
		}
	}
	delete(r.backlog, peer)
}

// holdCopy copies an out-of-order segment for the reorder store, into a
// recycled buffer when one is free: at 1 % loss most datagrams pass
// through the store, and a fresh allocation for each was garbage at the
// line rate. The buffer's capacity is counted against the store's bounds
// (storeRoom).
func (r *state) holdCopy(seg []byte) []byte {
	var b []byte
	switch n := len(r.free); {
	case n > 0 && cap(r.free[n-1]) >= len(seg):
		b = r.free[n-1][:len(seg)]
		r.free[n-1] = nil
		r.free = r.free[:n-1]
		copy(b, seg)
	case len(seg) < r.dgramSize/2:
		b = append([]byte(nil), seg...) // small: not worth a full-size buffer
	default:
		b = append(make([]byte, 0, max(len(seg), r.dgramSize)), seg...)
	}
	r.account(cap(b))
	return b
}

// storeRoom reports whether an out-of-order segment of n octets fits in
// the reorder store: this QP's (-rd-reorder-qp-bytes) and the device's
// (-rd-reorder-bytes), counting a full datagram buffer as holdCopy may.
func (r *state) storeRoom(n int) bool {
	cost := n
	if n >= r.dgramSize/2 {
		cost = max(n, r.dgramSize)
	}
	return r.heldBytes+cost <= r.cfg.ReorderQPBytes && *r.store+cost <= r.cfg.ReorderBytes
}

// account adds n octets (negative: removes) to the reorder store of the
// QP and of the device.
func (r *state) account(n int) {
	r.heldBytes += n
	*r.store += n
}

// release returns a reorder-store buffer for reuse (deliver keeps no
// reference to a segment). At most maxFreeBytes are kept.
func (r *state) release(seg []byte) {
	r.account(-cap(seg))
	if (len(r.free)+1)*r.dgramSize <= maxFreeBytes && cap(seg) >= r.dgramSize {
		r.free = append(r.free, seg[:0])
	}
}

// dropHeld forgets the whole reorder store (the QP fails, restarts or
// goes away).
func (r *state) dropHeld() {
	clear(r.held)
	clear(r.backlog)
	r.heldN = 0
	r.account(-r.heldBytes)
}

// maxFreeBytes bounds the recycled reorder-store buffers of a QP.
const maxFreeBytes = 1 << 20

// deliverSeq delivers the DATA datagram seq from src: an error message
// about it holds back its acknowledgement (sendError).
func (e *Engine) deliverSeq(q *QP, src netip.AddrPort, seq uint32, seg []byte, now time.Time) {
	r := q.Rd
	r.curSeq, r.curValid = seq, true
	e.deliver(q, src, seg, now)
	r.curValid = false
}

// deliver handles one DATA segment delivered in order from src.
func (e *Engine) deliver(q *QP, src netip.AddrPort, seg []byte, now time.Time) {
	h, hl, err := ddp.Parse(seg)
	if err != nil || h.Version != ddp.Version {
		bad := iwerr.DDPUntaggedInvalidVersion
		if len(seg) > 0 && seg[0]&0x80 != 0 {
			bad = iwerr.DDPTaggedInvalidVersion
		}
		e.badMessage(q, src, bad, seg, hl)
		return
	}
	ctl := rdmap.Control(h.ULPControl)
	if ctl.Version() != rdmap.Version {
		e.badMessage(q, src, iwerr.RDMAPInvalidVersion, seg, hl)
		return
	}
	op := ctl.Opcode()
	if h.Tagged {
		switch op {
		case rdmap.OpReadResponse:
			e.placeResponse(q, src, &h, seg[hl:])
		case rdmap.OpWriteRecord, rdmap.OpWriteRecordImm:
			if err, ok := e.writeRecordRD(q, src, &h, seg, hl, now); !ok { // rd/wrec_rd.go
				e.sendError(q, src, err, seg[:hl], nil, len(seg))
			}
		default:
			e.badMessage(q, src, iwerr.RDMAPUnexpectedOpcode, seg, hl)
		}
		return
	}
	switch {
	case h.QN == rdmap.QNSend && (op == rdmap.OpSend || op == rdmap.OpSendSE):
		e.placeSend(q, src, &h, seg, hl, 0, op == rdmap.OpSendSE)
	case h.QN == rdmap.QNSend && (op == rdmap.OpImmediateData || op == rdmap.OpImmediateDataSE):
		e.placeSendImm(q, src, &h, seg, hl, op == rdmap.OpImmediateDataSE) // rd/atomic.go
	case h.QN == rdmap.QNReadRequest && op == rdmap.OpAtomicRequest:
		e.RdAtomicRequest(q, src, &h, seg, hl) // rd/atomic.go
	case h.QN == rdmap.QNAtomicResponse && op == rdmap.OpAtomicResponse:
		e.atomicResponse(q, src, &h, seg, hl) // rd/atomic.go
	case h.QN == rdmap.QNReadRequest && op == rdmap.OpReadRequest:
		e.readRequest(q, src, &h, seg, hl, now)
	case h.QN == rdmap.QNTerminate && op == rdmap.OpTerminate:
		e.errorIn(q, src, seg[hl:])
	case h.QN > rdmap.QNAtomicResponse:
		e.badMessage(q, src, iwerr.DDPInvalidQN, seg, hl)
	default:
		e.badMessage(q, src, iwerr.RDMAPUnexpectedOpcode, seg, hl)
	}
}

// badMessage drops a message in error, counts it and tells its sender.
func (e *Engine) badMessage(q *QP, src netip.AddrPort, err iwerr.Error, seg []byte, hl int) {
	q.Rd.count(badMessage, 1)
	var dh []byte
	if hl > 0 && hl <= len(seg) {
		dh = seg[:hl]
	}
	e.sendError(q, src, err, dh, nil, len(seg))
}

// sendError queues an error message (untagged QN 2, opcode Terminate,
// the RFC 5040 §4.8 Terminate header naming the offending segment) to
// peer, sent reliably. Never about an error message itself.
func (e *Engine) sendError(q *QP, peer netip.AddrPort, err iwerr.Error, ddpHdr, rdmaHdr []byte, segLen int) {
	r := q.Rd
	if len(ddpHdr) >= ddp.UntaggedHeaderLen && ddpHdr[0]&0x80 == 0 {
		if h, _, e2 := ddp.Parse(ddpHdr); e2 == nil && h.QN == rdmap.QNTerminate {
			return
		}
	}
	if len(r.errs) >= r.cfg.MaxErrorMessages {
		r.count(errMsgDropped, 1)
		return
	}
	e.runEnd(q) // llp/rd must have taken the datagrams delivered (rd/recv_run.go)
	if r.curValid {
		// Its sender must get this error message before the acknowledgement
		// that would complete its work request successfully.
		r.ep.HoldAcks(peer, r.curSeq, makeToken(tokErrMsg, r.nextErr, 0))
	}
	r.msn[rdmap.QNTerminate]++
	dh := ddp.Header{Last: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpTerminate)),
		QN: rdmap.QNTerminate, MSN: r.msn[rdmap.QNTerminate]}
	t := rdmap.TerminateFor(err, ddpHdr, rdmaHdr)
	t.SetSegmentLength(uint16(min(segLen, 0xffff)))
	body := dh.Append(nil)
	body = t.Append(body)
	r.errs = append(r.errs, &errMsg{seq: r.nextErr, peer: peer, body: body})
	r.nextErr++
	e.count(q, rnic.CErrorMsgsOut, 1)
}

// claim consumes the head receive for a Send from src into m.
func (e *Engine) claim(q *QP, m *inMsg) bool {
	c := q.RecvRing()
	slot, err := c.Peek()
	if err != nil {
		e.count(q, rnic.CWRErrors, 1)
		e.errorQP(q, "receive queue producer index is corrupt")
		return false
	}
	if slot == nil {
		return false
	}
	w := &e.recv // validated only: placeSend translates each segment's own octets
	if st := e.LoadRecvRange(q.QP, w, slot, 0, 0); st != proto.WCSuccess {
		e.FailWR(q.QP, q.RecvCQ, w.WRID, proto.WCRecv, st)
		return false
	}
	m.raw = append(m.raw[:0], slot...)
	m.wrid, m.claimed = w.WRID, true
	c.Advance()
	c.Release()
	q.Rd.claimed++
	e.SRQLimitCheck(q.QP.QP)
	return true
}

// completeRecv posts the completion of m's receive.
func (e *Engine) completeRecv(q *QP, src netip.AddrPort, m *inMsg, st proto.WCStatus, n uint32, solicited bool) {
	m.claimed = false
	q.Rd.claimed--
	flags := proto.WCFlagSrcValid
	if solicited {
		flags |= proto.WCFlagSolicited
	}
	var imm uint32
	if m.hasImm {
		flags |= proto.WCFlagImm
		imm = m.imm
	}
	if st == proto.WCSuccess {
		e.count(q, rnic.CMessagesIn, 1)
		e.count(q, rnic.CBytesIn, int64(n))
	}
	e.PostCQE(q.Session, q.RecvCQ, &proto.CQE{WRID: m.wrid, Status: st, Opcode: proto.WCRecv, Flags: flags, ByteLen: n,
		QPN: q.QPN, Src: src, Imm: imm})
}

// placeSend places a Send segment into the receive its message claimed;
// ulp octets of RDMAP header (a Send with Immediate's) follow the DDP
// header of hl octets.
func (e *Engine) placeSend(q *QP, src netip.AddrPort, h *ddp.Header, seg []byte, hl, ulp int, solicited bool) {
	e.placeSendTo(q, src, q.Rd.inMsg(src), h, seg, hl, ulp, solicited)
}

// placeSendTo is placeSend with src's message record m (r.inMsg(src),
// which the fast lane keeps: rd/recv_run.go).
func (e *Engine) placeSendTo(q *QP, src netip.AddrPort, m *inMsg, h *ddp.Header, seg []byte, hl, ulp int, solicited bool) {
	r := q.Rd
	payload := seg[hl+ulp:]
	if h.MO == 0 {
		single := m == nil && h.Last
		if m == nil {
			m = r.newInMsg()
			if !single {
				r.inMsgs[src] = m
			}
		}
		// A message of one segment (the common case of small Sends) is
		// claimed, placed and completed right here: its record never
		// enters inMsgs (no map insert and delete per message).
		if !m.claimed && !e.claim(q, m) {
			if single {
				r.endInMsg(src, m)
			}
			e.count(q, rnic.CDropNoRecv, 1)
			return
		}
		m.msn, m.got, m.discard = h.MSN, 0, false
		m.imm, m.hasImm = r.curImm, r.curHasImm
	} else if m == nil || m.msn != h.MSN || h.MO != m.got || (!m.claimed && !m.discard) {
		e.count(q, rnic.CDropBadSegment, 1)
		return
	}
	if m.discard {
		if h.Last {
			r.endInMsg(src, m)
		}
		return
	}
	// Only the octets this segment covers are translated (ud/recvrange.go):
	// a receive in process memory stages and writes just them, not its whole
	// buffer for every segment. The SGE slice is reused: no allocation per
	// message.
	w := &e.recv
	if st := e.LoadRecvRange(q.QP, w, m.raw, uint64(m.got), uint64(len(payload))); st != proto.WCSuccess {
		e.completeRecv(q, src, m, st, 0, solicited)
		r.endInMsg(src, m)
		e.errorQP(q, "receive work request "+st.String())
		return
	}
	end := uint64(m.got) + uint64(len(payload))
	if end > uint64(w.Total) {
		r.count(msgTooLong, 1)
		e.count(q, rnic.CRecvTooLong, 1)
		e.sendError(q, src, iwerr.DDPMessageTooLong, seg[:hl], nil, len(seg))
		e.completeRecv(q, src, m, proto.WCLocLenErr, uint32(min(end, 1<<32-1)), solicited)
		if m.discard = !h.Last; !m.discard {
			r.endInMsg(src, m)
		}
		return
	}
	scatterAt(w.Bufs, 0, payload)
	if e.Commit(w.Bufs, 0, len(payload)) != nil { // rnic/stage.go: the receive's process memory went away
		e.sendError(q, src, iwerr.RDMAPLocalCatastrophicError, seg[:hl], nil, len(seg))
		e.completeRecv(q, src, m, proto.WCLocProtErr, uint32(end), solicited)
		if m.discard = !h.Last; !m.discard {
			r.endInMsg(src, m)
		}
		e.errorQP(q, "a receive buffer's process memory was unmapped while registered")
		return
	}
	m.got = uint32(end)
	if h.Last {
		e.completeRecv(q, src, m, proto.WCSuccess, m.got, solicited)
		r.endInMsg(src, m)
	}
}

// maxFreeInMsgs bounds the receive-message records an RD QP keeps for
// reuse: a record lives only while a Send is arriving, so a QP talking to
// many peers does not keep one per peer it ever heard from (docs/memory.md).
const maxFreeInMsgs = 16

// inMsg returns src's message being received, or nil (without hashing src
// when no message is being received from anyone: small Sends, one segment
// each, never enter inMsgs).
func (r *state) inMsg(src netip.AddrPort) *inMsg {
	if len(r.inMsgs) == 0 {
		return nil
	}
	return r.inMsgs[src]
}

// newInMsg returns a cleared receive-message record, reused if one is free.
func (r *state) newInMsg() *inMsg {
	if n := len(r.freeMsgs); n > 0 {
		m := r.freeMsgs[n-1]
		r.freeMsgs = r.freeMsgs[:n-1]
		return m
	}
	return &inMsg{}
}

// endInMsg forgets src's finished message m (its receive completed and no
// segment of it is still to be discarded).
// A record of a one-segment message was never in inMsgs (placeSend), and
// src has no other: deleting src then is a no-op.
func (r *state) endInMsg(src netip.AddrPort, m *inMsg) {
	if len(r.inMsgs) > 0 {
		delete(r.inMsgs, src)
	}
	if len(r.freeMsgs) < maxFreeInMsgs {
		*m = inMsg{raw: m.raw[:0]}
		r.freeMsgs = append(r.freeMsgs, m)
	}
}

// scatterAt copies data into the concatenation of bufs at offset off.
func scatterAt(bufs [][]byte, off int, data []byte) {
	for _, b := range bufs {
		if len(data) == 0 {
			return
		}
		if off >= len(b) {
			off -= len(b)
			continue
		}
		n := copy(b[off:], data)
		data = data[n:]
		off = 0
	}
}

// readRequest validates an RDMA Read Request (as RC does: STag, PD,
// RemoteRead, bounds) and queues its response, or answers with an error
// message; the QP stays up either way.
func (e *Engine) readRequest(q *QP, src netip.AddrPort, h *ddp.Header, seg []byte, hl int, now time.Time) {
	r := q.Rd
	rr, _, err := rdmap.ParseReadRequest(seg[hl:])
	if err != nil || !h.Last || h.MO != 0 || len(seg) != hl+rdmap.ReadRequestLen {
		e.badMessage(q, src, iwerr.RDMAPOperationUnspecified, seg, hl)
		return
	}
	rh := seg[hl : hl+rdmap.ReadRequestLen]
	fault := rdmap.AccessFault(0)
	proc := false
	if int64(rr.Size) > int64(r.cfg.MaxMsg) {
		fault = rdmap.FaultBaseBounds
	} else {
		var m *rnic.MR
		m, fault = e.RemoteCheck(q.QP.QP, src, rr.SourceStag, rr.SourceTO, uint64(rr.Size), proto.AccessRemoteRead, now) // rnic/access_guard.go
		proc = fault == 0 && m.Proc != nil
	}
	if fault != 0 {
		r.count(accessErrors, 1)
		e.sendError(q, src, rnic.DgramAccessError, seg[:hl], rh, len(seg)) // one generic error (rnic/access_guard.go)
		return
	}
	if len(r.resps) >= r.cfg.IRD {
		e.sendError(q, src, iwerr.RDMAPOperationUnspecified, seg[:hl], rh, len(seg))
		return
	}
	segs, err := ddp.TaggedSegments(uint8(rdmap.MakeControl(rdmap.OpReadResponse)), rr.SinkStag, rr.SinkTO, rr.Size,
		e.RdMaxPayload(true, 0))
	if err != nil {
		e.badMessage(q, src, iwerr.RDMAPOperationUnspecified, seg, hl)
		return
	}
	r.resps = append(r.resps, &resp{seq: r.nextResp, peer: src, srcStag: rr.SourceStag, srcTO: rr.SourceTO, segs: segs, proc: proc})
	r.nextResp++
}

// placeResponse places a Read Response segment into the sink of the
// oldest outstanding Read to src (responses come back in request order).
func (e *Engine) placeResponse(q *QP, src netip.AddrPort, h *ddp.Header, payload []byte) {
	r := q.Rd
	if q.fpReadResponse(src, h, payload) { // the rank's own, taken over (rd/fastpath_req.go)
		return
	}
	var w *wr
	for _, x := range r.wrs {
		if x.op == proto.WRRDMARead && x.peer == src && x.sent > 0 && !x.done && !x.respFinal {
			w = x
			break
		}
	}
	if w == nil || h.Stag != w.sink.LKey || h.TO != w.sink.Addr+uint64(w.placed) ||
		uint64(w.placed)+uint64(len(payload)) > uint64(w.total) {
		r.count(dropResponse, 1)
		return
	}
	if len(payload) > 0 {
		dst, st := q.Translate(proto.SGE{Addr: h.TO, Length: uint32(len(payload)), LKey: h.Stag}, q.PD, true)
		if st != proto.WCSuccess {
			w.done, w.status, w.respFinal = true, st, true
			return
		}
		copy(dst, payload)
		if e.CommitOne(dst) != nil { // rnic/stage.go: the sink's process memory went away
			w.done, w.status, w.respFinal = true, proto.WCLocProtErr, true
			return
		}
	}
	w.placed += uint32(len(payload))
	if h.Last {
		w.respFinal = true
		w.done, w.status = true, proto.WCSuccess
		if int(w.placed) != w.total {
			w.status = proto.WCRemOpErr
		}
	}
}

// errorIn handles an error message from src: the work request it names
// completes with the error (the QP stays up); one naming nothing known is
// counted and raised as EventQPAccessError.
func (e *Engine) errorIn(q *QP, src netip.AddrPort, body []byte) {
	r := q.Rd
	e.count(q, rnic.CErrorMsgsIn, 1)
	t, _, err := rdmap.ParseTerminate(body)
	if err == nil && t.DDPHeaderIncluded {
		if oh, _, err := ddp.Parse(t.DDPHeader); err == nil && !oh.Tagged {
			if oh.QN == rdmap.QNReadRequest && q.fpReqRefused(src, oh.MSN, t.Err) { // rd/fastpath_req.go
				return
			}
			for _, w := range r.wrs {
				onQN := w.op == proto.WRSend || w.op == proto.WRSendWithImm
				if oh.QN == rdmap.QNReadRequest {
					onQN = w.op.ReadOrAtomic() // they share QN 1's MSNs
				}
				if w.peer == src && onQN && w.msn == oh.MSN && w.sent > 0 && !w.fatal && !w.completed {
					if !w.done || w.status == proto.WCSuccess {
						w.done, w.status, w.term = true, rnic.TermStatus(t.Err), rnic.TermWord(t.Err)
					}
					return
				}
			}
		} else if err == nil && oh.Tagged && r.writeRecordError(src, &oh, t.Err) { // ud/wrec_send.go
			return
		} else if err == nil && oh.Tagged && q.fpWriteRefused(src, &oh) { // rd/fastpath.go
			r.count(errMsgUnmatched, 1)
			e.errorQP(q, "the target refused a Write the rank sent itself (fast path): "+t.Err.Error()+
				"; it has no work request to complete with the error (docs/fastpath.md)")
			return
		}
	}
	r.count(errMsgUnmatched, 1)
	detail := "error message from " + src.String()
	if err == nil {
		detail += ": " + t.Err.Error()
	}
	q.Session.SendEvent(e.Engine.Engine, proto.Event{Type: proto.EventQPAccessError, Handle: q.Handle, Detail: detail})
}
