package rc

import (
	"errors"
	"math"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// The RC send side. One message is current: a Read Response (first,
// bounded by IRD), else the SQ head; the SQ messages behind it may be
// started early so that their FPDUs share its writev (rc/txbatch.go).
// Each DDP segment is one FPDU of at most MULPDU octets (by default one
// TCP segment). The FPDUs that are ready (up to the EMSS, txMaxFPDUs
// FPDUs and txMaxIOV iovecs) are written with one writev: with the MPA
// CRC on, from the whole FPDUs built one after another in the connection's
// bounce buffer (one copy of the payload, one iovec: rc/txcopy.go); with
// it off, from [length | DDP header | registered memory... | PAD+CRC]...
// (mpa.Sender.AppendVec: no payload copy). No more than one batch's
// framing is held. A short write
// accounts for the FPDUs it finished and resumes at the exact octet of the
// one it cut; EAGAIN registers EPOLLOUT and stops the QP's sending until
// the socket drains (back-pressure: nothing is buffered beyond the socket).
//
// Send and Write work requests complete when their last octet is written
// into the socket (as siw does): DESIGN.md's "when the LLP has delivered
// them" is approximated by TCP having accepted them. A Read completes when
// its whole Read Response is placed. Completions are posted in posting
// order (pending).

type txKind uint8

const (
	txNone     txKind = iota
	txSQ              // a send work request
	txReadResp        // the Read Response of irq's head
	txRTR             // the peer-to-peer RTR message
)

// msg is one message's transmit state.
type msg struct {
	kind     txKind
	wrOp     proto.SendOpcode
	useIn    bool // payload is the inline copy
	Sges     []proto.SGE
	inline   []byte
	rreq     [rdmap.ReadRequestLen]byte
	readSGE  proto.SGE
	areq     [rdmap.AtomicRequestLen]byte // an atomic's request (rc/atomic.go)
	reqID    uint32
	imm      [rdmap.ImmediateDataLen]byte // Send/Write with Imm: the Immediate Data message that follows
	immOp    rdmap.Opcode                 // its opcode (0: none)
	immPhase bool                         // sending the Immediate Data message
	immFirst bool                         // merged Send with Imm: the Immediate Data goes first (rc/imm.go)
	sendSegs ddp.Segmenter                // then the Send's segments
	total    int
	segs     ddp.Segmenter
	seg      uint32 // segment being sent
	seq      uint64 // the pending work request (txSQ)
	// payloads hold the message's octets [payLo, payHi) (txPayloads: a
	// window of a large message in process memory, else all of it).
	payloads     [][]byte
	payLo, payHi int
}

// tx is the message being transmitted (the embedded msg), the
// messages started after it (ahead, rc/txbatch.go) and the batch in
// flight.
type tx struct {
	msg
	fresh bool // payloads translated in this pass

	// ahead is a ring of SQ messages taken after the current one so that
	// their FPDUs share its writev; aHead is the oldest, aLen how many.
	ahead       []msg
	aHead, aLen int

	// The batch in flight: FPDUs of segments seg, seg+1, ... of the
	// message, starting at stream position startPos; written octets of it
	// are on the wire. wires[i] is the wire length of its FPDU i; done
	// octets (ndone FPDUs) of it are accounted for (fpduSent).
	inFPDU   bool
	startPos uint64
	written  int
	wire     int
	wires    []int
	done     int
	ndone    int
	hdrs     []byte // the batch's DDP headers
	ulp      [][]byte
	vec      [][]byte
	vecEnds  []int // vec[vecEnds[i-1]:vecEnds[i]] is the batch's FPDU i
	Scratch  []byte
	iov      []unix.Iovec

	// With the MPA CRC on, the batch's FPDUs are built whole in bounce
	// (payload copied) and checksummed and written from there, so that
	// the CRC covers exactly the octets on the wire (appendCopied).
	// A batch cut by a short write then resumes from its own copy
	// (owned) instead of being rebuilt from registered memory.
	bounce []byte
	owned  bool
}

// Batch limits of one writev; txWindow bounds the payload octets
// translated at once (txPayloads), at least one batch.
const (
	txWindow     = txBatchBytes
	txBatchBytes = 128 << 10
	txMaxFPDUs   = 64
	txMaxIOV     = 1024 // UIO_MAXIOV
)

func (t *tx) init(q *QP) {
	t.Sges = make([]proto.SGE, 0, max(q.Caps.MaxSendSGE, 1))
	t.inline = make([]byte, q.Caps.MaxInline)
	// Framing scratch: length, PAD, CRC of each FPDU and one marker per
	// 512 octets (and one split per FPDU).
	t.Scratch = make([]byte, 0, txMaxFPDUs*16+4*(txBatchBytes/mpa.MarkerInterval+2*txMaxFPDUs)+
		4*(mpa.MaxULPDU/mpa.MarkerInterval+2))
	t.hdrs = make([]byte, 0, txMaxFPDUs*ddp.UntaggedHeaderLen)
	t.wires = make([]int, 0, txMaxFPDUs)
}

func (t *tx) reset() {
	t.kind, t.inFPDU, t.written, t.payloads = txNone, false, 0, t.payloads[:0]
	t.dropAhead()
	t.wires, t.done, t.ndone = t.wires[:0], 0, 0
	t.owned = false
}

// startRTR queues the peer-to-peer RTR message (initiator).
func (t *tx) startRTR(c *conn, typ mpa.RTRType) {
	t.kind, t.seg, t.fresh, t.total = txRTR, 0, false, 0
	switch typ {
	case mpa.RTRWrite:
		// STag 1, not 0: hardware peers refuse STag 0 (protocol-notes §0.4).
		t.segs, _ = ddp.TaggedSegments(uint8(rdmap.MakeControl(rdmap.OpWrite)), 1, 0, 0, c.MaxTagged)
	case mpa.RTRRead:
		rr := rdmap.ReadRequest{SinkStag: 1, SourceStag: 1}
		rr.Append(t.rreq[:0])
		msn, _ := c.msn.NextMSN(rdmap.QNReadRequest)
		t.segs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpReadRequest)), 0, rdmap.QNReadRequest, msn,
			rdmap.ReadRequestLen, c.MaxUntagged)
		c.orq.push(read{internal: true, stag: 1})
	default: // RTRSend
		msn, _ := c.msn.NextMSN(rdmap.QNSend)
		t.segs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpSend)), 0, rdmap.QNSend, msn, 0, c.MaxUntagged)
	}
}

