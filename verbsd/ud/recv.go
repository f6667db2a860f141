package ud

import (
	"errors"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// receive reads q's socket with recvmmsg, at most PollBatch buffers per
// pass, up to recvSlots per call, into the engine's scratch (slot i:
// [header scratch][tail scratch]). Each datagram is judged whole — Q_Key,
// CRC, headers, lengths — before any octet of it reaches client memory:
// a single-datagram message is then copied into the receive it completes
// (the head of the ring; the receives are looked at ahead and translated
// once per batch, not placed into), and nothing else of the client's is
// written: were the slots' vectors to point into the posted receives'
// buffers, a datagram dropped afterwards (a bad CRC, a wrong key) would
// already have overwritten a buffer that another receive on the same
// memory had completed. Segments of larger messages
// are copied into a reassembly buffer and, once complete, into the next
// posted receive. With UDP_GRO a buffer may hold several datagrams of one
// flow (all of the segment size the kernel reports, but the last): they
// are taken apart and judged one by one.
func (e *Engine) receive(q *QP, now time.Time) bool {
	if q.backlog.waiting() || q.backlog.parked { // ud/backlog.go: held datagrams come first
		return false
	}
	work := false
	if !q.DaemonReads() { // rnic/fastpath.go: not while the rank owns the socket
		q.Readable = false
		return false // nor its groups' sockets: the rank consumes the receives (ud/fastpath.go)
	}
	work = e.receiveFrom(q, q.FD, false, now)
	for _, m := range q.mcast.socks { // multicast groups the QP is attached to (ud/mcast.go)
		if q.backlog.waiting() || q.backlog.parked {
			break
		}
		if e.receiveFrom(q, m.fd, true, now) {
			work = true
		}
	}
	return work
}

// receiveFrom serves one socket of q (its own, or a multicast group's).
// While q delivers, a recvmmsg asks for one datagram more than q has
// posted receives, and, when it has none, only for a datagram that cannot
// consume one: a datagram that needs a receive and finds none is held, or
// waits in the socket with q parked (ud/backlog.go).
func (e *Engine) receiveFrom(q *QP, fd int, mcast bool, now time.Time) bool {
	work := false
	q.rwr.Valid = false // translations are good for one pass only
	budget := e.Cfg.PollBatch
	rb := e.Rb
	rb.mcast = mcast
	for budget > 0 {
		deliver := q.delivers()
		rb.Nrqe, rb.Used = 0, 0
		want := min(budget, RecvSlots)
		if deliver {
			posted := q.postedRecvs()
			if posted == 0 {
				// ud/backlog.go: read the head only if it needs no receive.
				need, empty := e.headNeedsRecv(q, fd)
				if empty {
					q.Readable = false
					break
				}
				if need {
					e.park(q)
					break
				}
				posted = 0 // one buffer, judged (slot holds what needs a receive)
			}
			// One more than the receives: a read that returns fewer says
			// the socket is drained (no further call, as before the
			// backlog); the one beyond, if it needs a receive, is held.
			want = min(want, posted+1)
			e.lookaheadRecv(q, want)
			deliver = q.State != proto.QPStateError
		}
		got, err := SysRecvmmsg(fd, rb.Prepare(want))
		if err != nil {
			if errors.Is(err, unix.EAGAIN) {
				q.Readable = false
			} else if errors.Is(err, unix.EFAULT) {
				// A posted receive's memory has a page that is not there
				// (punched out after registration: rnic/holeguard.go); the
				// kernel dropped the datagram. A local error of this QP.
				e.count(q, rnic.CMemoryFaults, 1)
				e.errorQP(q, "a posted receive's memory has a page that is not present (punched out after registration)")
			} else if q.ClientSock && !errors.Is(err, unix.EINTR) && fd == q.FD {
				e.SocketFailed(q.QP, "recvmmsg", err) // rnic/qpsock.go: never the engine's
			}
			break
		}
		work = true
		budget -= got
		e.count(q, rnic.CRecvCalls, 1)
		rb.Received(got)
		for i := range got {
			e.slot(q, i, deliver, now)
		}
		q.rwr.Valid = false
		if q.backlog.waiting() {
			break // receives ran out within a GRO buffer: the rest is held
		}
		if got < want {
			q.Readable = false // drained; epoll says when more comes
			break
		}
	}
	return work
}

// lookaheadRecv validates up to n posted receives from the head into
// e.rb.rqes (without consuming them). A bad head completes with an error
// and moves q to ERROR; a bad receive further on ends the look-ahead (it
// fails when it is the head).
func (e *Engine) lookaheadRecv(q *QP, n int) {
	rb := e.Rb
	c := q.RecvRing()
	v := q.RecvView()
	head, idx, avail, err := v.Lookahead(c)
	if err != nil {
		e.count(q, rnic.CWRErrors, 1)
		e.errorQP(q, "receive queue producer index is corrupt")
		return
	}
	for k := range min(int(avail), n) {
		w := &rb.Rqes[k]
		if st := e.LoadRecv(q, w, v.At(head, idx, uint32(k))); st != proto.WCSuccess {
			if k == 0 {
				e.FailWR(q, q.RecvCQ, w.WRID, proto.WCRecv, st)
			}
			return
		}
		rb.Nrqe = k + 1
	}
}

// slot judges the datagram(s) in receive slot i. A datagram that finds no
// posted receive, and every one after it in the batch, is held
// (ud/backlog.go).
func (e *Engine) slot(q *QP, i int, deliver bool, now time.Time) {
	s := &e.Rb.Slots[i]
	switch {
	case !deliver || !q.delivers():
		e.count(q, rnic.CDatagramsIn, 1)
		e.count(q, rnic.CDropNotReady, 1)
	case s.Trunc:
		e.count(q, rnic.CDatagramsIn, 1)
		e.count(q, rnic.CDropTruncated, 1)
	case s.Gso > 0 && s.N > s.Gso:
		e.count(q, rnic.CGROCoalesced, 1)
		for off := 0; off < s.N; off += s.Gso {
			n := min(s.Gso, s.N-off)
			if q.backlog.waiting() || e.needHold(q, i, off, n) {
				e.hold(q, i, off, n)
				continue
			}
			e.count(q, rnic.CDatagramsIn, 1)
			e.datagram(q, i, off, n, now)
		}
	case q.backlog.waiting() || e.needHold(q, i, 0, s.N):
		e.hold(q, i, 0, s.N)
	default:
		e.count(q, rnic.CDatagramsIn, 1)
		e.datagram(q, i, 0, s.N, now)
	}
}

// datagram judges one received datagram (n octets at off of slot i's view)
// and delivers it. Whatever is wrong with it, it is dropped and counted by
// reason; a datagram never errors the QP, which many peers share. The key
// header is judged first: a datagram that does not name q's Q_Key is
// dropped before anything else of it is looked at.
func (e *Engine) datagram(q *QP, i, off, n int, now time.Time) {
	s := &e.Rb.Slots[i]
	view := s.View
	if n < dgram.KeyHeaderLen+ddp.TaggedHeaderLen+crc32c.Size {
		e.count(q, rnic.CDropTruncated, 1)
		return
	}
	var kb [dgram.KeyHeaderLen]byte
	rnic.CopyRange(kb[:], view, off)
	keys, _ := dgram.ParseKeys(kb[:])
	if keys.QKey != q.Qkey {
		e.count(q, rnic.CDropQKey, 1)
		return
	}
	body := n - crc32c.Size
	if !q.NoCRC && ChecksumAt(view, off, body) != rnic.TrailerAt(view, off+body) {
		e.count(q, rnic.CDropCRC, 1)
		q.badCRC(s.Src, rnic.TrailerAt(view, off+body)) // ud/crc_log.go
		return
	}
	// From here on off and n cover the DDP segment and the trailer.
	e.Rb.srcQKey = keys.SrcQKey
	off += dgram.KeyHeaderLen
	n -= dgram.KeyHeaderLen
	body -= dgram.KeyHeaderLen
	var hb [ddp.UntaggedHeaderLen]byte
	rnic.CopyRange(hb[:], view, off)
	if hb[0]&0x80 != 0 {
		e.writeRecordSegment(q, i, off, n, now) // ud/wrec_recv.go (drops other tagged opcodes)
		return
	}
	if body < ddp.UntaggedHeaderLen {
		e.count(q, rnic.CDropTruncated, 1)
		return
	}
	h, _, _ := ddp.Parse(hb[:])
	ctl := rdmap.Control(h.ULPControl)
	if h.Version != ddp.Version || ctl.Version() != rdmap.Version {
		e.count(q, rnic.CDropBadVersion, 1)
		return
	}
	op := ctl.Opcode()
	if op == rdmap.OpTerminate && h.QN == rdmap.QNTerminate {
		e.errorMessageIn(q, i, off, body, &h) // ud/wrec_term.go
		return
	}
	imm := op == rdmap.OpImmediateData || op == rdmap.OpImmediateDataSE
	if op != rdmap.OpSend && op != rdmap.OpSendSE && !imm {
		e.count(q, rnic.CDropBadOpcode, 1)
		return
	}
	if h.QN != rdmap.QNSend {
		e.count(q, rnic.CDropBadQN, 1)
		return
	}
	payload := body - ddp.UntaggedHeaderLen
	solicited := op == rdmap.OpSendSE || op == rdmap.OpImmediateDataSE
	hdrLen := ddp.UntaggedHeaderLen
	if imm {
		// Send with Immediate: the 8 octets before the payload of every
		// segment. Always through the reassembler.
		if payload < rdmap.ImmediateDataLen {
			e.count(q, rnic.CDropTruncated, 1)
			return
		}
		var raw [rdmap.ImmediateDataLen]byte
		rnic.CopyRange(raw[:], view, off+ddp.UntaggedHeaderLen)
		d, _, _ := rdmap.ParseImmediateData(raw[:])
		e.curImm, e.curHasImm = d.Value(), true
		defer func() { e.curImm, e.curHasImm = 0, false }()
		payload -= rdmap.ImmediateDataLen
		hdrLen += rdmap.ImmediateDataLen
	}
	if h.MO == 0 && h.Last && !imm {
		w := e.recvFor(q)
		if w == nil {
			e.count(q, rnic.CDropNoRecv, 1)
			return
		}
		if payload > w.Total {
			e.count(q, rnic.CRecvTooLong, 1)
			e.completeRecv(q, w, proto.WCLocLenErr, payload, s.Src, solicited)
			return
		}
		e.count(q, rnic.CRecvCopied, 1)
		rnic.CopyBetween(w.Bufs, s.View, off+ddp.UntaggedHeaderLen, payload)
		e.completeRecv(q, w, proto.WCSuccess, payload, s.Src, solicited)
		return
	}
	if uint64(h.MO)+uint64(payload) > uint64(e.Cfg.MaxMsgUD) || (payload == 0 && !h.Last) {
		e.count(q, rnic.CDropBadSegment, 1)
		return
	}
	msg, res := q.reasm.Add(PartialKey{src: s.Src, msn: h.MSN}, h.MO, h.Last, view, off+hdrLen, payload,
		solicited, now.Add(e.Cfg.ReassemblyTimeout), e.Cfg.MaxPartial, e.Cfg.MaxMsgUD)
	switch res {
	case AddEvicted:
		e.count(q, rnic.CReassemblyEvicted, 1)
	case AddBad:
		e.count(q, rnic.CDropBadSegment, 1)
	}
	if msg == nil {
		return
	}
	defer q.reasm.Release(msg)
	w := e.recvFor(q)
	if w == nil {
		e.count(q, rnic.CDropNoRecv, 1)
		return
	}
	if len(msg.Buf) > w.Total {
		e.count(q, rnic.CRecvTooLong, 1)
		e.completeRecv(q, w, proto.WCLocLenErr, len(msg.Buf), s.Src, msg.solicited)
		return
	}
	rnic.Scatter(w.Bufs, msg.Buf)
	e.completeRecv(q, w, proto.WCSuccess, len(msg.Buf), s.Src, msg.solicited)
}

// recvFor returns the receive the next message completes (the head of the
// receive ring: translated by the batch's look-ahead, or loaded now), or
// nil when none is posted (or the head is bad: it completes with an error
// and q goes to ERROR).
func (e *Engine) recvFor(q *QP) (w *rnic.RecvWR) {
	rb := e.Rb
	if c := rb.Used; c < rb.Nrqe {
		return &rb.Rqes[c]
	}
	if q.State == proto.QPStateError {
		return nil
	}
	slot, err := q.RecvRing().Peek()
	if err != nil {
		e.count(q, rnic.CWRErrors, 1)
		e.errorQP(q, "receive queue producer index is corrupt")
		return nil
	}
	if slot == nil {
		return nil
	}
	w = &rb.extra
	if st := e.LoadRecv(q, w, slot); st != proto.WCSuccess {
		e.FailWR(q, q.RecvCQ, w.WRID, proto.WCRecv, st)
		return nil
	}
	return w
}

// LoadRecv copies the RQE in slot into w, validates it and translates its
// buffers (for this pass only).
func (e *Engine) LoadRecv(q *QP, w *rnic.RecvWR, slot []byte) proto.WCStatus {
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
	var sraw [proto.SGELen]byte
	for i := range int(rqe.NumSGE) {
		off := proto.RQEHeaderLen + i*proto.SGELen
		copy(sraw[:], slot[off:off+proto.SGELen])
		b, st := q.Translate(proto.GetSGE(sraw[:]), p, true)
		if st != proto.WCSuccess {
			return st
		}
		if len(b) > 0 {
			w.Bufs = append(w.Bufs, b)
		}
		w.Total += len(b)
	}
	w.Valid = true
	return proto.WCSuccess
}

// completeRecv consumes the head receive w and posts its completion.
func (e *Engine) completeRecv(q *QP, w *rnic.RecvWR, status proto.WCStatus, n int, src netip.AddrPort, solicited bool) {
	fault := false
	if status == proto.WCSuccess && e.Commit(w.Bufs, 0, n) != nil { // rnic/stage.go: process memory
		status, fault = proto.WCLocProtErr, true
	}
	c := q.RecvRing()
	c.Advance()
	c.Release()
	e.Rb.Used++
	w.Valid = false
	flags := proto.WCFlagSrcValid
	if solicited {
		flags |= proto.WCFlagSolicited
	}
	if e.curHasImm {
		flags |= proto.WCFlagImm
	}
	if status == proto.WCSuccess {
		e.count(q, rnic.CMessagesIn, 1)
		e.count(q, rnic.CBytesIn, int64(n))
	}
	e.PostCQE(q.Session, q.RecvCQ, &proto.CQE{WRID: w.WRID, Status: status, Opcode: proto.WCRecv, Flags: flags,
		ByteLen: uint32(n), QPN: q.QPN, Src: src, Imm: e.curImm})
	if s := q.SRQ; s != nil && s.Limit > 0 {
		if avail, err := s.Cons.Available(); err == nil && avail < s.Limit {
			s.Limit = 0
			q.Session.SendEvent(e.Engine, proto.Event{Type: proto.EventSRQLimit, Handle: s.Handle})
		}
	}
	if fault {
		e.errorQP(q, "a receive buffer's process memory was unmapped while registered")
	}
}
