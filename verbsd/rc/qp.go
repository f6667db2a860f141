package rc

import (
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// engine is an engine as the RC transport sees it: it keeps nothing per
// engine and has no work beyond its QPs (rnic.EngineHooks).
type engine struct{ *rnic.Engine }

// NewEngine is the RC transport's part of core engine c (its Ext).
func NewEngine(c *rnic.Engine) rnic.EngineHooks { return &engine{c} }

func (e *engine) Service(time.Time) bool      { return false }
func (e *engine) Event(int32, uint32) bool    { return false }
func (e *engine) Deadline() (time.Time, bool) { return time.Time{}, false }
func (e *engine) CloseAll()                   {}
func (e *engine) Inspect(map[string]int64)    {}

// count and errorQP take the RC QP.
func (e *engine) count(q *QP, c rnic.Counter, n int64) {
	if q == nil {
		e.Count(nil, c, n)
		return
	}
	e.Count(q.QP, c, n)
}
func (e *engine) errorQP(q *QP, why string) { e.ErrorQP(q.QP, why) }

// QP is an RC queue pair: the core QP, its connection once established
// (rc/conn.go) and the connection manager's hold on it (rc/cm.go).
type QP struct {
	*rnic.QP
	Engine *engine // its engine (set when installed)

	noCRC bool // the client asked for no MPA CRC (proto.CreateQPRequest.NoCRC)
	// mergeImm: created with merge_send_imm (rc/imm.go).
	mergeImm bool
	// holdRecv: created with hold_recv (rc/hold.go).
	holdRecv bool

	Conn       *conn     // nil until connected (AttachRC)
	OnRCClosed closeFunc // set by the CM; told when the connection ends
	cm         qpCM      // connection manager state (cm*.go)
}

// NewQP makes the RC transport of a core QP.
func NewQP(c *rnic.QP, noCRC, mergeImm, holdRecv bool) *QP {
	q := &QP{QP: c, noCRC: noCRC, mergeImm: mergeImm, holdRecv: holdRecv}
	c.Ops = q
	return q
}

// QPOf returns the RC view of a core QP (nil if it is no RC QP).
func QPOf(c *rnic.QP) *QP {
	q, _ := c.Ops.(*QP)
	return q
}

// Core returns the core QP.
func (q *QP) Core() *rnic.QP { return q.QP }

// Install puts the QP on engine e before it is connected: it gets its QP
// number and is served (flushes in ERROR), but has no socket to poll until
// AttachRC.
func (q *QP) Install(e *rnic.Engine) error {
	q.Engine = rnic.ExtOf[*engine](e)
	return e.AddUnpolledQP(q.QP)
}

// CheckModify (transportQP): RC QPs are connected by the CM (rc/cm.go) and
// have no Q_Key.
func (q *QP) CheckModify(to proto.QPState, qkey uint32) error {
	if to == proto.QPStateRTR || to == proto.QPStateRTS {
		return rnic.Errf(unix.EINVAL, "modify-qp: RC QPs are connected with rdma-cm style Connect/Accept, not moved to %v", to)
	}
	if qkey != 0 {
		return rnic.Errf(unix.EINVAL, "modify-qp: a Q_Key is a datagram QP attribute; RC QPs have none")
	}
	return nil
}

// Modified (transportQP): RC keeps nothing of a transition.
func (q *QP) Modified(proto.QPState, uint32) {}

// Addr is the connection's local address once connected.
func (q *QP) Addr() netip.AddrPort {
	if q.Conn != nil {
		return q.Conn.local
	}
	return netip.AddrPort{}
}

// Inspect (transportQP): RC's figures are counters, but for what its
// receive hold keeps now (rc/hold.go).
func (q *QP) Inspect(m map[string]int64) {
	if q.Conn != nil {
		m["rc_held_msgs"] = int64(q.Conn.hold.msgs.Len())
		m["rc_held_bytes"] = int64(q.Conn.hold.bytes)
	}
}

// QKey: RC QPs have none.
func (q *QP) QKey() uint32 { return 0 }

// Added (rnic.QPOps): nothing to set up (AttachRC polls the socket).
func (q *QP) Added() {}

// HasWork (rnic.QPOps).
func (q *QP) HasWork() bool { return q.hasWork() }

// Due (rnic.QPOps): the socket writable again, or a closing timer due.
func (q *QP) Due(now time.Time) bool {
	if q.Conn != nil && q.Conn.outReady {
		return true
	}
	d, ok := q.deadline()
	return ok && !d.After(now)
}

// Deadline (rnic.QPOps): an RC connection closing (rc/conn.go).
func (q *QP) Deadline() (time.Time, bool) { return q.deadline() }

// Service (rnic.QPOps).
func (q *QP) Service(now time.Time) bool { return q.Engine.serviceRC(q, now) }

// Event (rnic.QPOps): a socket writable again lets a cut batch go on.
func (q *QP) Event(events uint32) bool {
	if q.Conn != nil && events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		q.Conn.outReady = true // rc/tx.go
	}
	return true
}

// Removing (rnic.QPOps): a connection still up is logged.
func (q *QP) Removing() {
	if c := q.Conn; c != nil && c.phase != idle && c.phase != closed {
		c.setCause("the local client destroyed the QP (or exited) with the connection up")
		q.Engine.logClosed(q, ClosedSocketError, ": its socket closed", "QP destroyed")
	}
}

// Removed (rnic.QPOps): what the receive hold keeps goes (rc/hold.go).
func (q *QP) Removed() {
	if q.Conn != nil {
		q.Engine.dropHeld(q, "the QP was destroyed")
	}
}

// Closed (rnic.QPOps): nothing more.
func (q *QP) Closed() {}

// LogsOwnEnd (rnic.QPOps): a connected RC QP logs when its connection ends.
func (q *QP) LogsOwnEnd() bool { return q.Conn != nil }

// CM is a client session as the RC connection manager sees it: the
// core session and its listeners and pending connections (rc/cm.go).
type CM struct {
	*rnic.Session
	cm cmSession
}

// qp returns the session's RC QP with handle h (nil if none or not RC).
func (s *CM) qp(h uint32) *QP {
	if c := s.QPs[h]; c != nil {
		return QPOf(c)
	}
	return nil
}
