package rd

import (
	"encoding/binary"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// Handing the socket back with responses outstanding (docs/fastpath.md
// "RDMA at the target"). A target that serves a stream of Read or Atomic
// Requests always has the response to the last one outstanding, waiting
// for the acknowledgement the next request carries: the QP was never
// quiet, and a rank that asked for its socket back during such a stream
// waited for the stream's end. Responses need nothing of the engine once
// sent but their retransmission, which the rank's outstanding ring gives
// (a copy the engine retransmits after a take-over): so the hand-back
// may move them into the ring — Read Responses (from mapped memory),
// Atomic Responses, error messages and the rank's own copies taken back,
// each sent once and at most the ring's room per peer — and the engine
// forgets them as acknowledged. Work requests, which complete on their
// acknowledgements, still keep the socket.

// fpQuiet reports whether nothing of q's waits in the engine for the
// socket or the peers but responses, error messages and the rank's copies
// outstanding (all sent): no work request, retransmission or ACK queued,
// no message being received, nothing held or backlogged, nothing in the
// SQ. Only then may the rank have the socket: what it sends would
// otherwise overtake it.
func (q *QP) fpQuiet() bool {
	r := q.Rd
	if q.State != proto.QPStateRTS || len(r.wrs) > 0 || len(r.retx) > 0 || len(r.acks) > 0 ||
		len(r.inMsgs) > 0 || r.heldN > 0 || len(r.backlog) > 0 || r.claimed > 0 || len(r.fp.reqs) > 0 {
		return false
	}
	for _, p := range r.resps {
		if p.dead || p.proc || p.sent != p.segs.Count() {
			return false
		}
	}
	for _, m := range r.errs {
		if !m.sent {
			return false
		}
	}
	n, err := q.SQ.Available()
	return err == nil && n == 0
}

// fpKeep reports whether the rank can keep the datagram tok outstanding:
// its body is known and fits a copy (bounds of fastpath_import.go).
func (q *QP) fpKeep(tok rd.Token) bool {
	l := q.fpBodyLen(tok)
	return l >= proto.FPRDMinBody && l <= min(proto.FPRDCopyLen, q.Rd.dgramSize-dgramOverhead)
}

// dgramOverhead is what an RD DATA datagram carries beside its copy: key
// header, RD header, CRC.
const dgramOverhead = 8 + 24 + 4

// fpBodyLen is the length of tok's body (DDP segment), -1 if unknown.
func (q *QP) fpBodyLen(tok rd.Token) int {
	r := q.Rd
	kind, seq, seg := splitToken(tok)
	switch kind {
	case tokErrMsg:
		for _, m := range r.errs {
			if m.seq == seq {
				return len(m.body)
			}
		}
	case tokResp:
		for _, p := range r.resps {
			if p.seq == seq && !p.dead && !p.proc && seg < p.segs.Count() {
				return ddp.TaggedHeaderLen + p.segs.Segment(seg).Len
			}
		}
	case tokRank:
		if b, ok := r.fp.copies[tok]; ok {
			return len(b.body)
		}
	}
	return -1
}

// fpBody appends tok's body (fpKeep said it is known) to b: the
// datagram the engine would send again, without RD header and CRC.
func (q *QP) fpBody(tok rd.Token, b []byte) []byte {
	r := q.Rd
	kind, seq, seg := splitToken(tok)
	switch kind {
	case tokErrMsg:
		for _, m := range r.errs {
			if m.seq == seq {
				return append(b, m.body...)
			}
		}
	case tokResp:
		for _, p := range r.resps {
			if p.seq != seq {
				continue
			}
			s := p.segs.Segment(seg)
			b = s.Header.Append(b)
			mem, fault := q.LookupRemote(p.srcStag, p.srcTO+uint64(s.Offset), uint64(s.Len), proto.AccessRemoteRead)
			if fault != 0 { // deregistered meanwhile: zeros, as build sends
				mem = zeroPayload[:s.Len]
			}
			return append(b, mem...)
		}
	case tokRank:
		return append(b, r.fp.copies[tok].body...)
	}
	return b
}

// fpExportOut lays the datagrams outstanding towards slot i's peer (ps.Out,
// oldest first from SndUna) into the slot's ring and the page's copies,
// then forgets them as acknowledged: the rank keeps them outstanding.
func (e *Engine) fpExportOut(q *QP, mem []byte, i int, ps *rd.FPPeer) {
	s := mem[proto.FPRDSlotOff(i) : proto.FPRDSlotOff(i)+proto.FPRDSlotLen]
	le := binary.LittleEndian
	var scratch [proto.FPRDCopyLen]byte
	for k, o := range ps.Out {
		body := q.fpBody(o.Tok, scratch[:0])
		copy(mem[proto.FPRDCopyOff(i, k):], body)
		en := s[proto.OffFPRDRing+k*proto.FPRDEntryLen:]
		le.PutUint32(en[proto.OffFPRDEntrySeq:], ps.SndUna+uint32(k))
		le.PutUint32(en[proto.OffFPRDEntryLen:], uint32(len(body)))
		le.PutUint64(en[proto.OffFPRDEntrySentAt:], uint64(rnic.MonoNS(o.SentAt)))
	}
	le.PutUint32(s[proto.OffFPRDOutHead:], 0)
	le.PutUint32(s[proto.OffFPRDOutN:], uint32(len(ps.Out)))
	for _, o := range ps.Out {
		e.resolve(q, o.Tok, true)
	}
	q.Rd.count(fpGiven, int64(len(ps.Out)))
}

// fpKeepFunc is fpKeep bound to q (made once per QP).
func (q *QP) fpKeepFunc() func(rd.Token) bool {
	fp := &q.Rd.fp
	if fp.keep == nil {
		fp.keep = q.fpKeep
	}
	return fp.keep
}
