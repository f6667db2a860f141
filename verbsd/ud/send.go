package ud

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// sendWR is a send work request of the batch being built: its SQE copied
// out of the ring and validated, its payload translated for this pass only
// (a region may be deregistered between passes).
type sendWR struct {
	wrid     uint64
	signaled bool
	dst      netip.AddrPort // from the SQE's address vector (ud/dest.go)
	qkey     uint32         // the destination's Q_Key (SQE.QKey)
	msn      uint32
	total    int
	segs     ddp.Segmenter
	payloads [][]byte
	inline   []byte
	// Write-Record (ud/wrec_send.go): its header, MessageOffset set per segment.
	wrec bool
	rec  rdmap.WriteRecord
	// Send with Immediate (docs/atomics.md) and Write-Record with
	// Immediate (after rec): the Immediate Data before every segment's
	// payload.
	hasImm bool
	imm    [rdmap.ImmediateDataLen]byte
}

// send serves q's send queue. Each message is one DDP untagged message on
// QN 0 (RDMAP Send or Send with SE), MSN per QP from 1, cut into datagrams
// of at most Config.DatagramSize octets, each [key header][DDP header][the
// registered octets it carries...][CRC trailer] gathered by iovecs (the key
// header names the SQE's remote Q_Key and q's own): no staging copy
// (inline data is copied once, out of the SQE, as the SQE itself is).
//
// Datagrams of the posted work requests, looked at ahead of the head
// without consuming them, go out together with sendmmsg; with GSO (the
// default) consecutive datagrams of equal size for one destination share
// one msghdr with a UDP_SEGMENT control message, so a 64 KiB message is one
// msghdr however small the datagrams. Work requests are consumed and
// complete in order as their last datagram is handed to the kernel; a short
// send (socket buffer full) resumes at the first datagram not sent. At most
// PollBatch msghdrs are sent per QP per pass.
func (e *Engine) send(q *QP) bool {
	q.Blocked = false
	work := false
	budget := e.Cfg.PollBatch
	for budget > 0 {
		msgs, stop, dropped := e.buildSend(q, budget)
		if dropped > 0 {
			work = true
			budget -= dropped
		}
		if stop {
			return true
		}
		if len(msgs) == 0 {
			break
		}
		work = true
		sent, err := e.Sendmmsg(q.FD, msgs)
		e.count(q, rnic.CSendCalls, 1)
		e.sendDone(q, sent)
		budget -= sent
		if sent == len(msgs) {
			continue
		}
		if rnic.ClientSockBroken(q.QP, err) { // rnic/qpsock.go: the client broke its socket
			e.SocketFailed(q.QP, "sendmmsg", err)
			return true
		}
		if err == nil || TransientSendError(err) {
			q.Blocked = true
			e.count(q, rnic.CSendBlocked, 1)
			return true
		}
		refs := e.Sb.MsgDgrams(sent)
		if len(refs) > 1 && GSORefused(err) {
			// The kernel or the route cannot segment: send datagrams one
			// by one on this socket from now on.
			q.Gso = false
			e.count(q, rnic.CGSOFallback, 1)
			continue
		}
		wr := &e.sendWRs[refs[0].wr]
		if errors.Is(err, unix.EFAULT) {
			// The kernel's copy out of the source met a page that is not
			// there (a memfd region punched out after registration,
			// rnic/holeguard.go; with a CRC the daemon's own read of it
			// faults first, rnic/fault.go): a bad local buffer, as for
			// process memory that cannot be read (rnic/stage.go) and as on
			// RC and RD — a local protection error (IBV_WC_LOC_PROT_ERR,
			// ibv_poll_cq(3)); local errors move the QP to ERROR.
			e.count(q, rnic.CMemoryFaults, 1)
			e.count(q, rnic.CWRErrors, 1)
			q.sendSeg = 0
			q.lastMSN = wr.msn
			q.SQ.Advance()
			q.SQ.Release()
			op := proto.WCSend
			if wr.wrec {
				op = proto.WCWriteRecord
			}
			e.PostCQE(q.Session, q.SendCQ, &proto.CQE{WRID: wr.wrid, Status: proto.WCLocProtErr, Opcode: op, QPN: q.QPN})
			e.errorQP(q, "a send's memory has a page that is not present (punched out after registration)")
			return true
		}
		// The kernel refused the datagram (unreachable, too big): that
		// work request (now the head) fails; the QP, shared by many
		// peers, goes on.
		e.count(q, rnic.CSendErrors, 1)
		q.sendSeg = 0
		q.lastMSN = wr.msn
		q.SQ.Advance()
		q.SQ.Release()
		e.PostCQE(q.Session, q.SendCQ, &proto.CQE{WRID: wr.wrid, Status: proto.WCGeneralErr, Opcode: proto.WCSend, QPN: q.QPN})
		budget--
	}
	return work
}

