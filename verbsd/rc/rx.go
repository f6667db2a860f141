package rc

import (
	"errors"
	"io"
	"math"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// The RC receive side. FPDUs are read from the socket with mpa.Receiver in
// steps that survive EAGAIN at any octet: the DDP header (and the RDMAP
// header of a Read Request or Terminate) into a small header buffer, then
// the payload straight into its destination in registered memory (the MR
// at the tagged offset, or the SGEs of the receive WR at the MO), then PAD
// and CRC. Every segment is checked before anything is placed, in siw's
// order: DDP version, QN, RDMAP version, opcode, then tagged (STag, PD,
// access, bounds) or untagged (MSN, buffer, MO, length) checks. A
// violation sends a Terminate with the RFC 6580 code and the offending
// headers, and nothing more is read. Small FPDUs come many per readv
// through the connection's receive buffer (rc/rxbuf.go).
//
// Last byte last (DESIGN.md §5): the final octet of an RDMA Write or Read
// Response (the last octet of the segment with L set) is read into a
// one-octet scratch and stored only after the rest is placed and the CRC
// checked, so a process polling it never sees it before the rest of the
// message. (A segment whose CRC fails never gets its last octet.)
//
// Back-pressure: the receive side never reads more than it can place: a
// Send finds its receive WR before any payload is read (none posted: a
// Terminate "invalid MSN, no buffer", as siw; on a QP created with
// hold_recv the message is read into a bounded hold instead, rc/hold.go),
// Read Requests beyond IRD are refused with "invalid MSN range" (siw), and
// nothing else is staged.

// errRCStopped stops the receive loop: the QP is terminating or closed.
var errRCStopped = errors.New("verbsd: rc: receive stopped")

type rxStep uint8

const (
	rxHeader rxStep = iota
	rxHeaderRest
	rxPayload
	rxFinish
)

// rxHeaderMax: the DDP header plus the longest RDMAP header we read
// (a Terminate: 4 + 2 + 18 + 28).
const rxHeaderMax = ddp.UntaggedHeaderLen + 64

// rx is the FPDU being received.
type rx struct {
	step    rxStep
	hdr     [rxHeaderMax]byte
	got     int // octets of hdr filled
	want    int // octets of hdr to fill
	ulen    int
	parsed  bool
	h       ddp.Header
	op      rdmap.Opcode
	rtr     bool // the zero-length Send RTR: consumed, not delivered
	immHold bool // a tagged Immediate Data held for the next Send (rc/imm.go)
	payLen  int
	placed  int
	hold    bool // the last payload octet goes through last
	last    [1]byte
	lastGot bool
	dst     [][]byte // destination of the payload (this pass)
	fresh   bool
	scratch []byte // discard buffer while draining after a Terminate
	rd      reader
}

// read is an outstanding RDMA Read (requester).
type read struct {
	seq      uint64
	internal bool   // the RTR: no work request
	atomic   bool   // an RFC 7306 atomic (rc/atomic.go): answered by an Atomic Response
	reqID    uint32 // its Request Identifier
	sge      proto.SGE
	stag     uint32
	to       uint64
	size     uint32
	placed   uint32
}

// readResp is an accepted Read Request to answer (responder).
type readResp struct {
	sinkStag uint32
	sinkTO   uint64
	size     uint32
	srcStag  uint32
	srcTO    uint64
	started  bool
	ddpHdr   [ddp.UntaggedHeaderLen]byte
	rdmaHdr  [rdmap.ReadRequestLen]byte
	atomic   bool                          // an executed Atomic Request: send resp (rc/atomic.go)
	resp     [rdmap.AtomicResponseLen]byte // its Atomic Response
}

// recv is the receive WR of the Send being received.
type recv struct {
	active bool
	wrid   uint64
	sges   []proto.SGE
	total  uint64
	placed uint32
	hasImm bool   // a merged Immediate Data's value completes with it (rc/imm.go)
	immSE  bool   // that Immediate Data had Solicited Event
	imm    uint32 // its value
}

// fd reads a non-blocking socket (what is left after a Terminate).
type fd int

func (fd fd) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(int(fd), b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(b) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

// receive reads and processes FPDUs of q until the socket is empty or
// PollBatch FPDUs were processed.
func (e *engine) receive(q *QP) bool {
	c := q.Conn
	if c.discard {
		return e.discard(q)
	}
	if !c.rxOn {
		q.Readable = false
		return false
	}
	rd := &c.rx.rd
	rd.fd = c.Fd
	rd.rearm()
	defer func() { e.count(q, rnic.CRecvCalls, rd.takeCalls()) }() // rxbuf.go
	c.rx.fresh = false
	work := false
	for range e.Cfg.PollBatch {
		done, err := e.readFPDU(q, rd)
		work = work || done
		switch {
		case err == nil:
		case errors.Is(err, unix.EAGAIN):
			q.Readable = false
			return work
		case errors.Is(err, errRCStopped):
			q.Readable = false
			return true
		default:
			e.rxError(q, err)
			return true
		}
		if !c.rxOn || c.Fd < 0 {
			q.Readable = false
			return true
		}
	}
	return true
}

// rxError handles a failed read: the peer's FIN between FPDUs is a
// graceful end, a marker mismatch is an MPA error (Terminate), anything
// else ends the connection.
func (e *engine) rxError(q *QP, err error) {
	switch {
	case errors.Is(err, io.EOF):
		e.close(q, ClosedGraceful, "")
	case errors.Is(err, iwerr.MPAMarkerMismatch):
		e.terminate(q, iwerr.MPAMarkerMismatch, nil, nil, -1)
	default:
		e.socketError(q, err)
	}
}

// discard reads and drops what arrives after our Terminate, until the
// peer's FIN.
func (e *engine) discard(q *QP) bool {
	c := q.Conn
	c.rx.rd.reset() // read ahead: dropped too
	if c.rx.scratch == nil {
		c.rx.scratch = make([]byte, 4096)
	}
	for range e.Cfg.PollBatch {
		n, err := fd(c.Fd).Read(c.rx.scratch)
		if n > 0 {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			q.Readable = false
			return false
		}
		e.close(q, ClosedTermSent, "")
		return true
	}
	return true
}

// readFPDU advances the FPDU being received; done reports that one was
// completely processed.
func (e *engine) readFPDU(q *QP, rd *reader) (done bool, err error) {
	c := q.Conn
	x := &c.rx
	for {
		switch x.step {
		case rxHeader:
			ulen, err := c.rcv.ReadHeader(rd, x.hdr[:ddp.TaggedHeaderLen])
			if err != nil {
				return false, err
			}
			x.ulen, x.parsed = ulen, false
			rd.observe(ulen) // rxbuf.go
			x.got = min(ulen, ddp.TaggedHeaderLen)
			x.want = ddp.HeaderLen(x.hdr[:1])
			x.step = rxHeaderRest
			if ulen < x.want {
				e.terminate(q, iwerr.RDMAPCatastrophicStream, nil, nil, ulen)
				return true, errRCStopped
			}
		case rxHeaderRest:
			for x.got < x.want {
				n, err := c.rcv.ReadPayload(rd, x.hdr[x.got:x.want])
				x.got += n
				if err != nil {
					return false, err
				}
				if n == 0 {
					return false, io.ErrUnexpectedEOF
				}
			}
			if !x.parsed {
				x.h, _, _ = ddp.Parse(x.hdr[:x.want])
				x.parsed = true
				x.want += e.rdmapHeaderLen(x)
				continue
			}
			if !e.check(q) {
				return true, errRCStopped
			}
			x.step, x.placed, x.lastGot, x.fresh = rxPayload, 0, false, false
		case rxPayload:
			if err := e.place(q, rd); err != nil {
				return false, err
			}
			x.step = rxFinish
		case rxFinish:
			if err := c.rcv.Finish(rd); err != nil {
				if errors.Is(err, iwerr.MPACRCError) {
					e.count(q, rnic.CDropCRC, 1)
					e.terminate(q, iwerr.MPACRCError, nil, nil, -1)
					return true, errRCStopped
				}
				return false, err
			}
			x.step = rxHeader
			c.waitFirst = false
			if !e.commit(q) {
				return true, errRCStopped
			}
			return true, nil
		}
	}
}

// rdmapHeaderLen is how many octets of RDMAP header follow the DDP header
// of x's segment and are read into x.hdr: a Read Request's 28, or up to 64
// of a Terminate.
func (e *engine) rdmapHeaderLen(x *rx) int {
	if x.h.Tagged {
		return 0
	}
	rest := x.ulen - ddp.UntaggedHeaderLen
	op := rdmap.Control(x.h.ULPControl).Opcode()
	switch x.h.QN {
	case rdmap.QNSend:
		if op == rdmap.OpImmediateData || op == rdmap.OpImmediateDataSE {
			return min(rest, rdmap.ImmediateDataLen)
		}
	case rdmap.QNReadRequest:
		if op == rdmap.OpAtomicRequest {
			return min(rest, rdmap.AtomicRequestLen)
		}
		return min(rest, rdmap.ReadRequestLen)
	case rdmap.QNAtomicResponse:
		return min(rest, rdmap.AtomicResponseLen)
	case rdmap.QNTerminate:
		return min(rest, rxHeaderMax-ddp.UntaggedHeaderLen)
	}
	return 0
}

// check validates the segment whose headers are in c.rx and prepares its
// placement. On a violation it starts the Terminate and returns false.
func (e *engine) check(q *QP) bool {
	c := q.Conn
	x := &c.rx
	h := &x.h
	ddpHdr := x.hdr[:h.Len()]
	fail := func(err iwerr.Error, rdmaHdr []byte) bool {
		e.terminate(q, err, ddpHdr, rdmaHdr, x.ulen)
		return false
	}
	if h.Version != ddp.Version {
		if h.Tagged {
			return fail(iwerr.DDPTaggedInvalidVersion, nil)
		}
		return fail(iwerr.DDPUntaggedInvalidVersion, nil)
	}
	if !h.Tagged && h.QN > rdmap.QNAtomicResponse {
		return fail(iwerr.DDPInvalidQN, nil)
	}
	ctl := rdmap.Control(h.ULPControl)
	if ctl.Version() != rdmap.Version {
		return fail(iwerr.RDMAPInvalidVersion, nil)
	}
	x.op = ctl.Opcode()
	info, ok := x.op.Info()
	if !ok || info.QPTypes&rdmap.RC == 0 || info.Tagged != h.Tagged || !h.Tagged && info.QN != h.QN {
		return fail(iwerr.RDMAPUnexpectedOpcode, nil)
	}
	x.payLen = x.ulen - x.want
	x.hold, x.rtr, x.immHold, x.dst = false, false, false, x.dst[:0]
	if c.heldImm.held && !isSend(x.op) && (h.Tagged || h.MSN == c.expMSN[h.QN]) && !e.releaseImm(q) {
		return false // a held Immediate Data not followed by a Send: its own receive (rc/imm.go)
	}
	if h.Tagged {
		return e.checkTagged(q, fail)
	}
	if h.MSN != c.expMSN[h.QN] {
		return fail(iwerr.DDPInvalidMSNRange, nil)
	}
	switch h.QN {
	case rdmap.QNSend:
		if x.op == rdmap.OpImmediateData || x.op == rdmap.OpImmediateDataSE {
			if !e.checkImmediate(q, fail) { // rc/atomic.go
				return false
			}
			if e.holdsImm(q) { // rc/imm.go: no receive
				x.immHold = true
				return true
			}
		}
		return e.checkSend(q, fail)
	case rdmap.QNAtomicResponse:
		return e.checkAtomicResponse(q, fail) // rc/atomic.go
	case rdmap.QNReadRequest:
		if x.op == rdmap.OpAtomicRequest {
			return e.checkAtomicRequest(q, fail) // rc/atomic.go
		}
		rdmaHdr := x.hdr[ddp.UntaggedHeaderLen:x.want]
		switch {
		case h.MO != 0 || !h.Last:
			return fail(iwerr.DDPInvalidMO, nil)
		case x.ulen > ddp.UntaggedHeaderLen+rdmap.ReadRequestLen:
			return fail(iwerr.DDPMessageTooLong, nil)
		case x.ulen < ddp.UntaggedHeaderLen+rdmap.ReadRequestLen:
			return fail(iwerr.RDMAPCatastrophicStream, nil)
		case c.Irq.Len() >= c.ird:
			// More Read Requests than our IRD: siw answers so.
			return fail(iwerr.DDPInvalidMSNRange, nil)
		}
		rr, _, _ := rdmap.ParseReadRequest(rdmaHdr)
		if rr.Size > 0 {
			if _, _, f := q.CheckRemote(rr.SourceStag, rr.SourceTO, uint64(rr.Size), proto.AccessRemoteRead); f != 0 {
				return fail(rdmap.RDMAPError(f), rdmaHdr)
			}
			if uint64(rr.Size)-1 > math.MaxUint64-rr.SinkTO {
				return fail(iwerr.RDMAPTOWrap, rdmaHdr)
			}
		}
		if rr.Size > MaxMessage {
			return fail(iwerr.RDMAPOperationUnspecified, rdmaHdr)
		}
		x.payLen = 0
	case rdmap.QNTerminate:
		x.payLen = 0 // Finish skips what did not fit the header buffer
	}
	return true
}

// checkTagged checks an RDMA Write (against the MR table: STag, PD,
// remote write, bounds) or a Read Response (against the oldest outstanding
// Read: STag, TO in order, size).
func (e *engine) checkTagged(q *QP, fail func(iwerr.Error, []byte) bool) bool {
	c := q.Conn
	x := &c.rx
	h := &x.h
	n := uint64(x.payLen)
	switch x.op {
	case rdmap.OpWrite:
		if n == 0 {
			return true // zero-length Write (the Write RTR): nothing to place, no STag to check (as siw)
		}
		if _, _, f := q.CheckRemote(h.Stag, h.TO, n, proto.AccessRemoteWrite); f != 0 {
			return fail(rdmap.TaggedError(f), nil)
		}
	case rdmap.OpReadResponse:
		if c.orq.Len() == 0 || c.orq.head().atomic {
			return fail(iwerr.RDMAPUnexpectedOpcode, nil)
		}
		r := c.orq.head()
		if h.Stag != r.stag {
			return fail(iwerr.DDPInvalidStag, nil)
		}
		end := uint64(r.placed) + n
		if h.TO != r.to+uint64(r.placed) || end > uint64(r.size) || h.Last && end != uint64(r.size) {
			return fail(iwerr.DDPBaseBounds, nil)
		}
	}
	x.hold = h.Last && n > 0
	return true
}

// checkSend checks a Send segment: it takes the receive WR at the
// message's first segment, then checks MO and length against it.
func (e *engine) checkSend(q *QP, fail func(iwerr.Error, []byte) bool) bool {
	c := q.Conn
	x := &c.rx
	h := &x.h
	if c.waitFirst && c.params.PeerToPeer && c.params.RTR == mpa.RTRSend && !c.rqe.active &&
		x.payLen == 0 && h.MO == 0 && h.Last {
		x.rtr = true // the initiator's zero-length Send RTR (RFC 6581): not delivered
		return true
	}
	if !c.rqe.active && !c.hold.filling {
		if h.MO != 0 {
			return fail(iwerr.DDPInvalidMO, nil)
		}
		if e.wantsHold(q) { // rc/hold.go: no receive, or earlier messages held
			return e.startHeld(q)
		}
		switch e.takeRecv(q) {
		case rqeNone:
			e.count(q, rnic.CDropNoRecv, 1)
			return fail(iwerr.DDPInvalidMSNNoBuffer, nil)
		case rqeBad:
			e.terminate(q, iwerr.RDMAPLocalCatastrophicError, nil, nil, -1)
			return false
		}
		if isSend(x.op) {
			c.attachImm() // rc/imm.go
		}
	}
	if c.hold.filling {
		return e.checkHeld(q, fail) // rc/hold.go
	}
	if h.MO != c.rqe.placed {
		return fail(iwerr.DDPInvalidMO, nil)
	}
	if uint64(h.MO)+uint64(x.payLen) > c.rqe.total {
		e.count(q, rnic.CRecvTooLong, 1)
		return fail(iwerr.DDPMessageTooLong, nil)
	}
	return true
}

type rqeResult uint8

const (
	rqeTaken rqeResult = iota
	rqeNone            // nothing posted
	rqeBad             // a bad receive WR: completed in error, QP in ERROR
)

// takeRecv takes the next receive WR (the QP's RQ or its SRQ) for the
// Send now arriving: copied out of the ring and validated.
func (e *engine) takeRecv(q *QP) rqeResult {
	c := q.Conn
	ring := q.RecvRing()
	if ring == nil {
		return rqeNone
	}
	slot, err := ring.Peek()
	if err != nil {
		e.count(q, rnic.CWRErrors, 1)
		e.errorQP(q, "receive queue producer index is corrupt")
		return rqeBad
	}
	if slot == nil {
		return rqeNone
	}
	var raw [proto.RQEHeaderLen]byte
	copy(raw[:], slot)
	rqe := proto.GetRQE(raw[:])
	ring.Advance()
	ring.Release()
	p := q.PD
	if q.SRQ != nil {
		p = q.SRQ.PD
	}
	st := proto.WCSuccess
	r := &c.rqe
	r.wrid, r.sges, r.total, r.placed, r.hasImm = rqe.WRID, r.sges[:0], 0, 0, false
	if uint32(rqe.NumSGE) > q.MaxRecvS || proto.RQEHeaderLen+int(rqe.NumSGE)*proto.SGELen > len(slot) {
		st = proto.WCLocLenErr
	} else {
		var sraw [proto.SGELen]byte
		for i := range int(rqe.NumSGE) {
			off := proto.RQEHeaderLen + i*proto.SGELen
			copy(sraw[:], slot[off:off+proto.SGELen])
			s := proto.GetSGE(sraw[:])
			if _, _, st = q.Session.CheckSGE(s, p, true); st != proto.WCSuccess {
				break
			}
			r.sges = append(r.sges, s)
			r.total += uint64(s.Length)
		}
	}
	e.SRQLimitCheck(q.QP)
	if st != proto.WCSuccess {
		e.count(q, rnic.CWRErrors, 1)
		e.PostCQE(q.Session, q.RecvCQ, &proto.CQE{WRID: r.wrid, Status: st, Opcode: proto.WCRecv, QPN: q.QPN})
		e.errorQP(q, "receive work request "+st.String())
		return rqeBad
	}
	r.active = true
	return rqeTaken
}

// dest computes where the payload of the current segment goes, for this
// pass: false if the memory went away (the QP is failing).
func (e *engine) dest(q *QP) bool {
	c := q.Conn
	x := &c.rx
	h := &x.h
	n := uint64(x.payLen)
	x.dst = x.dst[:0]
	switch {
	case x.op == rdmap.OpWrite:
		b, f := q.LookupRemote(h.Stag, h.TO, n, proto.AccessRemoteWrite)
		if f != 0 {
			e.terminate(q, rdmap.TaggedError(f), x.hdr[:h.Len()], nil, x.ulen)
			return false
		}
		x.dst = append(x.dst, b)
	case x.op == rdmap.OpReadResponse:
		// Only the segment's octets of the sink are translated: in process
		// memory each translation is a staging buffer of its length, and a
		// whole 1 MiB sink per 1448-octet FPDU cost more in allocation
		// and zeroing than the transfer (iwarpd;ofi_rxm).
		r := c.orq.head()
		if uint64(r.placed)+n > uint64(r.sge.Length) {
			e.terminate(q, iwerr.RDMAPLocalCatastrophicError, nil, nil, -1)
			return false
		}
		b, st := q.Translate(rnic.SubSGE(r.sge, uint64(r.placed), n), q.PD, true)
		if st != proto.WCSuccess {
			e.terminate(q, iwerr.RDMAPLocalCatastrophicError, nil, nil, -1)
			return false
		}
		x.dst = append(x.dst, b)
	case !h.Tagged && h.QN == rdmap.QNSend && c.hold.filling:
		x.dst = append(x.dst, c.heldDest()) // rc/hold.go: daemon memory
	case !h.Tagged && h.QN == rdmap.QNSend:
		p := q.PD
		if q.SRQ != nil {
			p = q.SRQ.PD
		}
		// The pieces covering [MO, MO+n) of the receive buffers, each
		// translated alone (as for a Read Response above).
		lo, hi, off := uint64(h.MO), uint64(h.MO)+n, uint64(0)
		for _, s := range c.rqe.sges {
			end := off + uint64(s.Length)
			if a, z := max(lo, off), min(hi, end); a < z {
				b, st := q.Translate(rnic.SubSGE(s, a-off, z-a), p, true)
				if st != proto.WCSuccess {
					e.terminate(q, iwerr.RDMAPLocalCatastrophicError, nil, nil, -1)
					return false
				}
				x.dst = append(x.dst, b)
			}
			off = end
		}
	}
	x.fresh = true
	return true
}

// placeFault terminates q when the process memory a segment was being
// placed in went away (rnic/stage.go): a remote access error for an RDMA Write
// (its target is the peer's to know), a local catastrophic error for a
// Send's receive buffer or a Read's sink.
func (e *engine) placeFault(q *QP) {
	x := &q.Conn.rx
	if x.op == rdmap.OpWrite {
		e.terminate(q, rdmap.TaggedError(rdmap.FaultBaseBounds), x.hdr[:x.h.Len()], nil, x.ulen)
		return
	}
	e.terminate(q, iwerr.RDMAPLocalCatastrophicError, nil, nil, -1)
}

// pieceAt returns the part of the concatenation of pieces at [off,
// off+n), cut at the end of the piece holding off.
func pieceAt(pieces [][]byte, off, n int) []byte {
	for _, p := range pieces {
		if off >= len(p) {
			off -= len(p)
			continue
		}
		return p[off : off+min(n, len(p)-off)]
	}
	return nil
}

// place reads the segment's payload into its destination, all but the
// held last octet, then that octet into the scratch.
func (e *engine) place(q *QP, rd *reader) error {
	c := q.Conn
	x := &c.rx
	if x.payLen == 0 {
		return nil
	}
	if !x.fresh && !e.dest(q) {
		return errRCStopped
	}
	end := x.payLen
	if x.hold {
		end--
	}
	for x.placed < end {
		chunk := pieceAt(x.dst, x.placed, end-x.placed)
		if len(chunk) == 0 {
			return io.ErrUnexpectedEOF // cannot happen: the destination covers the payload
		}
		n, err := c.rcv.ReadPayload(rd, chunk)
		if cerr := e.CommitOne(chunk[:n]); cerr != nil { // rnic/stage.go: process memory
			e.placeFault(q)
			return errRCStopped
		}
		x.placed += n
		if errors.Is(err, unix.EFAULT) {
			// The readv into the destination (a memfd region) met a page
			// that is not there (punched out after registration,
			// rnic/holeguard.go): as for unmapped process memory.
			e.count(q, rnic.CMemoryFaults, 1)
			e.placeFault(q)
			return errRCStopped
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
	}
	if x.hold && !x.lastGot {
		n, err := c.rcv.ReadPayload(rd, x.last[:])
		if err != nil {
			return err
		}
		if n != 1 {
			return io.ErrUnexpectedEOF
		}
		x.lastGot = true
	}
	return nil
}

// commit acts on a segment whose CRC was good: the held last octet is
// stored, and completed messages complete. false: the QP is failing.
func (e *engine) commit(q *QP) bool {
	c := q.Conn
	x := &c.rx
	h := &x.h
	if x.hold {
		if !x.fresh && !e.dest(q) {
			return false
		}
		last := pieceAt(x.dst, x.payLen-1, 1)
		last[0] = x.last[0]
		if e.CommitOne(last) != nil { // rnic/stage.go: process memory
			e.placeFault(q)
			return false
		}
	}
	if h.Tagged {
		e.count(q, rnic.CBytesIn, int64(x.payLen))
		if x.op == rdmap.OpWrite && h.Last {
			c.afterWrite = true
		}
		if x.op == rdmap.OpReadResponse {
			r := c.orq.head()
			r.placed += uint32(x.payLen)
			if h.Last {
				if !r.internal {
					e.complete(q, r.seq, proto.WCSuccess)
				}
				c.orq.pop()
				c.sqStalled = false
			}
		}
		return true
	}
	switch h.QN {
	case rdmap.QNSend:
		if x.rtr {
			c.expMSN[0]++
			return true
		}
		if x.immHold {
			c.expMSN[0]++
			e.holdImm(q) // rc/imm.go
			c.afterWrite = false
			return true
		}
		if c.hold.filling { // rc/hold.go
			if !h.Last {
				return true
			}
			c.expMSN[0]++
			ok := e.heldArrived(q)
			c.afterWrite = false
			return ok
		}
		c.rqe.placed += uint32(x.payLen)
		if h.Last {
			c.expMSN[0]++
			ok := e.completeRecv(q)
			c.afterWrite = false
			return ok
		}
	case rdmap.QNAtomicResponse:
		c.expMSN[rdmap.QNAtomicResponse]++
		return e.commitAtomicResponse(q) // rc/atomic.go
	case rdmap.QNReadRequest:
		c.expMSN[1]++
		if x.op == rdmap.OpAtomicRequest {
			return e.commitAtomicRequest(q) // rc/atomic.go
		}
		rr, _, _ := rdmap.ParseReadRequest(x.hdr[ddp.UntaggedHeaderLen:x.want])
		r := readResp{sinkStag: rr.SinkStag, sinkTO: rr.SinkTO, size: rr.Size, srcStag: rr.SourceStag, srcTO: rr.SourceTO}
		copy(r.ddpHdr[:], x.hdr[:ddp.UntaggedHeaderLen])
		copy(r.rdmaHdr[:], x.hdr[ddp.UntaggedHeaderLen:x.want])
		c.Irq.push(r)
	case rdmap.QNTerminate:
		c.expMSN[2]++
		e.termReceived(q, x.hdr[ddp.UntaggedHeaderLen:x.want])
		return false
	}
	return true
}
