package verbsd

import (
	"errors"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"golang.org/x/sys/unix"
)

// tailLen is the overflow scratch of recvmsg: any UDP payload fits.
const tailLen = 64 << 10

// receive reads at most PollBatch datagrams from q's socket. When a receive
// is posted, the vector is [DDP header scratch][the RQE's buffers...][tail
// scratch], so a single-datagram message lands straight in registered
// memory (up to 4 octets past its end in the posted buffer may hold the CRC
// trailer). Segments of larger messages are copied into a reassembly buffer
// and, once complete, into the next posted receive.
func (e *engine) receive(q *qp, now time.Time) bool {
	work := false
	q.rwr.valid = false // translations are good for one pass only
	for range e.cfg.PollBatch {
		deliver := q.state == proto.QPStateRTR || q.state == proto.QPStateRTS
		if deliver {
			e.peekRecv(q)
			deliver = q.state != proto.QPStateError
		}
		iov := append(e.iov[:0], q.hdr[:ddp.UntaggedHeaderLen])
		if deliver && q.rwr.valid {
			iov = append(iov, q.rwr.bufs...)
		}
		iov = append(iov, q.tail)
		n, _, flags, from, err := unix.RecvmsgBuffers(q.fd, iov, nil, unix.MSG_DONTWAIT)
		e.iov = iov[:0]
		if err != nil {
			if errors.Is(err, unix.EAGAIN) {
				q.readable = false
			}
			break
		}
		work = true
		e.count(q, cDatagramsIn, 1)
		switch {
		case !deliver:
			e.count(q, cDropNotReady, 1)
		case flags&unix.MSG_TRUNC != 0:
			e.count(q, cDropTruncated, 1)
		default:
			e.datagram(q, iov, n, sockaddrToAddr(from), now)
		}
	}
	return work
}

// datagram judges one received datagram (n octets laid over iov) and
// delivers it. Whatever is wrong with it, it is dropped and counted by
// reason; a datagram never errors the QP, which many peers share.
func (e *engine) datagram(q *qp, iov [][]byte, n int, src netip.AddrPort, now time.Time) {
	if n < ddp.TaggedHeaderLen+crc32c.Size {
		e.count(q, cDropTruncated, 1)
		return
	}
	body := n - crc32c.Size
	if !q.noCRC && checksumRange(iov, body) != trailerAt(iov, body) {
		e.count(q, cDropCRC, 1)
		return
	}
	if q.hdr[0]&0x80 != 0 {
		e.count(q, cDropTagged, 1)
		return
	}
	if body < ddp.UntaggedHeaderLen {
		e.count(q, cDropTruncated, 1)
		return
	}
	h, _, _ := ddp.Parse(q.hdr[:ddp.UntaggedHeaderLen])
	ctl := rdmap.Control(h.ULPControl)
	if h.Version != ddp.Version || ctl.Version() != rdmap.Version {
		e.count(q, cDropBadVersion, 1)
		return
	}
	op := ctl.Opcode()
	if op != rdmap.OpSend && op != rdmap.OpSendSE {
		e.count(q, cDropBadOpcode, 1)
		return
	}
	if h.QN != rdmap.QNSend {
		e.count(q, cDropBadQN, 1)
		return
	}
	payload := body - ddp.UntaggedHeaderLen
	solicited := op == rdmap.OpSendSE
	if h.MO == 0 && h.Last {
		if !q.rwr.valid {
			e.count(q, cDropNoRecv, 1)
			return
		}
		if payload > q.rwr.total {
			e.count(q, cRecvTooLong, 1)
			e.completeRecv(q, proto.WCLocLenErr, payload, src, solicited)
			return
		}
		e.completeRecv(q, proto.WCSuccess, payload, src, solicited)
		return
	}
	if uint64(h.MO)+uint64(payload) > uint64(e.cfg.MaxMsgUD) || (payload == 0 && !h.Last) {
		e.count(q, cDropBadSegment, 1)
		return
	}
	msg, res := q.reasm.add(partialKey{src: src, msn: h.MSN}, h.MO, h.Last, iov, ddp.UntaggedHeaderLen, payload, solicited,
		now.Add(e.cfg.ReassemblyTimeout), e.cfg.MaxPartial, e.cfg.MaxMsgUD)
	switch res {
	case addEvicted:
		e.count(q, cReassemblyEvicted, 1)
	case addBad:
		e.count(q, cDropBadSegment, 1)
	}
	if msg == nil {
		return
	}
	defer q.reasm.release(msg)
	if !q.rwr.valid {
		e.count(q, cDropNoRecv, 1)
		return
	}
	if len(msg.buf) > q.rwr.total {
		e.count(q, cRecvTooLong, 1)
		e.completeRecv(q, proto.WCLocLenErr, len(msg.buf), src, msg.solicited)
		return
	}
	scatter(q.rwr.bufs, msg.buf)
	e.completeRecv(q, proto.WCSuccess, len(msg.buf), src, msg.solicited)
}

