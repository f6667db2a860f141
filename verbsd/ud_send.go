package verbsd

import (
	"encoding/binary"
	"errors"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"golang.org/x/sys/unix"
)

// send serves q's send queue: at most PollBatch datagrams per pass. Each
// message is one DDP untagged message on QN 0 (RDMAP Send or Send with SE),
// MSN per QP from 1, cut into datagrams of at most Config.DatagramSize
// octets. Every datagram is one sendmsg whose vector is [DDP header][the
// registered octets it carries...][CRC trailer]: no staging copy (inline
// data is copied once, out of the SQE, as the SQE itself is).
func (e *engine) send(q *qp) bool {
	q.blocked = false
	work := false
	budget := e.cfg.PollBatch
	for budget > 0 {
		slot, err := q.sq.Peek()
		if err != nil {
			e.count(q, cWRErrors, 1)
			e.errorQP(q, "send queue producer index is corrupt")
			return true
		}
		if slot == nil {
			break
		}
		work = true
		var raw [proto.SQEHeaderLen]byte
		copy(raw[:], slot)
		sqe := proto.GetSQE(raw[:])
		a, total, status := e.prepareSend(q, &sqe, slot)
		if status != proto.WCSuccess {
			e.failWR(q, q.sendCQ, sqe.WRID, proto.WCSend, status)
			return true
		}
		if q.sendSeg == 0 {
			q.sendMSN = q.lastMSN + 1
		}
		op := rdmap.OpSend
		if sqe.Flags&proto.SendSolicited != 0 {
			op = rdmap.OpSendSE
		}
		segs, err := ddp.UntaggedSegments(uint8(rdmap.MakeControl(op)), 0, rdmap.QNSend, q.sendMSN, uint32(total), e.maxPayload())
		if err != nil { // cannot happen with a validated configuration
			e.failWR(q, q.sendCQ, sqe.WRID, proto.WCSend, proto.WCGeneralErr)
			return true
		}
		for q.sendSeg < segs.Count() {
			if budget == 0 {
				return true
			}
			budget--
			seg := segs.Segment(q.sendSeg)
			iov := append(e.iov[:0], seg.Header.Append(q.ddpHdr[:0]))
			iov = appendRange(iov, q.payloads, int(seg.Offset), seg.Len)
			var c uint32
			if !q.noCRC {
				c = dgram.Checksum(iov...)
			}
			binary.LittleEndian.PutUint32(q.crcBuf[:], c)
			iov = append(iov, q.crcBuf[:])
			n, err := unix.SendmsgBuffers(q.fd, iov, nil, a.sa, unix.MSG_DONTWAIT)
			e.iov = iov[:0]
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EINTR) {
				q.blocked = true
				e.count(q, cSendBlocked, 1)
				return true
			}
			if err != nil {
				// The kernel refused the datagram (unreachable, too big):
				// that work request fails; the QP, shared by many peers,
				// goes on.
				e.count(q, cSendErrors, 1)
				q.sendSeg = 0
				q.sq.Advance()
				q.sq.Release()
				e.postCQE(q.s, q.sendCQ, &proto.CQE{WRID: sqe.WRID, Status: proto.WCGeneralErr, Opcode: proto.WCSend, QPN: q.qpn})
				break
			}
			e.count(q, cDatagramsOut, 1)
			_ = n
			q.sendSeg++
		}
		if q.sendSeg == 0 { // failed above
			continue
		}
		q.sendSeg = 0
		q.lastMSN = q.sendMSN
		q.sq.Advance()
		q.sq.Release()
		e.count(q, cMessagesOut, 1)
		e.count(q, cBytesOut, int64(total))
		if q.sigAll || sqe.Flags&proto.SendSignaled != 0 {
			e.postCQE(q.s, q.sendCQ, &proto.CQE{WRID: sqe.WRID, Opcode: proto.WCSend, ByteLen: uint32(total), QPN: q.qpn})
		}
	}
	return work
}

// maxPayload is the payload octets of one UD datagram's DDP segment.
func (e *engine) maxPayload() int {
	return ddp.MaxPayload(dgram.MaxSegment(e.cfg.DatagramSize, false), false, 0)
}

// prepareSend validates the copied SQE header and translates its payload
// into q.payloads (inline data is copied out of slot into q.inline).
func (e *engine) prepareSend(q *qp, sqe *proto.SQE, slot []byte) (*ah, int, proto.WCStatus) {
	if sqe.Opcode != proto.WRSend || !sqe.KnownFlags() || sqe.Flags&proto.SendFence != 0 {
		return nil, 0, proto.WCLocQPOpErr
	}
	a := q.s.ahs[sqe.AH]
	if a == nil || a.pd != q.pd {
		return nil, 0, proto.WCLocQPOpErr
	}
	q.payloads = q.payloads[:0]
	total := 0
	if sqe.Flags&proto.SendInline != 0 {
		if sqe.InlineLen > q.caps.MaxInline {
			return nil, 0, proto.WCLocLenErr
		}
		n := int(sqe.InlineLen)
		q.inline = append(q.inline[:0], slot[proto.SQEHeaderLen:proto.SQEHeaderLen+n]...)
		q.payloads = append(q.payloads, q.inline)
		total = n
	} else {
		if uint32(sqe.NumSGE) > q.caps.MaxSendSGE {
			return nil, 0, proto.WCLocLenErr
		}
		var raw [proto.SGELen]byte
		for i := range int(sqe.NumSGE) {
			off := proto.SQEHeaderLen + i*proto.SGELen
			copy(raw[:], slot[off:off+proto.SGELen])
			b, st := q.s.translate(proto.GetSGE(raw[:]), q.pd, false)
			if st != proto.WCSuccess {
				return nil, 0, st
			}
			q.payloads = append(q.payloads, b)
			total += len(b)
		}
	}
	if total > e.cfg.MaxMsgUD {
		return nil, 0, proto.WCLocLenErr
	}
	return a, total, proto.WCSuccess
}

// failWR completes the head work request of a queue with an error status and
// moves q to ERROR (verbs: local errors error the QP); the rest is flushed.
func (e *engine) failWR(q *qp, c *cq, wrid uint64, op proto.WCOpcode, status proto.WCStatus) {
	e.count(q, cWRErrors, 1)
	if op == proto.WCSend {
		q.sq.Advance()
		q.sq.Release()
		q.sendSeg = 0
	} else {
		rc := q.recvRing()
		rc.Advance()
		rc.Release()
		q.rwr.valid = false
	}
	e.postCQE(q.s, c, &proto.CQE{WRID: wrid, Status: status, Opcode: op, QPN: q.qpn})
	e.errorQP(q, "work request "+status.String())
}
