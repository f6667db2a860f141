package verbsd

import (
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// engine is an engine as the datagram transports see it: the core engine
// and the scratch reused by every datagram QP it serves, one at a time.
type engine struct {
	*rnic.Engine

	// The UD datagram being delivered is a Send with Immediate: its value
	// (ud_recv.go datagram, completeRecv).
	curImm    uint32
	curHasImm bool

	// Data-path scratch, reused by every QP (one is served at a time).
	sb      *sendBatch
	sendWRs []sendWR
	pieces  [][]byte
	rb      *recvBatch
	// sendmmsg is sysSendmmsg (tests wrap it to simulate short sends and
	// kernels without GSO).
	sendmmsg func(fd int, msgs []unix.Mmsghdr) (int, error)
}

// attachTransports gives a core engine its transports' per-engine state:
// the datagram engine, and RD's on top of it (rd_view.go).
func attachTransports(c *rnic.Engine) {
	e := &engine{Engine: c, sb: newSendBatch(), sendWRs: make([]sendWR, maxSendWRs), pieces: make([][]byte, 0, 64),
		rb: newRecvBatch(), sendmmsg: sysSendmmsg}
	c.Ext = append(c.Ext, e, &rdEngine{engine: e})
}

// engOf returns the datagram engine of a core engine.
func engOf(c *rnic.Engine) *engine {
	for _, x := range c.Ext {
		if e, ok := x.(*engine); ok {
			return e
		}
	}
	panic("verbsd: an engine without its datagram transport")
}

// rnic.EngineHooks: UD has no work of its own beyond its QPs.
func (e *engine) Service(time.Time) bool      { return false }
func (e *engine) Event(int32) bool            { return false }
func (e *engine) Deadline() (time.Time, bool) { return time.Time{}, false }
func (e *engine) CloseAll()                   {}

// Inspect (rnic.EngineHooks): what the UD QPs' sockets dropped, beside
// the destroyed QPs' (Removing).
func (e *engine) Inspect(m map[string]int64) {
	for _, c := range e.QPs {
		if q, ok := c.Ops.(*qp); ok && q.Typ == proto.QPTypeUD {
			m["drop_socket_full"] += q.socketDrops() // ud_backlog.go
		}
	}
}

// count, errorQP and markReady take the transports' QP.
func (e *engine) count(q *qp, c rnic.Counter, n int64) {
	if q == nil {
		e.Engine.Count(nil, c, n)
		return
	}
	e.Engine.Count(q.QP, c, n)
}
func (e *engine) errorQP(q *qp, why string) { e.Engine.ErrorQP(q.QP, why) }
func (e *engine) markReady(q *qp)           { e.Engine.MarkReady(q.QP) }

// qp is a queue pair as its transport sees it: the core QP and the state
// of its type (UD, RD, RC and the connection manager).
type qp struct {
	*rnic.QP
	e *engine // its engine (set when installed: added)

	noCRC bool   // the client asked for no CRC32c trailer
	qkey  uint32 // the Q_Key every accepted datagram names (keys.go)

	// Send side (datagrams).
	lastMSN uint32 // MSN of the last message sent or failed (first message: 1)
	sendSeg uint32 // next segment of the head SQE (0: not started)
	gso     bool   // UDP GSO allowed on its socket (off after the kernel refused)

	// Receive side (datagrams).
	rwr     rnic.RecvWR
	reasm   reassembler
	backlog udBacklog // UD: parked sockets, held datagrams (ud_backlog.go)

	// Datagram extensions: Write-Record records being received (wrec*.go)
	// and the multicast groups the QP is attached to (mcast*.go).
	wrec  wrecTable
	mcast mcastState
}

// newQP makes a transport QP around a core one.
func newQP(c *rnic.QP) *qp {
	q := &qp{QP: c}
	c.Ops = q
	return q
}

// qpOf returns the transport's view of a core QP.
func qpOf(c *rnic.QP) *qp { return c.Ops.(*qp) }

// Added (qpOps): UD and RD sockets get GRO (udpio_linux.go initSocket).
func (q *qp) Added() {
	q.e = engOf(q.Eng)
	q.e.initSocket(q)
}

// HasWork (qpOps) reports whether the client published work the engine
// must act on now: sends in RTS, or anything to flush in ERROR.
func (q *qp) HasWork() bool {
	if q.backlogWork() { // ud_backlog.go: a receive posted for what waits
		return true
	}
	switch q.State {
	case proto.QPStateRTS:
		n, err := q.Sq.Available()
		return n > 0 || err != nil || q.sendSeg != 0
	case proto.QPStateError:
		// A corrupt ring (err) is not work: nothing in it can be flushed.
		if n, _ := q.Sq.Available(); n > 0 {
			return true
		}
		if q.Rq != nil {
			if n, _ := q.Rq.Available(); n > 0 {
				return true
			}
		}
	}
	return false
}

// Due (qpOps): a socket writable again (RC), a timer Due.
func (q *qp) Due(now time.Time) bool {
	d, ok := q.Deadline()
	return ok && !d.After(now)
}

// Deadline (qpOps): the earliest of the reassembly, Write-Record, RD and
// RC timers.
func (q *qp) Deadline() (time.Time, bool) {
	var first time.Time
	found := false
	note := func(t time.Time, ok bool) {
		if ok && (!found || t.Before(first)) {
			first, found = t, true
		}
	}
	note(q.reasm.nextDeadline())
	note(q.wrec.nextDeadline()) // a Write-Record to complete (wrec_recv.go)
	return first, found
}

// Service (qpOps) does at most PollBatch units of work on q and reports
// whether it did any.
func (q *qp) Service(now time.Time) bool {
	e := q.e
	work := false
	if q.backlog.parked || q.backlog.waiting() {
		work = e.resumeBacklog(q, now) // ud_backlog.go
	}
	if q.Readable && e.receive(q, now) {
		work = true
	}
	switch q.State {
	case proto.QPStateRTS:
		if e.send(q) {
			work = true
		}
	case proto.QPStateError:
		if e.flush(q) {
			work = true
		}
	}
	if n := q.reasm.expire(now); n > 0 {
		e.count(q, rnic.CReassemblyTimeout, int64(n))
	}
	if e.expireRecords(q, now) { // wrec_recv.go
		work = true
	}
	return work
}

// Event (qpOps): a parked UD socket's error is cleared and consumed; an
// RC socket writable again lets a cut batch go on.
func (q *qp) Event(events uint32) bool {
	if q.backlog.parked {
		// Only EPOLLERR/EPOLLHUP reach a parked socket (no interest,
		// ud_backlog.go): clear the error, or the level-triggered event
		// would wake every epoll_wait.
		unix.GetsockoptInt(q.FD, unix.SOL_SOCKET, unix.SO_ERROR)
		return false
	}
	return true
}

// Removing (qpOps): a connection still up is logged; a UD QP's socket
// drops are counted before its sockets close; multicast groups are left.
func (q *qp) Removing() {
	e := q.e
	if q.Typ == proto.QPTypeUD {
		e.Stats[rnic.CDropSocketFull] += q.socketDrops() // ud_backlog.go: before its sockets close
	}
	e.detachAllMcast(q) // mcast.go
}

// Removed (qpOps): an RD QP's owed ACKs leave, then its socket lingers.
func (q *qp) Removed() {
}

// Closed (qpOps).
func (q *qp) Closed() {
	q.reasm.reset()
	q.backlog = udBacklog{}
}

// LogsOwnEnd (rnic.QPOps): errorQP logs why a datagram QP ended.
func (q *qp) LogsOwnEnd() bool { return false }

// Core returns the core QP.
func (q *qp) Core() *rnic.QP { return q.QP }

// Install (transportQP) puts the QP on engine e: its socket joins e's
// epoll set, an RD QP's reorder store counts against e's budget.
func (q *qp) Install(e *rnic.Engine) error {
	q.e = engOf(e)
	return e.AddQP(q.QP)
}

// CheckModify (transportQP): every transition the core allows.
func (q *qp) CheckModify(proto.QPState, uint32) error { return nil }

// Modified (transportQP): a new Q_Key; RESET starts a new life (no partial
// message, record or RD state survives).
func (q *qp) Modified(to proto.QPState, qkey uint32) {
	if qkey != 0 {
		q.qkey = qkey
	}
	if to == proto.QPStateReset {
		q.sendSeg = 0
		q.reasm.reset()
		q.wrec.reset()
	}
}

// Addr (transportQP) is the QP's UDP address.
func (q *qp) Addr() netip.AddrPort { return q.Local }

// Inspect (transportQP): partial messages, socket drops (UD), RD state.
func (q *qp) Inspect(m map[string]int64) {
	m["partial_messages"] = int64(q.reasm.partials())
	if q.Typ == proto.QPTypeUD {
		m["drop_socket_full"] = q.socketDrops() // ud_backlog.go
	}
}

// QKey (transportQP).
func (q *qp) QKey() uint32 { return q.qkey }

// qp returns the session's QP with handle h as its transport sees it (nil
// if there is none).
func (s *session) qp(h uint32) *qp { return sessionQP(s.Session, h) }

// sessionQP returns s's QP with handle h as its transport sees it.
func sessionQP(s *rnic.Session, h uint32) *qp {
	if c := s.QPs[h]; c != nil {
		return qpOf(c)
	}
	return nil
}
