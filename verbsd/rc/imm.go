package rc

import (
	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// RFC 7306 Immediate Data on RC, and the completion of a received Send.
//
// RFC 7306 defines a Send with Immediate as a Send followed by an
// Immediate Data message, each consuming a receive at the target. A QP
// created with merge_send_imm (proto.CreateQPRequest.MergeSendImm; the
// libfabric provider's FI_EP_MSG endpoints, whose fi_senddata must
// complete one receive with the data and the CQ data) changes that on
// both sides, with ordinary RFC 7306/5040 messages on the wire:
//
//   - sending, a WRSendWithImm is the Immediate Data message FIRST,
//     carrying rdmap.ImmediateMergeTag in octets 4–7 (plain opcode 0x8),
//     then the Send (OpSendSE when the work request is solicited), back to
//     back on the stream (prepareMergedImm); the work request completes
//     with the Send, its payload zero-copy as any Send's;
//   - receiving, a tagged Immediate Data consumes no receive: the value is
//     held (holdImm) and reported, with WCFlagImm (and WCFlagSolicited if
//     the Immediate Data had SE), in the completion of the next Send, which
//     takes one receive as usual (attachImm) — also when it is 0 octets;
//   - an Immediate Data without the tag (an RFC 7306 peer, or a Write with
//     Immediate: iwarpd sends it untagged) is handled exactly as without
//     the option, so WCRecvRDMAWithImm after a Write is unchanged;
//   - when a held value is followed by anything but a Send (a Write, a
//     Read or Atomic Request or Response, another Immediate Data, a
//     Terminate: arbitrary sequences from a peer that tags but does not
//     follow with a Send), the held Immediate Data is delivered first as
//     RFC 7306 delivers it — one receive, WCRecv, WCFlagImm, ByteLen 0
//     (releaseImm); with no receive posted that is RFC 5041's Terminate
//     "invalid MSN, no buffer" naming the Immediate Data's DDP header;
//   - a held value dies with the connection: it consumed no receive, so
//     there is nothing to flush.
//
// Without the option nothing changes (siw interop, docs/siw-interop.md).

// heldImm is a tagged Immediate Data waiting for its Send.
type heldImm struct {
	held  bool
	se    bool // it was OpImmediateDataSE
	value uint32
	hdr   [ddp.UntaggedHeaderLen]byte // its DDP header, for a Terminate
}

// prepareMergedImm sets t up for a merged Send with Immediate (the
// SGEs or inline data are in place): the tagged Immediate Data message,
// then the Send. Both MSNs are taken now, in order.
func (e *engine) prepareMergedImm(q *QP, t *msg, sqe *proto.SQE) {
	c := q.Conn
	t.immOp, t.immFirst, t.immPhase = rdmap.OpImmediateData, true, true
	d := rdmap.MakeMergedImmediateData(sqe.Imm)
	t.imm = d.Raw
	op := rdmap.OpSend
	if sqe.Flags&proto.SendSolicited != 0 {
		op = rdmap.OpSendSE
	}
	msn, _ := c.msn.NextMSN(rdmap.QNSend)
	t.segs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpImmediateData)), 0, rdmap.QNSend, msn,
		rdmap.ImmediateDataLen, c.MaxUntagged)
	msn, _ = c.msn.NextMSN(rdmap.QNSend)
	t.sendSegs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(op)), 0, rdmap.QNSend, msn, uint32(t.total), c.MaxUntagged)
}

// isSend reports whether op is one of RFC 5040's four Sends.
func isSend(op rdmap.Opcode) bool {
	return op == rdmap.OpSend || op == rdmap.OpSendSE || op == rdmap.OpSendInvalidate || op == rdmap.OpSendSEInvalidate
}

// holdsImm reports whether the Immediate Data in c.rx (checked) is to
// be held for the next Send rather than take a receive.
func (e *engine) holdsImm(q *QP) bool {
	if !q.mergeImm {
		return false
	}
	x := &q.Conn.rx
	d, _, _ := rdmap.ParseImmediateData(x.hdr[ddp.UntaggedHeaderLen:x.want])
	return d.Merged()
}

// holdImm keeps the tagged Immediate Data in c.rx (its CRC was good) for
// the next Send.
func (e *engine) holdImm(q *QP) {
	c := q.Conn
	x := &c.rx
	d, _, _ := rdmap.ParseImmediateData(x.hdr[ddp.UntaggedHeaderLen:x.want])
	c.heldImm = heldImm{held: true, se: x.op == rdmap.OpImmediateDataSE, value: d.Value()}
	copy(c.heldImm.hdr[:], x.hdr[:ddp.UntaggedHeaderLen])
	e.count(q, rnic.CImmHeld, 1)
}

