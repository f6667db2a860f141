package rc

import (
	"errors"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// The RC data path: RDMAP over DDP over MPA over one non-blocking TCP
// socket per QP, served by the engine loop like the datagram sockets.
//
//   - rc/conn.go: the hand-off from the CM (AttachRC), connection life
//     cycle (RFC 5040 states mapped onto verbs states), flush.
//   - rc/tx.go: the send side: SQ work requests and Read Responses cut into
//     FPDUs ≤ MULPDU, written with writev straight from registered memory.
//   - rc/rx.go: the receive side: FPDUs read with mpa.Receiver, checked
//     (RFC 5041/5040 errors) and placed straight into registered memory.
//
// States. RFC 5040 §10's RDMAP stream states map onto proto.QPState:
//
//	Idle (not connected)   INIT (RESET before)
//	Operational            RTS
//	Closing (graceful)     SQD   (posted work finishes, then FIN, then ERROR)
//	Terminate              SQE   (a Terminate is being sent; then ERROR)
//	Error                  ERROR (posted and outstanding work is flushed)
//
// Translations of registered memory are good for one engine pass only (a
// region may be deregistered between passes, see deregMR): every slice of
// registered memory the data path uses is looked up again in each pass.

// Attach is what the CM hands the engine once MPA negotiation succeeded on a
// connected TCP socket.
type Attach struct {
	FD        int        // connected TCP socket, set non-blocking by the CM; the engine owns it from now on
	Params    mpa.Params // negotiated (CRC, markers per direction, IRD/ORD, P2P, RTR type, revision)
	Initiator bool       // true on the active side
	MSS       int        // TCP_MAXSEG of the socket (EMSS), for mpa.MULPDU
	// MarkerStartTx/Rx: TCP stream octets already sent/received after the MPA frames (normally 0).
	Local, Remote netip.AddrPort
}

// CloseReason says why an RC connection ended (reported to the CM through
// q.OnRCClosed).
type CloseReason uint8

const (
	// ClosedGraceful: the peer closed its half (FIN) or a requested
	// graceful disconnect finished.
	ClosedGraceful CloseReason = iota + 1
	// ClosedTermReceived: the peer sent a Terminate (term is set).
	ClosedTermReceived
	// ClosedTermSent: this side detected an error and sent a Terminate
	// (term is set), or an abortive disconnect was requested.
	ClosedTermSent
	// ClosedSocketError: the socket failed (reset, write error, ...).
	ClosedSocketError
)

// String names the reason.
func (r CloseReason) String() string {
	switch r {
	case ClosedGraceful:
		return "disconnected"
	case ClosedTermReceived:
		return "terminate received"
	case ClosedTermSent:
		return "terminate sent"
	case ClosedSocketError:
		return "connection lost"
	}
	return "unknown"
}

// closeFunc is the type of q.OnRCClosed: called on the engine goroutine
// when the connection of an RC QP ends; it must not block.
type closeFunc func(reason CloseReason, term *rdmap.Terminate)

// RC limits.
const (
	defaultDepth = 16      // IRD/ORD when the negotiation left them 0
	maxDepth     = 128     // IRD/ORD cap (siw's)
	MaxMessage   = 1 << 31 // largest RC message (MO is 32 bits; the 2^31)
	// closeTimeout bounds the wait for the peer's FIN after our FIN
	// (graceful close, or after a Terminate) and the time a Terminate may
	// wait behind a full socket buffer.
	closeTimeout = 2 * time.Second
	// minMULPDU: below this an FPDU cannot carry an Atomic Request (the longest one-segment request).
	minMULPDU = ddp.UntaggedHeaderLen + rdmap.AtomicRequestLen + 4
	// SocketBuffer is the send and receive buffer of an RC socket when
	// the daemon may force it (CAP_NET_ADMIN: SO_SNDBUFFORCE and
	// SO_RCVBUFFORCE); otherwise the kernel's autotuning is left alone
	// (the unforced options are capped at wmem_max/rmem_max, often below
	// what autotuning reaches). A full buffer decouples the two engines
	// when one is off its CPU: with autotuning (send ≤ 4 MiB, receive
	// growing from 128 KiB) a 1 MiB Write stream through two daemons on a
	// shared 2-CPU machine had 2.5–5.8 k voluntary context switches per
	// 1000 MiB and 0.94–1.08 s of daemon CPU; with 16 MiB forced, 1.9–2.6 k
	// and 0.84–0.93 s (iwarp-perf -window 64, loopback). The memory is
	// only taken while data waits in it.
	SocketBuffer = 16 << 20
)

// phase is the connection's life cycle (independent of q.state, which
// the client and errorQP may change between passes).
type phase uint8

const (
	idle        phase = iota // no connection yet
	open                     // operational
	closing                  // graceful disconnect: finishing posted work
	terminating              // a Terminate waits for the FPDU in flight, then goes out
	draining                 // our FIN is sent; waiting (bounded) for the peer's
	closed                   // socket closed
)

// conn is the engine's state of one connected RC QP (engine-owned).
type conn struct {
	Fd        int
	phase     phase
	params    mpa.Params
	initiator bool
	local     netip.AddrPort
	remote    netip.AddrPort

	MaxTagged, MaxUntagged int    // payload octets per FPDU
	Emss                   int    // TCP segment payload (FPDU alignment)
	EmssAuto               bool   // emss follows the socket's TCP_MAXSEG (refreshEMSS)
	EmssCheck              uint32 // messages started since TCP_MAXSEG was last read
	ird, ord               int

	rxOn, outOn bool      // EPOLLIN / EPOLLOUT registered
	outReady    bool      // epoll reported EPOLLOUT (or an error) since the last short write (pollFDs)
	discard     bool      // draining after a Terminate: read and drop
	deadline    time.Time // closing/terminating/draining bound (zero: none)
	now         time.Time // of the current pass
	waitFirst   bool      // responder: send nothing before the initiator's first FPDU
	closeBudget int       // graceful close: SQ entries still to execute
	sqStalled   bool      // the SQ head waits for a Read Response (fence, ORD, completion window)

	reason   CloseReason
	cause    string           // what ended the connection, first cause wins (rc/log.go)
	term     *rdmap.Terminate // sent or received, for the report
	termErr  iwerr.Error      // the Terminate to send
	termDDP  []byte           // its copies of the offending headers
	termRDMA []byte
	termSeg  int // length of the offending segment (M), -1 unknown
	termWire []byte
	termOff  int

	// Send side.
	snd  *mpa.Sender
	msn  ddp.MSNCounter
	Tx   tx
	pend pending
	orq  queue[read]     // outstanding RDMA Reads (requester), ≤ ord
	Irq  queue[readResp] // Read Requests to answer (responder), ≤ ird

	// Receive side.
	rcv        *mpa.Receiver
	rx         rx
	expMSN     [ddp.QueueCount]uint32 // next expected MSN per untagged queue (QN 3: RFC 7306 Atomic Responses)
	nextReqID  uint32                 // last RFC 7306 Request Identifier sent
	afterWrite bool                   // the last message received was an RDMA Write (an Immediate Data after it completes as WCRecvRDMAWithImm)
	rqe        recv                   // the receive WR of the Send being received
	heldImm    heldImm                // merge_send_imm: a tagged Immediate Data waiting for its Send (rc/imm.go)
	hold       holdQ                  // hold_recv: untagged messages that arrived before their receive (rc/hold.go)
}

// queue is a small FIFO (bounded by its user).
type queue[T any] struct {
	items []T
}

func (f *queue[T]) Len() int { return len(f.items) }
func (f *queue[T]) push(v T) { f.items = append(f.items, v) }
func (f *queue[T]) head() *T { return &f.items[0] }
func (f *queue[T]) reset()   { f.items = f.items[:0] }
func (f *queue[T]) pop() {
	n := copy(f.items, f.items[1:])
	var zero T
	f.items[n] = zero
	f.items = f.items[:n]
}

// AttachRC installs a connected RC QP into the engine (engine goroutine only, via e.Do).
// It moves the QP to RTS; on the initiator with Params.PeerToPeer it first sends the RTR FPDU
// of Params.RTR (zero-length Write STag 1 TO 0 / zero-length Read Request / zero-length Send);
// a responder transmits nothing until it received the initiator's first FPDU (RFC 5044 §7.1.2 / RFC 6581).
//
// On error q.rc is nil and the caller still owns a.FD.
func (e *engine) AttachRC(q *QP, a Attach) (err error) {
	defer func() {
		if err != nil {
			q.Conn = nil
		}
	}()
	if q.Type != proto.QPTypeRC {
		return rnic.Errf(unix.EINVAL, "attach: QP %d is not an RC QP", q.Handle)
	}
	if q.State != proto.QPStateInit {
		return rnic.Errf(unix.EINVAL, "attach: QP %d is in %v, not INIT", q.Handle, q.State)
	}
	if a.FD < 0 {
		return rnic.Errf(unix.EINVAL, "attach: no socket")
	}
	mss := a.MSS
	sockMSS, gerr := unix.GetsockoptInt(a.FD, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	if gerr != nil || sockMSS <= 0 {
		sockMSS = 0 // unknown: the EMSS given (or 1460) stays
	}
	if mss <= 0 {
		mss = sockMSS
		if mss <= 0 {
			mss = 1460
		}
	}
	mulpdu := mpa.MULPDU(mss, a.Params.MarkersTx)
	if mulpdu < minMULPDU {
		return rnic.Errf(unix.EINVAL, "attach: MSS %d leaves %d octets per FPDU", mss, mulpdu)
	}
	p := a.Params
	c := &conn{Fd: a.FD, phase: open, params: p, initiator: a.Initiator, local: a.Local, remote: a.Remote,
		MaxTagged: ddp.MaxPayload(mulpdu, true, 0), MaxUntagged: ddp.MaxPayload(mulpdu, false, 0),
		ird: depth(p.LocalIRD), ord: depth(p.LocalORD), waitFirst: !a.Initiator, termSeg: -1, Emss: mss,
		EmssAuto: mss == sockMSS,
		snd:      mpa.NewSender(p.CRC, p.MarkersTx), rcv: mpa.NewReceiver(p.CRC, p.MarkersRx)}
	c.expMSN = [ddp.QueueCount]uint32{1, 1, 1, 1}
	c.pend.init(int(q.Caps.MaxSendWR))
	c.Tx.init(q)
	c.rqe.sges = make([]proto.SGE, 0, max(q.MaxRecvS, 1))
	unix.SetsockoptInt(a.FD, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	setRCBuffers(a.FD)
	if err := unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_ADD, a.FD, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(a.FD)}); err != nil {
		return rnic.Errf(unix.ENOMEM, "attach: epoll_ctl: %v", err)
	}
	c.rxOn = true
	q.Conn = c
	q.FD = a.FD
	e.ByFD[int32(a.FD)] = q.QP
	q.Readable = true // data may have arrived with the MPA frames
	if a.Initiator && p.PeerToPeer && p.RTR != mpa.RTRNone {
		c.Tx.startRTR(c, p.RTR)
	}
	q.State = proto.QPStateRTS
	return nil
}

// setRCBuffers forces the socket buffers of an RC socket to
// SocketBuffer where the daemon is allowed to (see there); each is
// left to autotuning otherwise.
func setRCBuffers(fd int) {
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, SocketBuffer)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, SocketBuffer)
}