// send transmits FPDUs of q until the socket is full, there is nothing
// to send, or PollBatch FPDUs went out.
func (e *engine) send(q *QP) bool {
	c := q.Conn
	t := &c.Tx
	t.fresh = false
	work := false
	for range e.Cfg.PollBatch {
		if c.Fd < 0 {
			return true
		}
		switch c.phase {
		case terminating:
			if !t.inFPDU || t.written == 0 {
				if t.inFPDU {
					c.snd.SetStreamPos(t.startPos) // nothing of the batch went out
				}
				t.reset()
				return e.sendTerminate(q) || work
			}
		case draining, closed, idle:
			return work
		}
		if t.inFPDU && c.outOn && !c.outReady {
			// The socket was full: rebuilding (and checksumming again)
			// the cut FPDU before epoll reports room would be wasted.
			return work
		}
		if !t.inFPDU {
			ready, did := e.nextFPDU(q)
			work = work || did
			if !ready {
				return work
			}
		} else if !t.fresh && !t.owned && !e.buildFPDU(q) {
			return true
		}
		n, err := writev(c, t.vec, t.written)
		e.count(q, rnic.CSendCalls, 1)
		if n > 0 {
			t.written += n
			work = true
		}
		// Account for the FPDUs now completely written.
		for t.ndone < len(t.wires) && t.written-t.done >= t.wires[t.ndone] {
			t.done += t.wires[t.ndone]
			t.ndone++
			e.fpduSent(q)
		}
		if t.written == t.wire {
			t.inFPDU, t.owned = false, false
			t.wires, t.done, t.ndone = t.wires[:0], 0, 0
			c.setEpoll(e, c.rxOn, false)
			continue
		}
		// Stopped inside the batch: it resumes with the FPDU it cut, at
		// the octet it stopped at (rebuilt in a later pass, or from the
		// batch's own copy: keepCut).
		t.startPos += uint64(t.done)
		t.written -= t.done
		t.wire -= t.done
		if c.params.CRC {
			t.keepCut(c)
		} else {
			t.wires = t.wires[:0]
		}
		t.done, t.ndone = 0, 0
		t.fresh = false
		if err == nil || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			e.count(q, rnic.CSendBlocked, 1)
			c.outReady = false
			c.setEpoll(e, c.rxOn, true)
			return work
		}
		e.socketError(q, err)
		return true
	}
	return true
}