// buildSend fills e.sb with the datagrams of the posted work requests, from
// the head's next segment on, with at most maxMsgs msghdrs. stop reports
// that the head could not be sent and q went to ERROR (a bad work request,
// a corrupt ring). dropped counts the work requests at the head that named
// a bad destination: each completed with an error, q goes on (ud/dest.go).
func (e *Engine) buildSend(q *QP, maxMsgs int) (msgs []unix.Mmsghdr, stop bool, dropped int) {
	for {
		msgs, stop, drop := e.buildSendOnce(q, maxMsgs-dropped)
		if !drop {
			return msgs, stop, dropped
		}
		dropped++
		if dropped >= maxMsgs {
			return nil, false, dropped
		}
	}
}

// buildSendOnce is one attempt of buildSend; drop reports that it completed
// the head work request (a bad destination) and built nothing.
func (e *Engine) buildSendOnce(q *QP, maxMsgs int) (msgs []unix.Mmsghdr, stop, drop bool) {
	v := q.SQView()
	head, idx, avail, err := v.Lookahead(q.SQ)
	if err != nil {
		e.count(q, rnic.CWRErrors, 1)
		e.errorQP(q, "send queue producer index is corrupt")
		return nil, true, false
	}
	b := e.Sb
	b.Reset(q.Gso)
	if avail == 0 {
		return b.Finish(), false, false
	}
	pay := e.maxPayload()
	for k := range min(avail, maxSendWRs) {
		wr := &e.sendWRs[k]
		if st, fatal := e.prepareSend(q, wr, v.At(head, idx, k), q.lastMSN+1+k, pay); st != proto.WCSuccess {
			switch {
			case k > 0:
				// sent (or failed) once the ones before it are done
			case fatal || q.sendSeg > 0: // (a destination rewritten under a message half sent)
				e.FailWR(q, q.SendCQ, wr.wrid, proto.WCSend, st)
				return nil, true, false
			default:
				e.dropSend(q, wr.wrid, st)
				return nil, false, true
			}
			break
		}
		seg := uint32(0)
		if k == 0 {
			seg = q.sendSeg
		}
		for ; seg < wr.segs.Count(); seg++ {
			s := wr.segs.Segment(seg)
			pieces := rnic.AppendRange(e.Pieces[:0], wr.payloads, int(s.Offset), s.Len)
			e.Pieces = pieces[:0]
			dlen := dgram.KeyHeaderLen + s.Header.Len() + s.Len + crc32c.Size
			if wr.wrec {
				dlen += rdmap.WriteRecordLen
			}
			if wr.hasImm {
				dlen += rdmap.ImmediateDataLen
			}
			if !b.Fits(wr.dst, dlen, 2+len(pieces), maxMsgs) {
				return b.Finish(), false, false
			}
			sc := b.NextScratch()
			hdr := dgram.Keys{QKey: wr.qkey, SrcQKey: q.Qkey}.Append(sc[:0])
			hdr = s.Header.Append(hdr)
			if wr.wrec {
				wr.rec.MessageOffset = s.Offset
				hdr = wr.rec.Append(hdr)
			}
			if wr.hasImm {
				hdr = append(hdr, wr.imm[:]...)
			}
			var c uint32
			if !q.NoCRC {
				c = crc32c.Update(0, hdr)
				for _, p := range pieces {
					c = crc32c.Update(c, p)
				}
			}
			trailer := sc[len(hdr) : len(hdr)+crc32c.Size]
			binary.LittleEndian.PutUint32(trailer, c)
			b.Push(wr.dst, hdr, pieces, trailer, DgramRef{wr: int32(k), Seg: seg})
		}
	}
	return b.Finish(), false, false
}

// sendDone accounts for the first sent msghdrs of e.sb: their datagrams
// left, and every work request whose last datagram left is consumed and
// completes (in order).
func (e *Engine) sendDone(q *QP, sent int) {
	for m := range sent {
		refs := e.Sb.MsgDgrams(m)
		if len(refs) > 1 {
			e.count(q, rnic.CGSOSends, 1)
		}
		e.count(q, rnic.CDatagramsOut, int64(len(refs)))
		for _, d := range refs {
			wr := &e.sendWRs[d.wr]
			if d.Seg+1 < wr.segs.Count() {
				q.sendSeg = d.Seg + 1
				continue
			}
			q.sendSeg = 0
			q.lastMSN = wr.msn
			q.SQ.Advance()
			e.count(q, rnic.CMessagesOut, 1)
			e.count(q, rnic.CBytesOut, int64(wr.total))
			if q.SigAll || wr.signaled {
				op := proto.WCSend
				if wr.wrec {
					op = proto.WCWriteRecord
				}
				e.PostCQE(q.Session, q.SendCQ, &proto.CQE{WRID: wr.wrid, Opcode: op, ByteLen: uint32(wr.total), QPN: q.QPN})
			}
		}
	}
	q.SQ.Release()
}

// maxPayload is the payload octets of one UD datagram's DDP segment.
func (e *Engine) maxPayload() int {
	return ddp.MaxPayload(dgram.MaxSegment(e.Cfg.DatagramSize, false), false, 0)
}

