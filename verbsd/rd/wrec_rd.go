package rd

import (
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
)

// writeRecordRD is the Write-Record hook of the RD receive path
// (rd/recv.go's deliver, for a tagged segment with opcode 0xC or 0xD): seg is
// the DDP segment delivered in order by RD (no CRC), h its parsed DDP
// header of hl octets. It checks and places the segment exactly as on UD
// (ud/wrec_recv.go) and, when the record is whole, completes it into the head
// of q's receive ring (RD claims receives for Sends as their first
// segment arrives, so the head is free), or, on a QP created with
// quiet_records, into nothing (CompleteQuiet). On RD a record completes only
// whole: expireRecords does not run for RD QPs, so a partial record waits
// for its retransmitted segments (or is evicted by newer ones).
//
// It sends nothing: when the access checks refuse the segment it returns
// the error (ok false) for the caller to report reliably (sendError with
// seg[:hl] and len(seg)); the record has failed, and later segments of it
// are dropped silently. A malformed segment (short Write-Record header,
// inconsistent offsets) is dropped and counted, ok true.
func (e *Engine) writeRecordRD(q *QP, src netip.AddrPort, h *ddp.Header, seg []byte, hl int, now time.Time) (iwerr.Error, bool) {
	sg := ud.WrecSegment{Src: src, H: *h, DdpHdr: seg[:hl], SegLen: len(seg), Quiet: true}
	n, ok := sg.ParseHeader(seg) // ud/wrec_recv.go: opcode 0xC, or 0xD with its Immediate Data
	if !ok || hl != ddp.TaggedHeaderLen {
		e.count(q, rnic.CWrecDropped, 1)
		return iwerr.Error{}, true
	}
	// One piece, in the engine's own array: a [][]byte literal here was
	// a heap allocation per datagram (4 % of a target daemon's CPU in a
	// 1 MiB MPI_Put run, docs/mpi.md).
	e.wrecPiece[0] = seg[n:]
	sg.Pieces, sg.N = e.wrecPiece[:], len(seg)-n
	r, st := e.AcceptWriteRecord(q.QP, &sg, now)
	e.wrecPiece[0] = nil
	switch st {
	case ud.RecordComplete:
		if !e.CompleteQuiet(q.QP, r) { // ud/wrec_recv.go: quiet_records
			e.CompleteRecord(q.QP, r, e.HeadRecv(q.QP), false)
		}
	case ud.RecordRefused:
		return rnic.DgramAccessError, false // rnic/access_guard.go: one generic error on datagram QPs
	}
	return iwerr.Error{}, true
}

// prepareWriteRecord finishes prepare for a Write-Record work request
// on an RD QP: it takes the next MSN of the QP (shared with Sends) as its
// RecordID. A TO wrap is a local length error (fatal, as on UD).
func (e *Engine) prepareWriteRecord(q *QP, w *wr, sqe *proto.SQE) proto.WCStatus {
	r := q.Rd
	segs, rec, err := ud.WriteRecordSegments(sqe, r.msn[rdmap.QNSend]+1, w.total, e.RdMaxPayload(true, ud.WrecULPLen(sqe.Opcode)))
	if err != nil { // TO + length wraps
		return proto.WCLocLenErr
	}
	r.msn[rdmap.QNSend]++
	w.msn, w.segs, w.rec, w.rkey, w.to = rec.RecordID, segs, rec, sqe.RKey, sqe.RemoteAddr
	w.imm = rdmap.MakeImmediateData(sqe.Imm).Raw // sent after the header by WRWriteRecordWithImm
	return proto.WCSuccess
}

// writeRecordHeader returns the Write-Record header of w's segment
// starting at Message Offset off (and its Immediate Data for
// WRWriteRecordWithImm), appended to b.
func (w *wr) writeRecordHeader(b []byte, off uint32) []byte {
	rec := w.rec
	rec.MessageOffset = off
	b = rec.Append(b)
	if w.op == proto.WRWriteRecordWithImm {
		b = append(b, w.imm[:]...)
	}
	return b
}

// writeRecordError matches an error message from src naming the tagged
// DDP header oh (the target refused a Write-Record segment: STag, bounds,
// rights) with the oldest Write-Record to src, to that STag, whose range
// holds oh.TO, that has no error yet and is not wholly acknowledged (the
// target holds back the acknowledgement of a refused datagram until its
// error message is through, so that work request is still open). It
// completes with TermStatus (WCRemAccessErr) and Term. false: no such
// work request.
func (r *state) writeRecordError(src netip.AddrPort, oh *ddp.Header, err iwerr.Error) bool {
	for _, w := range r.wrs {
		if !w.op.WriteRecord() || w.peer != src || w.sent == 0 || w.fatal || w.completed || w.term != 0 ||
			w.acked >= w.segs.Count() || w.rkey != oh.Stag || oh.TO < w.to || oh.TO-w.to > uint64(w.total) {
			continue
		}
		if !w.done || w.status == proto.WCSuccess {
			w.done, w.status = true, rnic.TermStatus(err)
		}
		w.term = rnic.TermWord(err)
		return true
	}
	return false
}