// EMSSEvery: refreshEMSS reads TCP_MAXSEG once per this many messages.
const EMSSEvery = 64

// refreshEMSS follows the socket's MSS (RFC 5044 §5.4: MULPDU derives
// from the current EMSS) between messages, every EMSSEvery messages,
// when the EMSS came from the socket. Linux bounds the MSS by half the
// largest window the peer advertised: right after the handshake a
// loopback socket reports 32 KiB, and 64 KiB once the window has grown,
// so an EMSS read once at attach would halve the FPDUs (and double the
// system calls per octet) for the life of the connection. The FPDUs
// stay within one segment of the MSS TCP uses now (alignment, RFC 5044
// §8); the receiver takes FPDUs of any size up to its MULPDU bound.
func (c *conn) refreshEMSS() {
	if !c.EmssAuto {
		return
	}
	if c.EmssCheck++; c.EmssCheck < EMSSEvery {
		return
	}
	c.EmssCheck = 0
	v, err := unix.GetsockoptInt(c.Fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	if err != nil || v <= 0 || v == c.Emss {
		return // unchanged, or unknown: the current EMSS stays
	}
	mulpdu := mpa.MULPDU(v, c.params.MarkersTx)
	if mulpdu < minMULPDU {
		return
	}
	c.Emss = v
	c.MaxTagged, c.MaxUntagged = ddp.MaxPayload(mulpdu, true, 0), ddp.MaxPayload(mulpdu, false, 0)
}

// depth is an IRD/ORD: 0 (not negotiated) means the default; capped.
func depth(v uint16) int {
	if v == 0 {
		return defaultDepth
	}
	return min(int(v), maxDepth)
}

// DisconnectRC ends q's connection at the client's request (engine
// goroutine only, via e.Do): graceful finishes the work already posted,
// shuts down the sending half and waits (bounded) for the peer's FIN;
// abortive sends a Terminate (RDMAP, remote operation, catastrophic) and
// closes. Either way the QP ends in ERROR with the rest flushed.
func (e *engine) DisconnectRC(q *QP, abort bool) {
	c := q.Conn
	if c == nil {
		return
	}
	switch c.phase {
	case open, closing:
		if abort {
			c.now = time.Now()
			c.setCause("the local client disconnected abortively")
			e.terminate(q, iwerr.RDMAPCatastrophicStream, nil, nil, -1)
			return
		}
		if c.phase == open {
			c.setCause("the local client disconnected gracefully")
			n, _ := q.SQ.Available()
			c.phase = closing
			c.closeBudget = int(n)
			c.deadline = time.Now().Add(closeTimeout + time.Duration(n)*time.Millisecond)
			if q.State == proto.QPStateRTS {
				q.State = proto.QPStateSQD
			}
		}
	case idle:
		// Not connected: nothing to say to anyone.
	}
}

// terminate starts the Terminate state: the FPDU in flight is finished,
// then a Terminate carrying err (and the offending headers, copied) goes
// out, then our FIN; the QP ends in ERROR. Nothing more is received or
// executed.
func (e *engine) terminate(q *QP, err iwerr.Error, ddpHdr, rdmaHdr []byte, segLen int) {
	c := q.Conn
	if c == nil || c.phase >= terminating {
		return
	}
	c.phase = terminating
	c.setCause("this daemon detected " + err.Error())
	c.termErr = err
	c.termDDP = append(c.termDDP[:0], ddpHdr...)
	c.termRDMA = append(c.termRDMA[:0], rdmaHdr...)
	c.termSeg = segLen
	c.reason = ClosedTermSent
	t := c.buildTerm()
	c.term = &t
	c.deadline = c.now.Add(closeTimeout)
	c.setEpoll(e, false, c.outOn)
	if q.State != proto.QPStateError {
		q.State = proto.QPStateSQE
		ev := proto.EventQPFatal
		if err.Layer == iwerr.LayerDDP && err.Type == iwerr.DDPTaggedBuffer ||
			err.Layer == iwerr.LayerRDMAP && err.Type == iwerr.RDMAPRemoteProtection {
			ev = proto.EventQPAccessError
		}
		q.Session.SendEvent(e.Engine, proto.Event{Type: ev, Handle: q.Handle, Detail: "terminate sent: " + err.Error()})
	}
}

// buildTerm returns the Terminate header to send (aliasing c's copies).
func (c *conn) buildTerm() rdmap.Terminate {
	t := rdmap.TerminateFor(c.termErr, c.termDDP, c.termRDMA)
	if t.DDPHeaderIncluded && c.termSeg >= 0 && c.termSeg <= 0xffff {
		t.SetSegmentLength(uint16(c.termSeg))
	}
	return t
}

// setEpoll changes what the engine waits for on the socket.
func (c *conn) setEpoll(e *engine, in, out bool) {
	if c.Fd < 0 || (in == c.rxOn && out == c.outOn) {
		return
	}
	c.rxOn, c.outOn = in, out
	var ev uint32
	if in {
		ev |= unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if out {
		ev |= unix.EPOLLOUT
	}
	unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_MOD, c.Fd, &unix.EpollEvent{Events: ev, Fd: int32(c.Fd)})
}

// close closes the socket and moves q to ERROR (flushing follows in the
// next passes), then tells the CM. reason is used unless an earlier error
// already decided one.
func (e *engine) close(q *QP, reason CloseReason, detail string) {
	c := q.Conn
	if c == nil || c.phase == closed || c.phase == idle {
		return
	}
	if c.reason != 0 {
		reason = c.reason
	}
	c.reason = reason // rc/hold.go flushHeld
	c.phase = closed
	e.logClosed(q, reason, detail, "QP in ERROR")
	if c.Fd >= 0 {
		unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_DEL, c.Fd, nil)
		delete(e.ByFD, int32(c.Fd))
		unix.Close(c.Fd)
	}
	c.Fd, q.FD = -1, -1
	c.rxOn, c.outOn = false, false
	c.rx.rd.reset()
	q.Readable = false
	c.deadline = time.Time{}
	c.Tx.reset()
	c.orq.reset()
	c.Irq.reset()
	switch q.State {
	case proto.QPStateError, proto.QPStateReset, proto.QPStateInit:
	default:
		wasTerm := q.State == proto.QPStateSQE
		q.State = proto.QPStateError
		if !wasTerm && reason != ClosedGraceful {
			q.Session.SendEvent(e.Engine, proto.Event{Type: proto.EventQPFatal, Handle: q.Handle, Detail: reason.String() + detail})
		}
	}
	if q.OnRCClosed != nil {
		q.OnRCClosed(reason, c.term)
	}
}