// attachImm gives the held value, if any, to the receive the Send now
// arriving has just taken.
func (c *conn) attachImm() {
	r := &c.rqe
	r.hasImm = c.heldImm.held
	if r.hasImm {
		r.imm, r.immSE = c.heldImm.value, c.heldImm.se
		c.heldImm.held = false
	}
}

// releaseImm delivers a held Immediate Data that a Send did not follow
// as RFC 7306 does: in a receive of its own. false: the QP is failing.
func (e *engine) releaseImm(q *QP) bool {
	c := q.Conn
	h := c.heldImm
	c.heldImm.held = false
	if e.wantsHold(q) { // rc/hold.go: no receive, or earlier messages held
		return e.holdLoneImm(q, h)
	}
	switch e.takeRecv(q) {
	case rqeNone:
		e.count(q, rnic.CDropNoRecv, 1)
		e.terminate(q, iwerr.DDPInvalidMSNNoBuffer, h.hdr[:], nil, ddp.UntaggedHeaderLen+rdmap.ImmediateDataLen)
		return false
	case rqeBad:
		e.terminate(q, iwerr.RDMAPLocalCatastrophicError, nil, nil, -1)
		return false
	}
	cqe := proto.CQE{WRID: c.rqe.wrid, Opcode: proto.WCRecv, Flags: proto.WCFlagImm, Imm: h.value, QPN: q.QPN}
	if h.se {
		cqe.Flags |= proto.WCFlagSolicited
	}
	c.rqe.active = false
	e.count(q, rnic.CMessagesIn, 1)
	e.PostCQE(q.Session, q.RecvCQ, &cqe)
	return true
}

// completeRecv completes the receive WR of a fully received Send (with
// the value of a merged Immediate Data) or Immediate Data, after the
// remote invalidation a Send with Invalidate asks for.
func (e *engine) completeRecv(q *QP) bool {
	c := q.Conn
	r := &c.rqe
	cqe, ok := e.recvCQE(q, r.hasImm, r.imm, r.immSE)
	if !ok {
		return false
	}
	cqe.WRID, cqe.ByteLen = r.wrid, r.placed
	r.active = false
	e.count(q, rnic.CMessagesIn, 1)
	e.count(q, rnic.CBytesIn, int64(r.placed))
	e.PostCQE(q.Session, q.RecvCQ, &cqe)
	return true
}

// recvCQE is the completion (but WRID and ByteLen) of the Send or
// Immediate Data whose last segment is in c.rx, with a merged Immediate
// Data's value if hasImm; it invalidates the STag a Send with Invalidate
// names. false: that failed (the QP is terminating).
func (e *engine) recvCQE(q *QP, hasImm bool, imm uint32, immSE bool) (proto.CQE, bool) {
	c := q.Conn
	x := &c.rx
	cqe := proto.CQE{Opcode: proto.WCRecv, QPN: q.QPN}
	if x.op == rdmap.OpSendSE || x.op == rdmap.OpSendSEInvalidate || x.op == rdmap.OpImmediateDataSE {
		cqe.Flags |= proto.WCFlagSolicited
	}
	if hasImm {
		cqe.Flags |= proto.WCFlagImm
		cqe.Imm = imm
		if immSE {
			cqe.Flags |= proto.WCFlagSolicited
		}
	}
	if x.op == rdmap.OpImmediateData || x.op == rdmap.OpImmediateDataSE {
		d, _, _ := rdmap.ParseImmediateData(x.hdr[ddp.UntaggedHeaderLen:x.want])
		cqe.Flags |= proto.WCFlagImm
		cqe.Imm = d.Value()
		if c.afterWrite {
			cqe.Opcode = proto.WCRecvRDMAWithImm
		}
	}
	if x.op == rdmap.OpSendInvalidate || x.op == rdmap.OpSendSEInvalidate {
		stag := x.h.ULPReserved
		m := q.Session.MRByRKey(stag)
		if m == nil || m.PD != q.PD {
			e.terminate(q, iwerr.RDMAPCannotInvalidate, x.hdr[:ddp.UntaggedHeaderLen], nil, x.ulen)
			return cqe, false
		}
		m.Invalid.Store(true)
		cqe.Flags |= proto.WCFlagWithInv
		cqe.InvStag = stag
	}
	return cqe, true
}