// writev writes vec, less its first skip octets, to c's socket with one
// writev (RawWritev: vec points at registered memory and c's buffers).
func writev(c *conn, vec [][]byte, skip int) (int, error) {
	iov := iovecs(c.Tx.iov[:0], vec, skip) // rc/txcopy.go
	c.Tx.iov = iov[:0]
	defer clear(iov) // no pointer into registered memory outlives the call
	for {
		n, err := rnic.RawWritev(c.Fd, iov)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}

// nextFPDU prepares the next FPDU to write, starting a new message if
// none is in progress. ready: an FPDU is built; did: something happened
// (a work request was taken, completed or failed).
func (e *engine) nextFPDU(q *QP) (ready, did bool) {
	c := q.Conn
	t := &c.Tx
	if t.kind == txNone {
		ok, d := e.startMessage(q)
		did = d
		if !ok {
			return false, did
		}
	}
	if !e.buildFPDU(q) {
		return false, true
	}
	return true, true
}

// buildFPDU builds the vector of the batch of FPDUs starting with the
// current segment, translating the payload first if it was not in this
// pass. An FPDU cut by a short write is rebuilt identically, alone (the
// sender's stream position is set back to its start). It returns false
// when the payload is gone (the QP is failing).
func (e *engine) buildFPDU(q *QP) bool {
	c := q.Conn
	t := &c.Tx
	if s := t.segs.Segment(t.seg); !t.fresh || int(s.Offset) < t.payLo || int(s.Offset)+s.Len > t.payHi {
		if !e.txPayloads(q, int(s.Offset)) {
			return false
		}
		t.fresh = true
	}
	last := t.segs.Count()
	resume := t.inFPDU
	if resume {
		// Resuming a cut FPDU: the socket was full, so rebuild (and
		// checksum again) that one only; the next batch follows.
		last = t.seg + 1
	} else {
		t.startPos = c.snd.StreamPos()
		t.written = 0
	}
	c.snd.SetStreamPos(t.startPos)
	t.vec, t.Scratch, t.hdrs = t.vec[:0], t.Scratch[:0], t.hdrs[:0]
	t.vecEnds, t.bounce, t.owned = t.vecEnds[:0], t.bounce[:0], false
	t.wires, t.done, t.ndone, t.wire = t.wires[:0], 0, 0, 0
	// FPDU alignment (RFC 5044 §8; Wireshark's dissector relies on it):
	// a batch beyond one TCP segment would be cut by TCP across FPDUs, so
	// a batch holds whole FPDUs up to the EMSS only.
	limit := min(txBatchBytes, c.Emss)
	all := t.appendSegs(c, &t.msg, t.seg, last, limit)
	if all && !resume && t.msgEnds(&t.msg) {
		e.batchAhead(q, limit) // rc/txbatch.go
	}
	t.inFPDU = true
	return true
}

// appendSegs appends the FPDUs of segments [from, last) of m to the batch
// while they fit (the first FPDU of a batch always does) and reports
// whether all did.
func (t *tx) appendSegs(c *conn, m *msg, from, last uint32, limit int) bool {
	for i := from; i < last; i++ {
		if len(t.wires) >= txMaxFPDUs {
			return false
		}
		s := m.segs.Segment(i)
		if len(t.wires) > 0 && t.wire+c.snd.WireLen(s.Header.Len()+s.Len) > limit {
			return false
		}
		nvec, nscratch, pos, nbounce := len(t.vec), len(t.Scratch), c.snd.StreamPos(), len(t.bounce)
		h0 := len(t.hdrs)
		t.hdrs = s.Header.Append(t.hdrs)
		ulp := append(t.ulp[:0], t.hdrs[h0:len(t.hdrs):len(t.hdrs)])
		if int(s.Offset)+s.Len > m.payHi && s.Len > 0 {
			return false // beyond the translated window: the next batch translates on
		}
		ulp = rnic.AppendRange(ulp, m.payloads, int(s.Offset)-m.payLo, s.Len)
		if c.params.CRC {
			t.appendCopied(c, ulp) // rc/txcopy.go
		} else {
			t.vec, t.Scratch = c.snd.AppendVec(t.vec, t.Scratch, ulp...)
		}
		t.ulp = ulp[:0]
		if len(t.wires) > 0 && len(t.vec) > txMaxIOV {
			t.vec, t.Scratch, t.hdrs = t.vec[:nvec], t.Scratch[:nscratch], t.hdrs[:h0]
			t.bounce = t.bounce[:nbounce]
			c.snd.SetStreamPos(pos)
			return false
		}
		t.vecEnds = append(t.vecEnds, len(t.vec))
		w := 0
		for _, p := range t.vec[nvec:] {
			w += len(p)
		}
		t.wires = append(t.wires, w)
		t.wire += w
	}
	return true
}

// msgEnds reports whether m's last segment ends its work request (an
// Immediate Data message follows a Send or Write with Imm, or precedes
// the Send of a merged Send with Imm).
func (t *tx) msgEnds(m *msg) bool { return m.immOp == 0 || m.immPhase != m.immFirst }

// txPayloads translates the current message's payload for this pass,
// from message offset from on: all of it, or for a Read Response or a
// Send/Write from registered memory a window of what one pass can send
// (PollBatch batches, at most txWindow octets; msgPayloads). In
// process memory every translation is a pread of /proc/PID/mem into a staging
// buffer (rnic/stage.go): translating the whole message in every pass read a
// 1 MiB Read Response once per pass (about 12 times over an MTU of 1500),
// the window reads each octet about once. The previous window's staging
// buffers, if staged in this pass, go back to the pool at once
// (e.unstage).
func (e *engine) txPayloads(q *QP, from int) bool {
	c := q.Conn
	t := &c.Tx
	window := max(min(txWindow, e.Cfg.PollBatch*min(txBatchBytes, c.Emss)), c.MaxTagged, c.MaxUntagged) // a segment at least
	if t.fresh {
		e.Unstage(t.payloads)
	}
	t.payloads, t.payLo, t.payHi = t.payloads[:0], 0, math.MaxInt
	switch t.kind {
	case txRTR:
		if t.segs.MessageLen() == rdmap.ReadRequestLen {
			t.payloads = append(t.payloads, t.rreq[:])
		}
	case txReadResp:
		r := c.Irq.head()
		if r.atomic {
			t.payloads = append(t.payloads, r.resp[:])
			return true
		}
		if r.size == 0 {
			return true
		}
		n := min(int(r.size)-from, window)
		b, f := q.LookupRemote(r.srcStag, r.srcTO+uint64(from), uint64(n), proto.AccessRemoteRead)
		if f != 0 {
			// Deregistered or invalidated since the request was accepted.
			e.txBroken(q)
			e.terminate(q, rdmap.RDMAPError(f), r.ddpHdr[:], r.rdmaHdr[:], ddp.UntaggedHeaderLen+rdmap.ReadRequestLen)
			return false
		}
		t.payloads, t.payLo, t.payHi = append(t.payloads, b), from, from+n
	case txSQ:
		if st := e.msgPayloads(q, &t.msg, from, window); st != proto.WCSuccess {
			e.txBroken(q)
			e.complete(q, t.seq, st)
			e.errorQP(q, "a send buffer was deregistered or invalidated while in use")
			return false
		}
	}
	return true
}

// msgPayloads translates the payload of the SQ message m into
// m.payloads; it only reads. The octets of registered memory translated
// are [from, from+n) of the message (m.payLo, m.payHi); the small payloads
// (immediate data, an atomic's or a Read's request, inline data) whole.
func (e *engine) msgPayloads(q *QP, m *msg, from, n int) proto.WCStatus {
	m.payloads, m.payLo, m.payHi = m.payloads[:0], 0, math.MaxInt
	switch {
	case m.immPhase:
		m.payloads = append(m.payloads, m.imm[:])
	case m.wrOp.Atomic():
		m.payloads = append(m.payloads, m.areq[:])
	case m.wrOp == proto.WRRDMARead:
		m.payloads = append(m.payloads, m.rreq[:])
	case m.useIn:
		m.payloads = append(m.payloads, m.inline[:m.total])
	default:
		hi := from + min(n, m.total-from)
		m.payLo, m.payHi = from, hi
		off := 0 // message offset of s
		for _, s := range m.Sges {
			sl := int(s.Length)
			if lo, end := max(from, off), min(hi, off+sl); lo < end {
				b, st := q.Translate(rnic.SubSGE(s, uint64(lo-off), uint64(end-lo)), q.PD, false)
				if st != proto.WCSuccess {
					return st
				}
				m.payloads = append(m.payloads, b)
			}
			off += sl
		}
	}
	return proto.WCSuccess
}

// txBroken drops the message in transmission. If part of an FPDU went
// out, the stream cannot be framed any more: the connection is closed at
// once (no Terminate can follow).
func (e *engine) txBroken(q *QP) {
	c := q.Conn
	partial := c.Tx.inFPDU && c.Tx.written > 0
	c.Tx.reset()
	if partial {
		e.close(q, ClosedSocketError, ": a message could not be completed")
	}
}

// startMessage picks the next message: a Read Response if one is due,
// else the SQ head (local invalidations complete on the way).
func (e *engine) startMessage(q *QP) (ok, did bool) {
	c := q.Conn
	t := &c.Tx
	if c.Irq.Len() > 0 && !c.Irq.head().started {
		r := c.Irq.head()
		r.started = true
		c.refreshEMSS() // between messages: the FPDU size may follow the MSS
		if r.atomic {
			msn, _ := c.msn.NextMSN(rdmap.QNAtomicResponse)
			t.segs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpAtomicResponse)), 0, rdmap.QNAtomicResponse, msn,
				rdmap.AtomicResponseLen, c.MaxUntagged)
			t.kind, t.seg, t.fresh, t.total = txReadResp, 0, false, 0
			return true, true
		}
		segs, err := ddp.TaggedSegments(uint8(rdmap.MakeControl(rdmap.OpReadResponse)), r.sinkStag, r.sinkTO, r.size, c.MaxTagged)
		if err != nil { // checked when the request arrived
			e.terminate(q, rdmap.RDMAPError(rdmap.FaultTOWrap), r.ddpHdr[:], r.rdmaHdr[:], -1)
			return false, true
		}
		t.kind, t.segs, t.seg, t.fresh, t.total = txReadResp, segs, 0, false, int(r.size)
		return true, true
	}
	if q.State != proto.QPStateRTS && q.State != proto.QPStateSQD || c.sqStalled {
		return false, false
	}
	for {
		if c.phase == closing && c.closeBudget == 0 {
			return false, did
		}
		slot, err := q.SQ.Peek()
		if err != nil {
			e.count(q, rnic.CWRErrors, 1)
			e.errorQP(q, "send queue producer index is corrupt")
			return false, true
		}
		if slot == nil {
			return false, did
		}
		var raw [proto.SQEHeaderLen]byte
		copy(raw[:], slot)
		sqe := proto.GetSQE(raw[:])
		if c.waitFirst && sqe.Opcode != proto.WRLocalInvalidate {
			// Responder: nothing goes out before the initiator's first FPDU.
			return false, did
		}
		fence := sqe.Flags&proto.SendFence != 0 && c.orq.Len() > 0
		// Reads and atomics share the ORD (RFC 7306 §6: Atomic Requests
		// count against IRD/ORD as Read Requests do).
		if fence || c.pend.full() || (sqe.Opcode == proto.WRRDMARead || sqe.Opcode.Atomic()) && c.orq.Len() >= c.ord {
			c.sqStalled = true
			return false, did
		}
		c.refreshEMSS()
		t.fresh = false
		st := e.prepareWR(q, &t.msg, &sqe, slot)
		q.SQ.Advance()
		q.SQ.Release()
		if c.phase == closing {
			c.closeBudget--
		}
		seq := c.pend.push(pend{wrid: sqe.WRID, op: rnic.WCOpcodeOf(sqe.Opcode), len: uint32(t.total),
			signaled: sqe.Flags&proto.SendSignaled != 0})
		did = true
		if st != proto.WCSuccess || sqe.Opcode == proto.WRLocalInvalidate {
			t.kind = txNone // nothing to transmit
		}
		if st != proto.WCSuccess {
			e.count(q, rnic.CWRErrors, 1)
			e.complete(q, seq, st)
			e.errorQP(q, "work request "+st.String())
			return false, true
		}
		if sqe.Opcode == proto.WRLocalInvalidate {
			e.complete(q, seq, proto.WCSuccess)
			continue
		}
		t.seq = seq
		if sqe.Opcode == proto.WRRDMARead {
			c.orq.push(read{seq: seq, sge: t.readSGE, stag: t.readSGE.LKey, to: t.readSGE.Addr, size: uint32(t.total)})
		}
		if sqe.Opcode.Atomic() {
			c.orq.push(read{seq: seq, atomic: true, reqID: t.reqID, sge: t.readSGE, size: rnic.AtomicLen})
		}
		return true, true
	}
}