// deadline is when the engine must look at q again without a socket
// event (a bounded wait of a closing connection).
func (q *QP) deadline() (time.Time, bool) {
	if q.Conn == nil || q.Conn.deadline.IsZero() {
		return time.Time{}, false
	}
	return q.Conn.deadline, true
}

// hasWork reports whether serving q now can make progress without a
// socket event (the engine's look before sleeping).
func (q *QP) hasWork() bool {
	c := q.Conn
	switch q.State {
	case proto.QPStateError:
		if c != nil && (c.pend.n > 0 || c.rqe.active || c.hold.msgs.Len() > 0) {
			return true
		}
		if n, _ := q.SQ.Available(); n > 0 {
			return true
		}
		if q.RQ != nil {
			if n, _ := q.RQ.Available(); n > 0 {
				return true
			}
		}
		if c == nil {
			return false
		}
		switch c.phase {
		case open, closing: // the Terminate must be started
			return true
		case terminating:
			return !c.outOn
		}
		return false // draining waits for the socket or its deadline
	case proto.QPStateSQE:
		return c != nil && c.phase == terminating && !c.outOn
	case proto.QPStateRTS, proto.QPStateSQD:
		if c == nil || c.phase == idle || c.phase == closed {
			return false
		}
		if c.phase == closing && c.closeDone(q) {
			return true
		}
		if q.heldReady() { // rc/hold.go: a receive for a held message
			return true
		}
		if c.rxOn && !c.discard && c.rx.rd.pending() {
			return true // read ahead from the socket: epoll cannot see it
		}
		if c.waitFirst && !c.outOn {
			// Responder before the initiator's first FPDU: only a Local
			// Invalidate may run (rc/tx.go), nothing goes out.
			if slot, err := q.SQ.Peek(); err == nil && slot != nil {
				var raw [proto.SQEHeaderLen]byte
				copy(raw[:], slot)
				return proto.GetSQE(raw[:]).Opcode == proto.WRLocalInvalidate
			}
			return false
		}
		if c.outOn || c.waitFirst {
			return false
		}
		if c.Tx.kind != txNone || c.Irq.Len() > 0 && !c.Irq.head().started {
			return true
		}
		if c.sqStalled || (c.phase == closing && c.closeBudget == 0) {
			return false
		}
		n, _ := q.SQ.Available()
		return n > 0
	case proto.QPStateReset, proto.QPStateInit, proto.QPStateRTR:
		return c != nil && c.phase != idle && c.phase != closed
	}
	return false
}