// prepareSend copies the SQE in slot into wr, validates it and translates
// its payload into wr.payloads (inline data is copied out of slot into
// wr.inline); the message gets MSN msn. fatal says whether the failure
// errors q (a bad work request) or fails this work request only (a bad
// destination: ud/dest.go).
func (e *Engine) prepareSend(q *QP, wr *sendWR, slot []byte, msn uint32, maxPayload int) (st proto.WCStatus, fatal bool) {
	var raw [proto.SQEHeaderLen]byte
	copy(raw[:], slot)
	sqe := proto.GetSQE(raw[:])
	wr.wrid = sqe.WRID
	if (sqe.Opcode != proto.WRSend && !sqe.Opcode.WriteRecord() && sqe.Opcode != proto.WRSendWithImm) ||
		!sqe.KnownFlags() || sqe.Flags&proto.SendFence != 0 {
		return proto.WCLocQPOpErr, true
	}
	dst, st := e.Destination(&sqe)
	if st != proto.WCSuccess {
		return st, false
	}
	wr.dst, wr.qkey = dst, sqe.QKey
	if !q.mcast.txReady && dst.Addr().IsMulticast() {
		e.mcastSendOptions(q) // ud/mcast.go
	}
	st = e.preparePayload(q, wr, &sqe, slot, msn, maxPayload)
	return st, st != proto.WCSuccess
}

// preparePayload finishes prepareSend: the payload and the segments.
func (e *Engine) preparePayload(q *QP, wr *sendWR, sqe *proto.SQE, slot []byte, msn uint32, maxPayload int) proto.WCStatus {
	wr.payloads = wr.payloads[:0]
	total := 0
	if sqe.Flags&proto.SendInline != 0 {
		if sqe.InlineLen > q.Caps.MaxInline {
			return proto.WCLocLenErr
		}
		n := int(sqe.InlineLen)
		wr.inline = append(wr.inline[:0], slot[proto.SQEHeaderLen:proto.SQEHeaderLen+n]...)
		wr.payloads = append(wr.payloads, wr.inline)
		total = n
	} else {
		if uint32(sqe.NumSGE) > q.Caps.MaxSendSGE {
			return proto.WCLocLenErr
		}
		var sraw [proto.SGELen]byte
		for i := range int(sqe.NumSGE) {
			off := proto.SQEHeaderLen + i*proto.SGELen
			copy(sraw[:], slot[off:off+proto.SGELen])
			b, st := q.Translate(proto.GetSGE(sraw[:]), q.PD, false)
			if st != proto.WCSuccess {
				return st
			}
			wr.payloads = append(wr.payloads, b)
			total += len(b)
		}
	}
	if total > e.Cfg.MaxMsgUD {
		return proto.WCLocLenErr
	}
	wr.wrec = sqe.Opcode.WriteRecord()
	if wr.wrec {
		return e.prepareWriteRecord(wr, sqe, msn, total) // ud/wrec_send.go
	}
	op := rdmap.OpSend
	if sqe.Flags&proto.SendSolicited != 0 {
		op = rdmap.OpSendSE
	}
	wr.hasImm = sqe.Opcode == proto.WRSendWithImm
	if wr.hasImm {
		op = rdmap.OpImmediateData
		if sqe.Flags&proto.SendSolicited != 0 {
			op = rdmap.OpImmediateDataSE
		}
		wr.imm = rdmap.MakeImmediateData(sqe.Imm).Raw
		maxPayload -= rdmap.ImmediateDataLen
	}
	segs, err := ddp.UntaggedSegments(uint8(rdmap.MakeControl(op)), 0, rdmap.QNSend, msn, uint32(total), maxPayload)
	if err != nil { // cannot happen with a validated configuration
		return proto.WCGeneralErr
	}
	wr.msn, wr.total, wr.segs = msn, total, segs
	wr.signaled = sqe.Flags&proto.SendSignaled != 0
	return proto.WCSuccess
}

// FailWR completes the head work request of a queue with an error status and
// moves q to ERROR (verbs: local errors error the QP); the rest is flushed.
func (e *Engine) FailWR(q *QP, c *rnic.CQ, wrid uint64, op proto.WCOpcode, status proto.WCStatus) {
	e.count(q, rnic.CWRErrors, 1)
	if op == proto.WCSend {
		q.SQ.Advance()
		q.SQ.Release()
		q.sendSeg = 0
	} else {
		rc := q.RecvRing()
		rc.Advance()
		rc.Release()
		q.rwr.Valid = false
	}
	e.PostCQE(q.Session, c, &proto.CQE{WRID: wrid, Status: status, Opcode: op, QPN: q.QPN})
	e.errorQP(q, "work request "+status.String())
}

// Flush completes the posted work requests of an ERROR QP with
// WCWRFlushErr (rnic/flush.go FlushPosted); the head send's segmenting
// starts over.
// While the rank owns the socket it may be consuming the receive queue:
// the flush waits for the take-over (at once for a QP in ERROR,
// rnic/fastpath.go), ud/fastpath.go.
func (e *Engine) Flush(q *QP) bool {
	if !q.DaemonReads() {
		return false
	}
	q.sendSeg = 0
	return e.FlushPosted(q.QP)
}
