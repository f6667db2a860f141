package ud

import (
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// Engine is an engine as the datagram transports see it: the core engine
// and the scratch reused by every datagram QP it serves, one at a time.
type Engine struct {
	*rnic.Engine

	// The UD datagram being delivered is a Send with Immediate: its value
	// (ud/recv.go datagram, completeRecv).
	curImm    uint32
	curHasImm bool

	// Data-path scratch, reused by every QP (one is served at a time).
	Sb      *SendBatch
	sendWRs []sendWR
	Pieces  [][]byte
	Rb      *RecvBatch
	// Sendmmsg is SysSendmmsg (tests wrap it to simulate short sends and
	// kernels without GSO).
	Sendmmsg func(fd int, msgs []unix.Mmsghdr) (int, error)
}

// NewEngine makes the datagram engine of a core engine: its scratch.
func NewEngine(c *rnic.Engine) *Engine {
	return &Engine{Engine: c, Sb: NewSendBatch(), sendWRs: make([]sendWR, maxSendWRs), Pieces: make([][]byte, 0, 64),
		Rb: NewRecvBatch(), Sendmmsg: SysSendmmsg}
}

// EngOf returns the datagram engine of a core engine.
func EngOf(c *rnic.Engine) *Engine { return rnic.ExtOf[*Engine](c) }

// rnic.EngineHooks: UD has no work of its own beyond its QPs.
func (e *Engine) Service(time.Time) bool      { return false }
func (e *Engine) Event(int32, uint32) bool    { return false }
func (e *Engine) Deadline() (time.Time, bool) { return time.Time{}, false }
func (e *Engine) CloseAll()                   {}

// Inspect (rnic.EngineHooks): what the UD QPs' sockets dropped, beside
// the destroyed QPs' (Removing).
func (e *Engine) Inspect(m map[string]int64) {
	for _, c := range e.QPs {
		if q, ok := c.Ops.(*QP); ok && q.Type == proto.QPTypeUD {
			m["drop_socket_full"] += q.socketDrops() // ud/backlog.go
		}
	}
}

// count and errorQP take the transports' QP.
func (e *Engine) count(q *QP, c rnic.Counter, n int64) {
	if q == nil {
		e.Engine.Count(nil, c, n)
		return
	}
	e.Engine.Count(q.QP, c, n)
}
func (e *Engine) errorQP(q *QP, why string) { e.Engine.ErrorQP(q.QP, why) }

// QP is a queue pair as its transport sees it: the core QP and the state
// of its type (UD, RD, RC and the connection manager).
type QP struct {
	*rnic.QP
	e *Engine // its engine (set when installed: added)

	NoCRC     bool   // the client asked for no CRC32c trailer
	crcLogged bool   // a CRC drop of this QP was logged (ud/crc_log.go)
	Qkey      uint32 // the Q_Key every accepted datagram names (rnic/keys.go)
	// QuietRecords: a Write-Record without Immediate completes without a
	// receive or CQE (proto.CreateQPRequest.QuietRecords; RD only).
	QuietRecords bool

	// Send side (datagrams).
	lastMSN uint32 // MSN of the last message sent or failed (first message: 1)
	sendSeg uint32 // next segment of the head SQE (0: not started)
	Gso     bool   // UDP GSO allowed on its socket (off after the kernel refused)

	// Receive side (datagrams).
	rwr     rnic.RecvWR
	reasm   Reassembler
	backlog udBacklog // UD: parked sockets, held datagrams (ud/backlog.go)

	// Datagram extensions: Write-Record records being received (wrec*.go)
	// and the multicast groups the QP is attached to (mcast*.go).
	wrec  WrecTable
	mcast mcastState
}

// NewQP makes a transport QP around a core one.
func NewQP(c *rnic.QP) *QP {
	q := &QP{QP: c}
	c.Ops = q
	return q
}

// Added (rnic.QPOps): UD and RD sockets get GRO (ud/udpio_linux.go initSocket).
func (q *QP) Added() {
	q.e = EngOf(q.Eng)
	q.e.initSocket(q)
}

// HasWork (rnic.QPOps) reports whether the client published work the engine
// must act on now: sends in RTS, or anything to flush in ERROR.
func (q *QP) HasWork() bool {
	if q.backlogWork() { // ud/backlog.go: a receive posted for what waits
		return true
	}
	if (q.FastpathWanted() && !q.backlog.waiting()) || q.FastpathReleased() { // ud/fastpath.go: the rank asks for its socket, or gave it back
		// Not while parked with UDP_GRO still to go off over an empty
		// queue (rnic/fastpath_gro.go): only a posted receive empties it.
		if !q.backlog.parked || !q.FastpathGROPending() || q.FastpathReleased() {
			return true
		}
	}
	switch q.State {
	case proto.QPStateRTS:
		n, err := q.SQ.Available()
		return n > 0 || err != nil || q.sendSeg != 0
	case proto.QPStateError:
		// A corrupt ring (err) is not work: nothing in it can be flushed.
		if n, _ := q.SQ.Available(); n > 0 {
			return true
		}
		if q.RQ != nil {
			if n, _ := q.RQ.Available(); n > 0 {
				return true
			}
		}
	}
	return false
}

// Due (rnic.QPOps): a socket writable again (RC), a timer Due.
func (q *QP) Due(now time.Time) bool {
	d, ok := q.Deadline()
	return ok && !d.After(now)
}

// Deadline (rnic.QPOps): the earliest of the reassembly, Write-Record, RD and
// RC timers.
func (q *QP) Deadline() (time.Time, bool) {
	var first time.Time
	found := false
	note := func(t time.Time, ok bool) {
		if ok && (!found || t.Before(first)) {
			first, found = t, true
		}
	}
	note(q.reasm.NextDeadline())
	note(q.wrec.nextDeadline()) // a Write-Record to complete (ud/wrec_recv.go)
	if q.Eng != nil {
		note(q.FastpathDeadline(q.Eng.Cfg.Lease())) // rnic/fastpath.go: the rank's lease ends, a look at its Busy
	}
	return first, found
}

// Service (rnic.QPOps) does at most PollBatch units of work on q and reports
// whether it did any.
func (q *QP) Service(now time.Time) bool {
	e := q.e
	work := false
	e.fastpathBegin(q, now) // ud/fastpath.go
	if q.backlog.parked || q.backlog.waiting() {
		work = e.resumeBacklog(q, now) // ud/backlog.go
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
		if e.Flush(q) {
			work = true
		}
	}
	if n := q.reasm.Expire(now); n > 0 {
		e.count(q, rnic.CReassemblyTimeout, int64(n))
	}
	if e.expireRecords(q, now) { // ud/wrec_recv.go
		work = true
	}
	if e.fastpathEnd(q, now) { // ud/fastpath.go: after the completions of what was read
		work = true
	}
	return work
}

// Event (rnic.QPOps): a parked UD socket's error is cleared and consumed; an
// RC socket writable again lets a cut batch go on.
func (q *QP) Event(events uint32) bool {
	if err, bad := rnic.SockEventBroken(q.QP, events); bad { // rnic/qpsock.go: a client-made socket shut down
		q.Eng.SocketFailed(q.QP, "epoll", err)
		return false
	}
	if q.backlog.parked {
		// Only EPOLLERR/EPOLLHUP reach a parked socket (no interest,
		// ud/backlog.go): clear the error, or the level-triggered event
		// would wake every epoll_wait.
		unix.GetsockoptInt(q.FD, unix.SOL_SOCKET, unix.SO_ERROR)
		return false
	}
	return true
}

// Removing (rnic.QPOps): a connection still up is logged; a UD QP's socket
// drops are counted before its sockets close; multicast groups are left.
func (q *QP) Removing() {
	e := q.e
	if q.Type == proto.QPTypeUD {
		e.Stats[rnic.CDropSocketFull] += q.socketDrops() // ud/backlog.go: before its sockets close
	}
	e.detachAllMcast(q) // ud/mcast.go
}

// Removed (rnic.QPOps): an RD QP's owed ACKs leave, then its socket lingers.
func (q *QP) Removed() {
}

// Closed (rnic.QPOps).
func (q *QP) Closed() {
	q.reasm.reset()
	q.backlog = udBacklog{}
}

// LogsOwnEnd (rnic.QPOps): errorQP logs why a datagram QP ended.
func (q *QP) LogsOwnEnd() bool { return false }

// Core returns the core QP.
func (q *QP) Core() *rnic.QP { return q.QP }

// Install (transportQP) puts the QP on engine e: its socket joins e's
// epoll set, an RD QP's reorder store counts against e's budget.
func (q *QP) Install(e *rnic.Engine) error {
	q.e = EngOf(e)
	return e.AddQP(q.QP)
}

// CheckModify (transportQP): every transition the core allows.
func (q *QP) CheckModify(proto.QPState, uint32) error { return nil }

// Modified (transportQP): a new Q_Key; RESET starts a new life (no partial
// message, record or RD state survives).
func (q *QP) Modified(to proto.QPState, qkey uint32) {
	if qkey != 0 {
		q.Qkey = qkey
	}
	if to == proto.QPStateReset {
		q.sendSeg = 0
		q.reasm.reset()
		q.wrec.reset()
	}
}

// Addr (transportQP) is the QP's UDP address.
func (q *QP) Addr() netip.AddrPort { return q.Local }

// Inspect (transportQP): partial messages, socket drops (UD), RD state.
func (q *QP) Inspect(m map[string]int64) {
	m["partial_messages"] = int64(q.reasm.Partials())
	if q.Type == proto.QPTypeUD {
		m["drop_socket_full"] = q.socketDrops() // ud/backlog.go
	}
}

// QKey (transportQP).
func (q *QP) QKey() uint32 { return q.Qkey }