// closeDone reports whether a graceful close has done the work it must
// before our FIN.
func (c *conn) closeDone(q *QP) bool {
	return c.closeBudget == 0 && c.Tx.kind == txNone && c.pend.n == 0 && c.Irq.Len() == 0
}

// serviceRC does at most PollBatch units of work on the RC QP q in each
// direction and reports whether it did any.
func (e *engine) serviceRC(q *QP, now time.Time) bool {
	c := q.Conn
	work := false
	if c != nil && c.phase != idle && c.phase != closed {
		c.now = now
		// The client (ModifyQP) or errorQP may have moved the QP.
		switch q.State {
		case proto.QPStateError:
			if c.phase < terminating {
				c.setCause("the QP was moved to ERROR locally (" + q.ErrWhy + ")")
				e.terminate(q, iwerr.RDMAPCatastrophicStream, nil, nil, -1)
			}
		case proto.QPStateReset, proto.QPStateInit, proto.QPStateRTR:
			c.setCause("the local client reset the QP")
			e.close(q, ClosedSocketError, ": the QP was reset")
			c.pend.reset()
			c.rqe.active = false
			return true
		}
	}
	if c != nil && c.Fd >= 0 {
		if c.hold.msgs.Len() > 0 && c.phase < terminating && e.deliverHeld(q) { // rc/hold.go: before new arrivals
			work = true
		}
		if q.Readable || c.rx.rd.pending() {
			if e.receive(q) {
				work = true
			}
		}
		if c.Fd >= 0 && c.hold.msgs.Len() > 0 && c.phase < terminating && e.deliverHeld(q) {
			work = true
		}
		if c.Fd >= 0 && e.send(q) {
			work = true
		}
		if c.phase == closing && c.closeDone(q) {
			e.shutdown(q)
			work = true
		}
		if c.Fd >= 0 && !c.deadline.IsZero() && now.After(c.deadline) {
			e.close(q, ClosedSocketError, ": timed out closing")
			work = true
		}
	}
	if q.State == proto.QPStateError && e.flush(q) {
		work = true
	}
	return work
}

