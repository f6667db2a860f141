package rnic

import "github.com/iwarpd/iwarpd/proto"

// FlushPosted completes, with WCWRFlushErr, the work requests still posted
// in the rings of q, a QP in ERROR: its SQ's, each with the opcode it was
// posted with (a flushed RDMA Read completes as WCRDMARead, an atomic as
// WCFetchAdd or WCCmpSwap), then its own RQ's, as WCRecv; each queue in
// posting order, at most PollBatch per queue per pass (ibv_modify_qp(3):
// in ERROR, outstanding and later posted work requests complete flushed).
// Receives posted to an SRQ stay there for its other QPs: they belong to
// the SRQ, not to the QP. Work the transport took from the rings and has
// not completed is its own to flush first (ud/send.go Flush, rd/state.go
// serviceRD, rc/conn.go flush), so that completions keep posting order.
//
// It reports whether it completed anything.
func (e *Engine) FlushPosted(q *QP) bool {
	work := false
	for range e.Cfg.PollBatch {
		slot, err := q.SQ.Peek()
		if err != nil || slot == nil { // a corrupt ring holds nothing to flush
			break
		}
		// One read of the header the client may be rewriting (shared memory).
		var raw [proto.SQEHeaderLen]byte
		copy(raw[:], slot)
		sqe := proto.GetSQE(raw[:])
		q.SQ.Advance()
		q.SQ.Release()
		e.Count(q, CFlushed, 1)
		e.PostCQE(q.Session, q.SendCQ, &proto.CQE{WRID: sqe.WRID, Status: proto.WCWRFlushErr, Opcode: WCOpcodeOf(sqe.Opcode), QPN: q.QPN})
		work = true
	}
	if q.RQ == nil {
		return work
	}
	for range e.Cfg.PollBatch {
		slot, err := q.RQ.Peek()
		if err != nil || slot == nil {
			break
		}
		wrid := proto.GetRQE(slot).WRID
		q.RQ.Advance()
		q.RQ.Release()
		e.Count(q, CFlushed, 1)
		e.PostCQE(q.Session, q.RecvCQ, &proto.CQE{WRID: wrid, Status: proto.WCWRFlushErr, Opcode: proto.WCRecv, QPN: q.QPN})
		work = true
	}
	return work
}
