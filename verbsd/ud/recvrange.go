package ud

import (
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// LoadRecvRange is LoadRecv for a receive filled a piece at a time (an RD
// Send arriving in segments, RFC 5041 §5.3 untagged placement at MO): every
// SGE of the RQE in slot is checked as LoadRecv checks it and w.Total is
// their sum, but only the pieces covering octets [from, from+n) of the
// receive are translated into w.Bufs (in order, empty ones left out). For
// a receive in process memory (rnic/stage.go) only those octets are staged
// and later written, not the whole buffer for every segment; n 0
// translates nothing (a claim that only validates the receive).
func (e *Engine) LoadRecvRange(q *QP, w *rnic.RecvWR, slot []byte, from, n uint64) proto.WCStatus {
	var raw [proto.RQEHeaderLen]byte
	copy(raw[:], slot)
	rqe := proto.GetRQE(raw[:])
	w.WRID = rqe.WRID
	w.Valid = false
	if uint32(rqe.NumSGE) > q.MaxRecvS {
		return proto.WCLocLenErr
	}
	p := q.PD
	if q.SRQ != nil {
		p = q.SRQ.PD
	}
	w.Bufs = w.Bufs[:0]
	w.Total = 0
	lo, hi, off := from, from+n, uint64(0)
	var sraw [proto.SGELen]byte
	for i := range int(rqe.NumSGE) {
		at := proto.RQEHeaderLen + i*proto.SGELen
		copy(sraw[:], slot[at:at+proto.SGELen])
		sge := proto.GetSGE(sraw[:])
		if _, _, st := q.Session.CheckSGE(sge, p, true); st != proto.WCSuccess { // a destination: no probe
			return st
		}
		end := off + uint64(sge.Length)
		if a, z := max(lo, off), min(hi, end); a < z {
			b, st := q.Translate(rnic.SubSGE(sge, a-off, z-a), p, true)
			if st != proto.WCSuccess {
				return st
			}
			w.Bufs = append(w.Bufs, b)
		}
		w.Total += int(sge.Length)
		off = end
	}
	w.Valid = true
	return proto.WCSuccess
}