// shutdown sends our FIN (after the last FPDU) and waits, bounded, for
// the peer's.
func (e *engine) shutdown(q *QP) {
	c := q.Conn
	if c.reason == 0 {
		c.reason = ClosedGraceful
	}
	c.phase = draining
	c.deadline = c.now.Add(closeTimeout)
	c.setEpoll(e, true, false)
	if err := unix.Shutdown(c.Fd, unix.SHUT_WR); err != nil {
		e.close(q, ClosedSocketError, ": shutdown: "+err.Error())
	}
}

// socketError closes q's connection after a failed read or write.
func (e *engine) socketError(q *QP, err error) {
	if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) {
		e.close(q, ClosedSocketError, ": "+err.Error())
		return
	}
	e.close(q, ClosedSocketError, ": "+err.Error())
}

// flush completes, with WCWRFlushErr, the work of an ERROR QP: the work
// requests taken but not completed (in order), the receive being filled,
// then what is still posted (rnic/flush.go FlushPosted); at most PollBatch
// per queue per pass.
func (e *engine) flush(q *QP) bool {
	c := q.Conn
	work := false
	if c != nil {
		if e.flushHeld(q) { // rc/hold.go
			work = true
		}
		for range e.Cfg.PollBatch {
			if c.pend.n == 0 {
				break
			}
			p := c.pend.front()
			st := p.status
			if !p.done || st == proto.WCSuccess {
				st = proto.WCWRFlushErr
			}
			e.PostCQE(q.Session, q.SendCQ, &proto.CQE{WRID: p.wrid, Status: st, Opcode: p.op, QPN: q.QPN, Term: p.term, Flags: p.flags})
			e.count(q, rnic.CFlushed, 1)
			c.pend.pop()
			work = true
		}
		if c.rqe.active {
			c.rqe.active = false
			e.count(q, rnic.CFlushed, 1)
			e.PostCQE(q.Session, q.RecvCQ, &proto.CQE{WRID: c.rqe.wrid, Status: proto.WCWRFlushErr, Opcode: proto.WCRecv, QPN: q.QPN})
			work = true
		}
		if c.pend.n > 0 {
			return true
		}
	}
	return e.FlushPosted(q.QP) || work
}

