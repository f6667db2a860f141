package rc

import (
	"encoding/binary"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// RFC 7306 atomics and Immediate Data on RC (docs/atomics.md).
//
// Requester: an atomic work request becomes one Atomic Request (untagged
// QN 1, 52-octet header, one segment), counted against the ORD with the
// RDMA Reads; it waits in orq, in order with the Reads, for the Atomic
// Response (untagged QN 3) whose Original Request Identifier it carries,
// and completes when the original value is stored in its result SGE.
//
// Responder: an Atomic Request is checked like a Read Request (STag, PD,
// AccessRemoteAtomic, bounds of the 8 octets), plus 8-octet alignment of
// the tagged offset and of the octets in the daemon's mapping, and a
// defined operation; a violation sends a Terminate and nothing is
// modified. An accepted request is executed once, when its FPDU's CRC is
// good, with the CPU's atomic instructions on the shared memory
// (rnic.AtomicExecute), and its response queued in irq behind the Read
// Responses due before it (RFC 7306 §6: in order, counted against IRD).

// prepareAtomic validates an atomic work request (operands and one
// result SGE of 8 octets in the SQE body) and builds its Atomic Request
// in t.
func (e *engine) prepareAtomic(q *QP, t *msg, sqe *proto.SQE, slot []byte, inline bool) proto.WCStatus {
	c := q.Conn
	req, sge, st := rnic.AtomicRequest(q.QP, sqe, slot, inline)
	if st != proto.WCSuccess {
		return st
	}
	t.readSGE = sge
	c.nextReqID++
	req.ReqID = c.nextReqID
	t.reqID = req.ReqID
	req.Append(t.areq[:0])
	t.total = rnic.AtomicLen
	msn, _ := c.msn.NextMSN(rdmap.QNReadRequest)
	t.segs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpAtomicRequest)), 0, rdmap.QNReadRequest, msn,
		rdmap.AtomicRequestLen, c.MaxUntagged)
	return proto.WCSuccess
}

// checkAtomicRequest checks an Atomic Request segment (one segment, IRD,
// target) before anything of it is acted on.
func (e *engine) checkAtomicRequest(q *QP, fail func(iwerr.Error, []byte) bool) bool {
	c := q.Conn
	x := &c.rx
	h := &x.h
	switch {
	case h.MO != 0 || !h.Last:
		return fail(iwerr.DDPInvalidMO, nil)
	case x.ulen > ddp.UntaggedHeaderLen+rdmap.AtomicRequestLen:
		return fail(iwerr.DDPMessageTooLong, nil)
	case x.ulen < ddp.UntaggedHeaderLen+rdmap.AtomicRequestLen:
		return fail(iwerr.RDMAPCatastrophicStream, nil)
	case c.Irq.Len() >= c.ird:
		return fail(iwerr.DDPInvalidMSNRange, nil)
	}
	r, _, _ := rdmap.ParseAtomicRequest(x.hdr[ddp.UntaggedHeaderLen:x.want])
	if _, err := q.AtomicTarget(&r); err != (iwerr.Error{}) {
		e.count(q, rnic.CAtomicErrors, 1)
		return fail(err, nil)
	}
	x.payLen = 0
	return true
}

// commitAtomicRequest executes an accepted Atomic Request whose CRC was
// good and queues its response.
func (e *engine) commitAtomicRequest(q *QP) bool {
	c := q.Conn
	x := &c.rx
	r, _, _ := rdmap.ParseAtomicRequest(x.hdr[ddp.UntaggedHeaderLen:x.want])
	b, err := q.AtomicTarget(&r)
	if err != (iwerr.Error{}) { // cannot change within the pass; kept as a guard
		e.terminate(q, err, x.hdr[:ddp.UntaggedHeaderLen], nil, x.ulen)
		return false
	}
	resp := rdmap.AtomicResponse{ReqID: r.ReqID, Original: rnic.AtomicExecute(b, &r)}
	e.count(q, rnic.CAtomicsIn, 1)
	item := readResp{atomic: true}
	resp.Append(item.resp[:0])
	copy(item.ddpHdr[:], x.hdr[:ddp.UntaggedHeaderLen])
	c.Irq.push(item)
	return true
}

// checkAtomicResponse checks an Atomic Response against the oldest
// outstanding Read or atomic: it must be that atomic's.
func (e *engine) checkAtomicResponse(q *QP, fail func(iwerr.Error, []byte) bool) bool {
	c := q.Conn
	x := &c.rx
	h := &x.h
	switch {
	case h.MO != 0 || !h.Last:
		return fail(iwerr.DDPInvalidMO, nil)
	case x.ulen != ddp.UntaggedHeaderLen+rdmap.AtomicResponseLen:
		return fail(iwerr.DDPMessageTooLong, nil)
	case c.orq.Len() == 0 || !c.orq.head().atomic:
		return fail(iwerr.RDMAPUnexpectedOpcode, nil)
	}
	resp, _, _ := rdmap.ParseAtomicResponse(x.hdr[ddp.UntaggedHeaderLen:x.want])
	if resp.ReqID != c.orq.head().reqID {
		return fail(iwerr.RDMAPOperationUnspecified, nil)
	}
	x.payLen = 0
	return true
}

// commitAtomicResponse stores the original value in the atomic's result
// buffer (host byte order, as the verbs return it) and completes it.
func (e *engine) commitAtomicResponse(q *QP) bool {
	c := q.Conn
	x := &c.rx
	resp, _, _ := rdmap.ParseAtomicResponse(x.hdr[ddp.UntaggedHeaderLen:x.want])
	r := c.orq.head()
	b, st := q.Translate(r.sge, q.PD, true)
	if st != proto.WCSuccess || len(b) < rnic.AtomicLen {
		e.terminate(q, iwerr.RDMAPLocalCatastrophicError, nil, nil, -1)
		return false
	}
	binary.NativeEndian.PutUint64(b, resp.Original)
	if e.CommitOne(b[:rnic.AtomicLen]) != nil { // rnic/stage.go: a process-memory result buffer went away
		e.terminate(q, iwerr.RDMAPLocalCatastrophicError, nil, nil, -1)
		return false
	}
	e.complete(q, r.seq, proto.WCSuccess)
	c.orq.pop()
	c.sqStalled = false
	return true
}

// checkImmediate checks an Immediate Data message: exactly its 8 octets
// in one segment (it then takes a receive like a Send).
func (e *engine) checkImmediate(q *QP, fail func(iwerr.Error, []byte) bool) bool {
	x := &q.Conn.rx
	h := &x.h
	switch {
	case h.MO != 0 || !h.Last:
		return fail(iwerr.DDPInvalidMO, nil)
	case x.ulen != ddp.UntaggedHeaderLen+rdmap.ImmediateDataLen:
		return fail(iwerr.DDPMessageTooLong, nil)
	}
	return true
}
