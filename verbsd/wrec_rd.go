package verbsd

import (
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// writeRecordRD is the Write-Record hook of the RD receive path
// (rd_recv.go's rdDeliver, for a tagged segment with opcode 0xC or 0xD): seg is
// the DDP segment delivered in order by RD (no CRC), h its parsed DDP
// header of hl octets. It checks and places the segment exactly as on UD
// (wrec_recv.go) and, when the record is whole, completes it into the head
// of q's receive ring (RD claims receives for Sends as their first
// segment arrives, so the head is free). On RD a record completes only
// whole: expireRecords does not run for RD QPs, so a partial record waits
// for its retransmitted segments (or is evicted by newer ones).
//
// It sends nothing: when the access checks refuse the segment it returns
// the error (ok false) for the caller to report reliably (rdSendError with
// seg[:hl] and len(seg)); the record has failed, and later segments of it
// are dropped silently. A malformed segment (short Write-Record header,
// inconsistent offsets) is dropped and counted, ok true.
func (e *engine) writeRecordRD(q *qp, src netip.AddrPort, h *ddp.Header, seg []byte, hl int, now time.Time) (iwerr.Error, bool) {
	sg := wrecSegment{src: src, h: *h, ddpHdr: seg[:hl], segLen: len(seg), quiet: true}
	n, ok := sg.parseHeader(seg) // wrec_recv.go: opcode 0xC, or 0xD with its Immediate Data
	if !ok || hl != ddp.TaggedHeaderLen {
		e.count(q, rnic.CWrecDropped, 1)
		return iwerr.Error{}, true
	}
	body := seg[n:]
	sg.pieces, sg.n = [][]byte{body}, len(body)
	r, st := e.acceptWriteRecord(q, &sg, now)
	switch st {
	case recordComplete:
		e.completeRecord(q, r, e.headRecv(q), false)
	case recordRefused:
		return rnic.DgramAccessError, false // access_guard.go: one generic error on datagram QPs
	}
	return iwerr.Error{}, true
}
