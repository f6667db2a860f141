package rc

import (
	"fmt"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// The receive hold of a QP created with hold_recv
// (proto.CreateQPRequest.HoldRecv; the libfabric provider's RC QPs).
//
// RFC 5040 §5.3 and RFC 5041 §7 leave a Send that finds no posted receive
// one answer: a Terminate "invalid MSN, no buffer", and the QP goes to
// ERROR. iWARP has no receiver-not-ready retry (InfiniBand's RNR NAK), so
// verbs applications post receives in advance; libfabric's default
// resource management (fi_domain(3), FI_RM_ENABLED) instead promises that
// the provider protects the application against receiver-not-ready. With
// the option, the RECEIVING daemon keeps such a message:
//
//   - an untagged message on QN 0 (a Send of any kind, an Immediate Data
//     that takes a receive, a merged Immediate Data delivered alone) that
//     arrives while no receive is posted, or while earlier messages are
//     held (MSN order), is read into daemon memory, whole, segment by
//     segment, checked as any Send's segments are;
//   - tagged messages, Read and Atomic Requests and Responses after it are
//     processed as they arrive (holding them behind a Send could deadlock
//     a peer waiting for a Read Response before it posts its receive);
//     a Send with Invalidate invalidates its STag on arrival, as without
//     the option;
//   - every engine pass delivers the complete held messages, oldest first,
//     into the receives posted since (copied into the receive's SGEs, the
//     completion as the Send would have had: length, Solicited Event,
//     Immediate Data, invalidated STag); a receive too short for its
//     message terminates the QP ("message too long"), as on arrival;
//   - bounded: at most -rc-hold-msgs messages and -rc-hold-bytes octets
//     per QP, and -user-max-held-bytes for all QPs of the receiving
//     client's Unix user (rnic/userlimits.go); a message counts its
//     payload and its bookkeeping (heldMsgCost, heldSegCost). The message that would go
//     past a bound gets today's Terminate, and the log line says which
//     bound to raise;
//   - a held message has consumed no receive. When the connection ends
//     the messages that receives already posted can take are delivered if
//     the peer closed gracefully (they arrived before its FIN), the rest
//     are dropped with the QP's flush like any unreceived data: counted
//     (rc_held_dropped) and logged. Destroying the QP drops them too.
//
// The wire does not change, and the sender cannot tell: its Send completed
// when it was written to TCP, as always on RC. Without the option nothing
// changes (siw interop, the RFC 5040 conformance tests).

// heldMsg is one untagged message kept for want of a receive.
type heldMsg struct {
	// segs are its segments' payloads, each allocated to its length as it
	// arrives (no buffer grows and leaves its old copy to the collector:
	// the daemon's memory follows the octets counted).
	segs [][]byte
	n    int  // octets
	cost int  // what it counts against the bounds (heldCost)
	done bool // its last segment arrived
	hdr  [ddp.UntaggedHeaderLen]byte
	cqe  proto.CQE // the completion (but WRID, ByteLen), set when done
	// A merged Immediate Data's value, attached at the Send's first
	// segment (rc/imm.go attachImm).
	hasImm, immSE bool
	imm           uint32
}

// What a held message counts against -rc-hold-bytes and the user's
// limit beyond its payload: its bookkeeping (the heldMsg, its completion,
// its place in the queue) and each segment's allocation, so that a flood
// of tiny messages or segments costs the daemon what it is charged (a
// peer flooding 100-octet Sends made the daemon's memory grow 3 times
// the payload held).
const (
	heldMsgCost = 256
	heldSegCost = 48
)

// segCost is what a segment of n payload octets counts.
func segCost(n int) int {
	if n == 0 {
		return 0
	}
	return n + heldSegCost
}

// holdQ is a QP's receive hold: messages in MSN order; the last one may
// still be arriving.
type holdQ struct {
	msgs    queue[heldMsg]
	bytes   int  // octets counted: payloads and bookkeeping (heldMsgCost)
	filling bool // the Send being received goes to the last message
}

// wantsHold reports whether the untagged message now arriving on QN 0 is
// to be held rather than take a receive: earlier messages are held (MSN
// order), or no receive is posted. It takes nothing from the receive
// queue.
func (e *engine) wantsHold(q *QP) bool {
	if !q.holdRecv {
		return false
	}
	if q.Conn.hold.msgs.Len() > 0 {
		return true
	}
	ring := q.RecvRing()
	if ring == nil {
		return true
	}
	n, err := ring.Available()
	return err == nil && n == 0
}

// holdBound terminates q with "invalid MSN, no buffer" because holding the
// message whose DDP header is hdr would pass a bound; what names the bound.
func (e *engine) holdBound(q *QP, hdr []byte, segLen int, what string) {
	c := q.Conn
	e.count(q, rnic.CDropNoRecv, 1)
	c.setCause(fmt.Sprintf("a Send arrived with no receive posted and the receive hold full (%s; %d messages held, %d octets counted): "+
		"the application posts receives too slowly for what its peer sends; raise the bound (docs/iwarpd.md \"RC receive hold\") "+
		"or post receives ahead", what, c.hold.msgs.Len(), c.hold.bytes))
	e.terminate(q, iwerr.DDPInvalidMSNNoBuffer, hdr, nil, segLen)
}

// startHeld begins holding the message whose first segment is in c.rx
// (checked: MO 0), with room for its payload. false: a bound was reached
// (the QP is terminating; nothing of the message is held).
func (e *engine) startHeld(q *QP) bool {
	c := q.Conn
	x := &c.rx
	cfg := q.Session.Dev.Cfg
	if c.hold.msgs.Len() >= cfg.RCHoldMsgs {
		e.holdBound(q, x.hdr[:x.h.Len()], x.ulen, fmt.Sprintf("-rc-hold-msgs %d", cfg.RCHoldMsgs))
		return false
	}
	cost := heldMsgCost + segCost(x.payLen)
	if !e.reserveHeld(q, cost, x.hdr[:x.h.Len()], x.ulen) {
		return false
	}
	m := heldMsg{n: x.payLen, cost: cost}
	if x.payLen > 0 {
		m.segs = [][]byte{make([]byte, x.payLen)}
	}
	copy(m.hdr[:], x.hdr[:ddp.UntaggedHeaderLen])
	if isSend(x.op) && c.heldImm.held {
		m.hasImm, m.imm, m.immSE = true, c.heldImm.value, c.heldImm.se
		c.heldImm.held = false
	}
	c.hold.msgs.push(m)
	c.hold.filling = true
	e.count(q, rnic.CRCHeld, 1)
	return true
}

// reserveHeld counts n octets (heldCost) against the QP's octet bound
// and the user's limit. false: past one (the QP is terminating; hdr and
// segLen name the offending segment).
func (e *engine) reserveHeld(q *QP, n int, hdr []byte, segLen int) bool {
	c := q.Conn
	if n == 0 {
		return true
	}
	cfg := q.Session.Dev.Cfg
	if c.hold.bytes+n > cfg.RCHoldBytes {
		e.holdBound(q, hdr, segLen, fmt.Sprintf("-rc-hold-bytes %d", cfg.RCHoldBytes))
		return false
	}
	if err := q.Session.Dev.Users.Acquire(q.Session, config.ResHeld, uint64(n)); err != nil {
		e.holdBound(q, hdr, segLen, err.Error())
		return false
	}
	c.hold.bytes += n
	return true
}

// checkHeld checks a later segment of the held message being received
// (MO, bounds) and makes room for its payload. false: the QP is
// terminating.
func (e *engine) checkHeld(q *QP, fail func(iwerr.Error, []byte) bool) bool {
	c := q.Conn
	x := &c.rx
	m := &c.hold.msgs.items[c.hold.msgs.Len()-1]
	if int(x.h.MO) != m.n {
		return fail(iwerr.DDPInvalidMO, nil)
	}
	if !e.reserveHeld(q, segCost(x.payLen), x.hdr[:x.h.Len()], x.ulen) {
		return false
	}
	if x.payLen > 0 {
		m.segs = append(m.segs, make([]byte, x.payLen))
		m.n += x.payLen
		m.cost += segCost(x.payLen)
	}
	return true
}

// heldDest is where the payload of the current segment of a held message
// goes.
func (c *conn) heldDest() []byte {
	m := &c.hold.msgs.items[c.hold.msgs.Len()-1]
	return m.segs[len(m.segs)-1] // checkHeld: the segment's own, payLen octets
}

// heldArrived completes the held message whose last segment was just
// committed: its completion is made now (the invalidation of a Send with
// Invalidate done now, as on arrival without the hold). false: the QP is
// failing.
func (e *engine) heldArrived(q *QP) bool {
	c := q.Conn
	c.hold.filling = false
	m := &c.hold.msgs.items[c.hold.msgs.Len()-1]
	cqe, ok := e.recvCQE(q, m.hasImm, m.imm, m.immSE) // rc/imm.go
	if !ok {
		return false
	}
	m.cqe, m.done = cqe, true
	return true
}

// holdLoneImm keeps a merged Immediate Data that no Send followed (rc/imm.go
// releaseImm) as a held message of its own. false: a bound was reached.
func (e *engine) holdLoneImm(q *QP, h heldImm) bool {
	c := q.Conn
	cfg := q.Session.Dev.Cfg
	if c.hold.msgs.Len() >= cfg.RCHoldMsgs {
		e.holdBound(q, h.hdr[:], ddp.UntaggedHeaderLen+rdmap.ImmediateDataLen, fmt.Sprintf("-rc-hold-msgs %d", cfg.RCHoldMsgs))
		return false
	}
	if !e.reserveHeld(q, heldMsgCost, h.hdr[:], ddp.UntaggedHeaderLen+rdmap.ImmediateDataLen) {
		return false
	}
	m := heldMsg{done: true, hdr: h.hdr, cost: heldMsgCost}
	m.cqe = proto.CQE{Opcode: proto.WCRecv, Flags: proto.WCFlagImm, Imm: h.value, QPN: q.QPN}
	if h.se {
		m.cqe.Flags |= proto.WCFlagSolicited
	}
	c.hold.msgs.push(m)
	e.count(q, rnic.CRCHeld, 1)
	return true
}

// heldReady reports whether a held message can be delivered now: one is
// complete and a receive is posted (the engine's look before sleeping).
func (q *QP) heldReady() bool {
	c := q.Conn
	if c == nil || c.hold.msgs.Len() == 0 || !c.hold.msgs.head().done {
		return false
	}
	ring := q.RecvRing()
	if ring == nil {
		return false
	}
	n, _ := ring.Available()
	return n > 0
}

// deliverHeld completes the complete held messages, oldest first, on the
// receives posted (at most PollBatch per pass); it reports whether it did
// any work. A receive too short for its message terminates the QP.
func (e *engine) deliverHeld(q *QP) bool {
	c := q.Conn
	work := false
	for range e.Cfg.PollBatch {
		if c.hold.msgs.Len() == 0 || !c.hold.msgs.head().done {
			break
		}
		switch e.takeRecv(q) {
		case rqeNone:
			return work
		case rqeBad:
			e.terminate(q, iwerr.RDMAPLocalCatastrophicError, nil, nil, -1)
			return true
		}
		work = true
		m := c.hold.msgs.head()
		if uint64(m.n) > c.rqe.total {
			e.count(q, rnic.CRecvTooLong, 1)
			c.setCause(fmt.Sprintf("a held message of %d octets found a receive of %d", m.n, c.rqe.total))
			e.terminate(q, iwerr.DDPMessageTooLong, m.hdr[:], nil, -1)
			return true
		}
		if !e.copyHeld(q, m.segs) {
			e.terminate(q, iwerr.RDMAPLocalCatastrophicError, nil, nil, -1)
			return true
		}
		cqe := m.cqe
		cqe.WRID, cqe.ByteLen, cqe.QPN = c.rqe.wrid, uint32(m.n), q.QPN
		c.rqe.active = false
		e.count(q, rnic.CMessagesIn, 1)
		e.count(q, rnic.CBytesIn, int64(m.n))
		e.PostCQE(q.Session, q.RecvCQ, &cqe)
		e.popHeld(q)
	}
	return work
}

// copyHeld copies the segments segs into the receive just taken (c.rqe),
// SGE by SGE, each translated for this pass. false: the memory went away.
func (e *engine) copyHeld(q *QP, segs [][]byte) bool {
	p := q.PD
	if q.SRQ != nil {
		p = q.SRQ.PD
	}
	var src []byte
	for _, s := range q.Conn.rqe.sges {
		for off := uint64(0); off < uint64(s.Length); {
			for len(src) == 0 && len(segs) > 0 {
				src, segs = segs[0], segs[1:]
			}
			if len(src) == 0 {
				return true
			}
			n := min(uint64(len(src)), uint64(s.Length)-off)
			b, st := q.Translate(rnic.SubSGE(s, off, n), p, true)
			if st != proto.WCSuccess {
				return false
			}
			copy(b, src[:n])
			if e.CommitOne(b) != nil { // rnic/stage.go: process memory
				return false
			}
			src, off = src[n:], off+n
		}
	}
	return true
}

// popHeld drops the oldest held message and gives back its octets.
func (e *engine) popHeld(q *QP) {
	c := q.Conn
	n := c.hold.msgs.head().cost
	c.hold.msgs.pop()
	c.hold.bytes -= n
	if n > 0 {
		q.Session.Dev.Users.Release(q.Session, config.ResHeld, uint64(n))
	}
}

// dropHeld drops every held message (the connection ended, the QP is
// destroyed): counted and logged, since their sender saw them complete.
func (e *engine) dropHeld(q *QP, why string) {
	c := q.Conn
	c.hold.filling = false
	n, octets := c.hold.msgs.Len(), 0
	for _, m := range c.hold.msgs.items {
		octets += m.n
	}
	if n == 0 {
		return
	}
	for c.hold.msgs.Len() > 0 {
		e.popHeld(q)
	}
	e.count(q, rnic.CRCHeldDropped, int64(n))
	if ok, more := q.Session.Dev.EventLog.Allow(time.Now()); ok {
		q.Session.Dev.Log.Infof("session %d (pid %d): RC QP %d (QPN %d): %d held message(s) (%d octets) dropped, received before any "+
			"receive was posted for them: %s%s", q.Session.ID, q.Session.Cred.Pid, q.Handle, q.QPN, n, octets, why, rnic.Note(more))
	}
}

// flushHeld is the receive hold's part of an ERROR QP's flush: after a
// graceful end (the messages arrived before the peer's FIN) the receives
// already posted take what they can, then the rest is dropped.
func (e *engine) flushHeld(q *QP) bool {
	c := q.Conn
	if c.hold.msgs.Len() == 0 {
		return false
	}
	if c.reason == ClosedGraceful && !c.hold.filling {
		for n := c.hold.msgs.Len(); n > 0 && q.heldReady(); n = c.hold.msgs.Len() {
			if e.deliverHeld(q); c.hold.msgs.Len() == n {
				break // no progress (a receive too short)
			}
		}
	}
	e.dropHeld(q, "the connection ended ("+c.reason.String()+")")
	return true
}
