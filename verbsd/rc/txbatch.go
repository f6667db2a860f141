package rc

import (
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// Batching across work requests (rc/tx.go sends one message at a time).
// When the batch of the current message holds all its remaining FPDUs
// and has room left (the EMSS-aligned budget of buildFPDU, txMaxFPDUs
// FPDUs, txMaxIOV iovecs), the messages that follow it on the SQ are
// started at once (takeAhead) and their FPDUs join the same writev: a
// stream of small Sends costs one writev (and one TCP segment) per batch
// instead of one per message. The octets on the wire are the ones the
// messages would have produced one at a time (same FPDUs, markers, CRCs,
// MSNs, in posting order); only how they are cut into writev calls
// differs, and each batch is still whole FPDUs starting at an FPDU
// boundary (RFC 5044 §8).
//
// A message taken ahead waits in t.ahead (seg 0, translated again when it
// becomes current: buildFPDU) until the current one completes
// (fpduSent → promote). A short write therefore resumes as before: the
// messages it finished complete, the one it cut becomes current and is
// rebuilt from its cut FPDU. Only what is safe to start early is taken
// ahead, so that the order of effects is today's:
//   - Sends, Writes (with or without Imm) and Reads; not a Local
//     Invalidate (it would invalidate memory before the messages in front
//     of it are written) nor an atomic;
//   - not while a Read Response is due (it goes first, startMessage);
//   - under the same fence, ORD and pending-queue limits as
//     startMessage; a work request that would fail is left on the SQ,
//     where startMessage fails it after the messages in front of it
//     have completed.

// aheadBytes bounds the memory of the ahead ring of one QP (each slot
// holds an SGE list and an inline buffer).
const aheadBytes = 256 << 10

// batchAhead appends the FPDUs of the messages after the current one to
// the batch while they fit whole, taking new ones from the SQ.
func (e *engine) batchAhead(q *QP, limit int) {
	c := q.Conn
	t := &c.Tx
	for i := 0; len(t.wires) < txMaxFPDUs; i++ {
		var m *msg
		if i < t.aLen {
			m = &t.ahead[(t.aHead+i)%len(t.ahead)]
		} else if m = e.takeAhead(q); m == nil {
			return
		}
		if e.msgPayloads(q, m, 0, txWindow) != proto.WCSuccess { // the batch's limit is within the window
			return // it fails when it is current (txPayloads)
		}
		if !t.appendSegs(c, m, 0, m.segs.Count(), limit) || !t.msgEnds(m) {
			return
		}
	}
}

// takeAhead starts the SQ head as a message ahead of the current one,
// if that is safe (see above), and returns it.
func (e *engine) takeAhead(q *QP) *msg {
	c := q.Conn
	t := &c.Tx
	if !t.aheadRoom(q) || c.Irq.Len() > 0 || c.sqStalled || c.waitFirst ||
		q.State != proto.QPStateRTS && q.State != proto.QPStateSQD ||
		c.phase != open && (c.phase != closing || c.closeBudget == 0) {
		return nil
	}
	slot, err := q.SQ.Peek()
	if err != nil || slot == nil {
		return nil // a corrupt index is reported by startMessage
	}
	var raw [proto.SQEHeaderLen]byte
	copy(raw[:], slot)
	sqe := proto.GetSQE(raw[:])
	switch sqe.Opcode {
	case proto.WRSend, proto.WRSendInvalidate, proto.WRSendWithImm, proto.WRRDMAWrite, proto.WRWriteWithImm, proto.WRRDMARead:
	default:
		return nil
	}
	if sqe.Flags&proto.SendFence != 0 && c.orq.Len() > 0 || c.pend.full() ||
		sqe.Opcode == proto.WRRDMARead && c.orq.Len() >= c.ord {
		return nil
	}
	c.refreshEMSS()
	m := &t.ahead[(t.aHead+t.aLen)%len(t.ahead)]
	st := e.prepareWR(q, m, &sqe, slot)
	if st != proto.WCSuccess {
		return nil // no MSN was used; startMessage fails it in turn
	}
	q.SQ.Advance()
	q.SQ.Release()
	if c.phase == closing {
		c.closeBudget--
	}
	m.seq = c.pend.push(pend{wrid: sqe.WRID, op: rnic.WCOpcodeOf(sqe.Opcode), len: uint32(m.total),
		signaled: sqe.Flags&proto.SendSignaled != 0})
	if sqe.Opcode == proto.WRRDMARead {
		c.orq.push(read{seq: m.seq, sge: m.readSGE, stag: m.readSGE.LKey, to: m.readSGE.Addr, size: uint32(m.total)})
	}
	t.aLen++
	return m
}

// aheadRoom reports whether the ahead ring has a free slot, making the
// ring on first use (its size bounded by aheadBytes).
func (t *tx) aheadRoom(q *QP) bool {
	if t.ahead == nil {
		per := cap(t.Sges)*proto.SGELen + len(t.inline) + 256
		n := min(txMaxFPDUs-1, max(1, aheadBytes/per))
		t.ahead = make([]msg, n)
		for i := range t.ahead {
			t.ahead[i].Sges = make([]proto.SGE, 0, cap(t.Sges))
			t.ahead[i].inline = make([]byte, len(t.inline))
		}
	}
	return t.aLen < len(t.ahead)
}

// promote makes the oldest message ahead the current one (the current
// one has completed).
func (t *tx) promote() {
	if t.aLen == 0 {
		return
	}
	t.msg, t.ahead[t.aHead] = t.ahead[t.aHead], t.msg
	t.aHead = (t.aHead + 1) % len(t.ahead)
	t.aLen--
	t.fresh = false
}

// dropAhead forgets the messages ahead (the connection is failing: their
// work requests are in c.pend and are flushed with it).
func (t *tx) dropAhead() {
	for i := range t.aLen {
		m := &t.ahead[(t.aHead+i)%len(t.ahead)]
		m.kind, m.payloads = txNone, m.payloads[:0]
	}
	t.aHead, t.aLen = 0, 0
}