// prepareWR copies and validates the work request sqe (slot is its
// ring entry, for SGEs and inline data) into t (the current message, or
// one taken ahead: rc/txbatch.go), and performs a local invalidation. The
// status is not WCSuccess for a bad work request.
func (e *engine) prepareWR(q *QP, t *msg, sqe *proto.SQE, slot []byte) proto.WCStatus {
	c := q.Conn
	t.kind, t.wrOp, t.useIn, t.seg, t.total = txSQ, sqe.Opcode, false, 0, 0
	t.immOp, t.immPhase, t.immFirst = 0, false, false
	t.Sges = t.Sges[:0]
	if !sqe.KnownFlags() {
		return proto.WCLocQPOpErr
	}
	inline := sqe.Flags&proto.SendInline != 0
	switch sqe.Opcode {
	case proto.WRSend, proto.WRSendInvalidate, proto.WRRDMAWrite, proto.WRSendWithImm, proto.WRWriteWithImm:
		if st := e.copyPayload(q, t, sqe, slot, inline); st != proto.WCSuccess {
			return st
		}
	case proto.WRFetchAdd, proto.WRCmpSwap:
		return e.prepareAtomic(q, t, sqe, slot, inline) // rc/atomic.go
	case proto.WRRDMARead:
		// One sink buffer: the Read Response is placed at one STag/TO
		// (siw allows one SGE for Reads too).
		if inline || sqe.NumSGE > 1 {
			return proto.WCLocQPOpErr
		}
		t.readSGE = proto.SGE{}
		if sqe.NumSGE == 1 {
			var sraw [proto.SGELen]byte
			copy(sraw[:], slot[proto.SQEHeaderLen:])
			t.readSGE = proto.GetSGE(sraw[:])
			if _, _, st := q.Session.CheckSGE(t.readSGE, q.PD, true); st != proto.WCSuccess {
				return st
			}
			t.total = int(t.readSGE.Length)
		}
		if t.total > 0 && uint64(t.total)-1 > math.MaxUint64-sqe.RemoteAddr {
			return proto.WCLocQPOpErr
		}
	case proto.WRLocalInvalidate:
		m := q.Session.Keys[sqe.InvStag] // the owner may name either key (rnic/keys.go)
		if m == nil || m.PD != q.PD {
			return proto.WCLocProtErr
		}
		m.Invalid.Store(true)
		return proto.WCSuccess
	default:
		return proto.WCLocQPOpErr
	}
	if sqe.Opcode == proto.WRSendWithImm && q.mergeImm {
		e.prepareMergedImm(q, t, sqe) // rc/imm.go
		return proto.WCSuccess
	}
	if sqe.Opcode == proto.WRSendWithImm || sqe.Opcode == proto.WRWriteWithImm {
		// RFC 7306: the Send or Write, then an Immediate Data message (with
		// Solicited Event when asked) that consumes a receive at the peer.
		t.immOp = rdmap.OpImmediateData
		if sqe.Flags&proto.SendSolicited != 0 {
			t.immOp = rdmap.OpImmediateDataSE
		}
		d := rdmap.MakeImmediateData(sqe.Imm)
		t.imm = d.Raw
	}
	switch sqe.Opcode {
	case proto.WRSend, proto.WRSendInvalidate, proto.WRSendWithImm:
		op, inv := rdmap.OpSend, uint32(0)
		se := sqe.Flags&proto.SendSolicited != 0 && sqe.Opcode != proto.WRSendWithImm
		switch {
		case sqe.Opcode == proto.WRSendInvalidate && se:
			op, inv = rdmap.OpSendSEInvalidate, sqe.InvStag
		case sqe.Opcode == proto.WRSendInvalidate:
			op, inv = rdmap.OpSendInvalidate, sqe.InvStag
		case se:
			op = rdmap.OpSendSE
		}
		msn, _ := c.msn.NextMSN(rdmap.QNSend)
		t.segs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(op)), inv, rdmap.QNSend, msn, uint32(t.total), c.MaxUntagged)
	case proto.WRRDMAWrite, proto.WRWriteWithImm:
		segs, err := ddp.TaggedSegments(uint8(rdmap.MakeControl(rdmap.OpWrite)), sqe.RKey, sqe.RemoteAddr, uint32(t.total), c.MaxTagged)
		if err != nil {
			return proto.WCLocQPOpErr
		}
		t.segs = segs
	case proto.WRRDMARead:
		rr := rdmap.ReadRequest{SinkStag: t.readSGE.LKey, SinkTO: t.readSGE.Addr, Size: uint32(t.total),
			SourceStag: sqe.RKey, SourceTO: sqe.RemoteAddr}
		rr.Append(t.rreq[:0])
		msn, _ := c.msn.NextMSN(rdmap.QNReadRequest)
		t.segs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpReadRequest)), 0, rdmap.QNReadRequest, msn,
			rdmap.ReadRequestLen, c.MaxUntagged)
	}
	return proto.WCSuccess
}