// pending is the window of send work requests taken from the SQ and not
// yet completed, in posting order: completions are posted in that order
// (a Send after a Read completes after it). It is bounded by the SQ depth:
// the SQ head waits while it is full.
type pending struct {
	e    []pend
	head int
	n    int
	seq0 uint64 // sequence number of the head
}

type pend struct {
	wrid     uint64
	op       proto.WCOpcode
	len      uint32
	signaled bool
	done     bool
	status   proto.WCStatus
	flags    uint8
	term     uint32
}

func (p *pending) init(depth int) {
	p.e = make([]pend, max(depth, 1))
	p.head, p.n = 0, 0
}

func (p *pending) full() bool { return p.n == len(p.e) }

func (p *pending) push(v pend) uint64 {
	p.e[(p.head+p.n)%len(p.e)] = v
	p.n++
	return p.seq0 + uint64(p.n-1)
}

func (p *pending) get(seq uint64) *pend {
	if seq < p.seq0 || seq >= p.seq0+uint64(p.n) {
		return nil
	}
	return &p.e[(p.head+int(seq-p.seq0))%len(p.e)]
}

func (p *pending) front() *pend { return &p.e[p.head] }

func (p *pending) pop() {
	p.head = (p.head + 1) % len(p.e)
	p.n--
	p.seq0++
}

func (p *pending) reset() {
	for p.n > 0 {
		p.pop()
	}
}

// complete marks the work request seq done and posts every completion
// that is now due, in order.
func (e *engine) complete(q *QP, seq uint64, status proto.WCStatus) {
	c := q.Conn
	if p := c.pend.get(seq); p != nil {
		p.done, p.status = true, status
	}
	for c.pend.n > 0 && c.pend.front().done {
		p := c.pend.front()
		if p.status != proto.WCSuccess || p.signaled || q.SigAll {
			e.PostCQE(q.Session, q.SendCQ, &proto.CQE{WRID: p.wrid, Status: p.status, Opcode: p.op, ByteLen: p.len, QPN: q.QPN,
				Flags: p.flags, Term: p.term})
		}
		c.pend.pop()
	}
	c.sqStalled = false
}