// peekRecv copies and validates the next posted receive into q.rwr (if
// there is one and q.rwr is not already valid). A bad receive work request
// completes with an error and moves q to ERROR.
func (e *engine) peekRecv(q *qp) {
	if q.rwr.valid {
		return
	}
	c := q.recvRing()
	slot, err := c.Peek()
	if err != nil {
		e.count(q, cWRErrors, 1)
		e.errorQP(q, "receive queue producer index is corrupt")
		return
	}
	if slot == nil {
		return
	}
	var raw [proto.RQEHeaderLen]byte
	copy(raw[:], slot)
	rqe := proto.GetRQE(raw[:])
	if uint32(rqe.NumSGE) > q.maxRecvS {
		e.failWR(q, q.recvCQ, rqe.WRID, proto.WCRecv, proto.WCLocLenErr)
		return
	}
	p := q.pd
	if q.srq != nil {
		p = q.srq.pd
	}
	q.rwr.bufs = q.rwr.bufs[:0]
	q.rwr.total = 0
	var sraw [proto.SGELen]byte
	for i := range int(rqe.NumSGE) {
		off := proto.RQEHeaderLen + i*proto.SGELen
		copy(sraw[:], slot[off:off+proto.SGELen])
		b, st := q.s.translate(proto.GetSGE(sraw[:]), p, true)
		if st != proto.WCSuccess {
			e.failWR(q, q.recvCQ, rqe.WRID, proto.WCRecv, st)
			return
		}
		if len(b) > 0 {
			q.rwr.bufs = append(q.rwr.bufs, b)
		}
		q.rwr.total += len(b)
	}
	q.rwr.wrid = rqe.WRID
	q.rwr.valid = true
}

// completeRecv consumes the receive in q.rwr and posts its completion.
func (e *engine) completeRecv(q *qp, status proto.WCStatus, n int, src netip.AddrPort, solicited bool) {
	c := q.recvRing()
	c.Advance()
	c.Release()
	q.rwr.valid = false
	flags := proto.WCFlagSrcValid
	if solicited {
		flags |= proto.WCFlagSolicited
	}
	if status == proto.WCSuccess {
		e.count(q, cMessagesIn, 1)
		e.count(q, cBytesIn, int64(n))
	}
	e.postCQE(q.s, q.recvCQ, &proto.CQE{WRID: q.rwr.wrid, Status: status, Opcode: proto.WCRecv, Flags: flags,
		ByteLen: uint32(n), QPN: q.qpn, Src: src})
	if s := q.srq; s != nil && s.limit > 0 {
		if avail, err := s.cons.Available(); err == nil && avail < s.limit {
			s.limit = 0
			q.s.sendEvent(e, proto.Event{Type: proto.EventSRQLimit, Handle: s.handle})
		}
	}
}