// RcCopyPayload copies the SGEs (validating them) or the inline data of a
// Send or Write into the current message (for tests).
func (e *engine) RcCopyPayload(q *QP, sqe *proto.SQE, slot []byte, inline bool) proto.WCStatus {
	return e.copyPayload(q, &q.Conn.Tx.msg, sqe, slot, inline)
}

// copyPayload copies the SGEs (validating them) or the inline data of a
// Send or Write into t.
func (e *engine) copyPayload(q *QP, t *msg, sqe *proto.SQE, slot []byte, inline bool) proto.WCStatus {
	if inline {
		if sqe.InlineLen > q.Caps.MaxInline || int(sqe.InlineLen) > len(slot)-proto.SQEHeaderLen {
			return proto.WCLocLenErr
		}
		n := int(sqe.InlineLen)
		copy(t.inline[:n], slot[proto.SQEHeaderLen:proto.SQEHeaderLen+n])
		t.useIn, t.total = true, n
		return proto.WCSuccess
	}
	if uint32(sqe.NumSGE) > q.Caps.MaxSendSGE || proto.SQEHeaderLen+int(sqe.NumSGE)*proto.SGELen > len(slot) {
		return proto.WCLocLenErr
	}
	total := 0
	var sraw [proto.SGELen]byte
	for i := range int(sqe.NumSGE) {
		off := proto.SQEHeaderLen + i*proto.SGELen
		copy(sraw[:], slot[off:off+proto.SGELen])
		s := proto.GetSGE(sraw[:])
		if _, _, st := q.Session.CheckSGE(s, q.PD, false); st != proto.WCSuccess {
			return st
		}
		t.Sges = append(t.Sges, s)
		total += int(s.Length)
		if total > MaxMessage {
			return proto.WCLocLenErr
		}
	}
	t.total = total
	return proto.WCSuccess
}

