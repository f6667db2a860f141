package verbsd

import (
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// rcEngine is an engine as the RC transport sees it (it keeps nothing per
// engine: each RC QP has its own view of the engine serving it).
type rcEngine struct{ *rnic.Engine }

// count, errorQP and markReady take the RC QP.
func (e *rcEngine) count(q *rcQP, c rnic.Counter, n int64) {
	if q == nil {
		e.Count(nil, c, n)
		return
	}
	e.Count(q.QP, c, n)
}
func (e *rcEngine) errorQP(q *rcQP, why string) { e.ErrorQP(q.QP, why) }
func (e *rcEngine) markReady(q *rcQP)           { e.MarkReady(q.QP) }

// rcQP is an RC queue pair: the core QP, its connection once established
// (rc_conn.go) and the connection manager's hold on it (cm.go).
type rcQP struct {
	*rnic.QP
	e *rcEngine // its engine (set when installed)

	noCRC bool // the client asked for no MPA CRC (proto.CreateQPRequest.NoCRC)
	// mergeImm: created with merge_send_imm (rc_imm.go).
	mergeImm bool

	rc         *rcConn     // nil until connected (attachRC)
	onRCClosed rcCloseFunc // set by the CM; told when the connection ends
	cm         qpCM        // connection manager state (cm*.go)
}

// newRCQP makes the RC transport of a core QP.
func newRCQP(c *rnic.QP, noCRC, mergeImm bool) *rcQP {
	q := &rcQP{QP: c, noCRC: noCRC, mergeImm: mergeImm}
	c.Ops = q
	return q
}

// rcQPOf returns the RC view of a core QP (nil if it is no RC QP).
func rcQPOf(c *rnic.QP) *rcQP {
	q, _ := c.Ops.(*rcQP)
	return q
}

// Core returns the core QP.
func (q *rcQP) Core() *rnic.QP { return q.QP }

// Install puts the QP on engine e before it is connected: it gets its QP
// number and is served (flushes in ERROR), but has no socket to poll until
// attachRC.
func (q *rcQP) Install(e *rnic.Engine) error {
	q.e = &rcEngine{e}
	return e.AddUnpolledQP(q.QP)
}

// CheckModify (transportQP): RC QPs are connected by the CM (cm.go) and
// have no Q_Key.
func (q *rcQP) CheckModify(to proto.QPState, qkey uint32) error {
	if to == proto.QPStateRTR || to == proto.QPStateRTS {
		return rnic.Errf(unix.EINVAL, "modify-qp: RC QPs are connected with rdma-cm style Connect/Accept, not moved to %v", to)
	}
	if qkey != 0 {
		return rnic.Errf(unix.EINVAL, "modify-qp: a Q_Key is a datagram QP attribute; RC QPs have none")
	}
	return nil
}

// Modified (transportQP): RC keeps nothing of a transition.
func (q *rcQP) Modified(proto.QPState, uint32) {}

// Addr is the connection's local address once connected.
func (q *rcQP) Addr() netip.AddrPort {
	if q.rc != nil {
		return q.rc.local
	}
	return netip.AddrPort{}
}

// Inspect (transportQP): RC's figures are all counters.
func (q *rcQP) Inspect(map[string]int64) {}

// QKey: RC QPs have none.
func (q *rcQP) QKey() uint32 { return 0 }

// Added (rnic.QPOps): nothing to set up (attachRC polls the socket).
func (q *rcQP) Added() {}

// HasWork (rnic.QPOps).
func (q *rcQP) HasWork() bool { return q.rcHasWork() }

// Due (rnic.QPOps): the socket writable again, or a closing timer due.
func (q *rcQP) Due(now time.Time) bool {
	if q.rc != nil && q.rc.outReady {
		return true
	}
	d, ok := q.rcDeadline()
	return ok && !d.After(now)
}

// Deadline (rnic.QPOps): an RC connection closing (rc_conn.go).
func (q *rcQP) Deadline() (time.Time, bool) { return q.rcDeadline() }

// Service (rnic.QPOps).
func (q *rcQP) Service(now time.Time) bool { return q.e.serviceRC(q, now) }

// Event (rnic.QPOps): a socket writable again lets a cut batch go on.
func (q *rcQP) Event(events uint32) bool {
	if q.rc != nil && events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		q.rc.outReady = true // rc_tx.go
	}
	return true
}

// Removing (rnic.QPOps): a connection still up is logged.
func (q *rcQP) Removing() {
	if c := q.rc; c != nil && c.phase != rcIdle && c.phase != rcClosed {
		c.setCause("the local client destroyed the QP (or exited) with the connection up")
		q.e.rcLogClosed(q, rcClosedSocketError, ": its socket closed", "QP destroyed")
	}
}

// Removed, Closed (rnic.QPOps): nothing more.
func (q *rcQP) Removed() {}
func (q *rcQP) Closed()  {}

// LogsOwnEnd (rnic.QPOps): a connected RC QP logs when its connection ends.
func (q *rcQP) LogsOwnEnd() bool { return q.rc != nil }

// rcSession is a client session as the RC connection manager sees it: the
// core session and its listeners and pending connections (cm.go).
type rcSession struct {
	*rnic.Session
	cm cmSession
}

// qp returns the session's RC QP with handle h (nil if none or not RC).
func (s *rcSession) qp(h uint32) *rcQP {
	if c := s.QPs[h]; c != nil {
		return rcQPOf(c)
	}
	return nil
}