// fpduSent accounts for a fully written FPDU; the message completes
// with its last one.
func (e *engine) fpduSent(q *QP) {
	c := q.Conn
	t := &c.Tx
	t.seg++
	if t.seg < t.segs.Count() {
		return
	}
	switch t.kind {
	case txSQ:
		e.count(q, rnic.CMessagesOut, 1)
		if t.immFirst && t.immPhase {
			// A merged Send with Imm: its Immediate Data is out, the Send follows.
			t.segs, t.seg, t.fresh, t.immPhase = t.sendSegs, 0, false, false
			t.payloads = t.payloads[:0]
			return
		}
		if t.immOp != 0 && !t.immPhase && !t.immFirst {
			// The Send or Write is out: its Immediate Data follows.
			e.count(q, rnic.CBytesOut, int64(t.total))
			msn, _ := c.msn.NextMSN(rdmap.QNSend)
			t.segs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(t.immOp)), 0, rdmap.QNSend, msn,
				rdmap.ImmediateDataLen, c.MaxUntagged)
			t.seg, t.fresh, t.immPhase = 0, false, true
			t.payloads = t.payloads[:0]
			return
		}
		if !t.immPhase {
			e.count(q, rnic.CBytesOut, int64(t.total))
		}
		if t.wrOp != proto.WRRDMARead && !t.wrOp.Atomic() {
			e.complete(q, t.seq, proto.WCSuccess)
		}
	case txReadResp:
		e.count(q, rnic.CBytesOut, int64(t.total))
		c.Irq.pop()
	}
	t.kind = txNone
	t.payloads = t.payloads[:0]
	t.promote() // rc/txbatch.go
}

// sendTerminate writes the Terminate FPDU (built once), then our FIN;
// what the peer still sends is read and dropped until its FIN (bounded).
func (e *engine) sendTerminate(q *QP) bool {
	c := q.Conn
	if c.termWire == nil {
		t := c.buildTerm()
		msn, _ := c.msn.NextMSN(rdmap.QNTerminate)
		h := ddp.Header{Last: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpTerminate)),
			QN: rdmap.QNTerminate, MSN: msn}
		ulpdu := t.Append(h.Append(make([]byte, 0, ddp.UntaggedHeaderLen+t.Len())))
		c.termWire = c.snd.AppendFPDU(make([]byte, 0, c.snd.WireLen(len(ulpdu))), ulpdu)
		c.termOff = 0
	}
	for c.termOff < len(c.termWire) {
		n, err := unix.Write(c.Fd, c.termWire[c.termOff:])
		if n > 0 {
			c.termOff += n
			continue
		}
		if err == nil || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			c.setEpoll(e, false, true)
			return false
		}
		e.socketError(q, err)
		return true
	}
	e.count(q, rnic.CMessagesOut, 1)
	c.discard = true
	e.shutdown(q)
	return true
}
