package rd

import (
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
)

// Engine is an engine as the RD transport sees it: the datagram engine
// (its scratch is shared with UD) and what RD keeps per engine.
type Engine struct {
	*ud.Engine

	// storeBytes: octets held in the reorder stores of all RD QPs
	// (rd/recv.go storeRoom, -rd-reorder-bytes).
	storeBytes int
	// linger: the ports of destroyed RD QPs that linger (rd/linger.go).
	linger lingers
	// recv: the RD receive being claimed or placed into (rd/recv.go).
	recv rnic.RecvWR
	// wrecPiece: the payload of the Write-Record segment being placed
	// (rd/wrec_rd.go), as the one piece AcceptWriteRecord takes.
	wrecPiece [1][]byte
	// noRuns turns the send fast lane off (rd/sendrun.go SetSendRuns).
	noRuns bool
}

// engOf returns the RD engine of a core engine.
func engOf(c *rnic.Engine) *Engine { return rnic.ExtOf[*Engine](c) }

// rnic.EngineHooks: the lingering ports of destroyed RD QPs (rd/linger.go).
func (e *Engine) Service(now time.Time) bool     { return e.lingerService(now) }
func (e *Engine) Event(fd int32, ev uint32) bool { return e.lingerEvent(fd, ev) }
func (e *Engine) Deadline() (time.Time, bool)    { return e.lingerDeadline() }
func (e *Engine) CloseAll()                      { e.lingerCloseAll() }
func (e *Engine) Inspect(m map[string]int64)     { e.inspect(m) } // rd/state.go

// count and errorQP take the RD QP.
func (e *Engine) count(q *QP, c rnic.Counter, n int64) {
	if q == nil {
		e.Count(nil, c, n)
		return
	}
	e.Count(q.QP.QP, c, n)
}
func (e *Engine) errorQP(q *QP, why string) { e.ErrorQP(q.QP.QP, why) }

// QP is an RD queue pair (docs/rd.md): a datagram QP (socket,
// Write-Record, reassembly) made reliable by its RD state.
type QP struct {
	*ud.QP
	E  *Engine // its engine (set when installed)
	Rd *state
}

// newQPView makes the RD transport of a datagram QP.
func newQPView(d *ud.QP, st *state) *QP {
	q := &QP{QP: d, Rd: st}
	d.Ops = q
	return q
}

// NewQP makes the RD transport of datagram QP d (its socket bound by
// BindRD): RD state by the device's RD policy within the QP's caps; the
// reorder store counts against the engine it is installed on.
func NewQP(d *ud.QP, cfg *config.Config, caps proto.QPCaps) *QP {
	return newQPView(d, newRDState(qpConfig(&cfg.RD, caps), cfg.DatagramSize, cfg.SocketBuffer, nil))
}

// QPOf returns the RD view of a core QP (nil if it is no RD QP).
func QPOf(c *rnic.QP) *QP {
	q, _ := c.Ops.(*QP)
	return q
}

// Install (transportQP): the datagram QP's, and its reorder store counts
// against the engine's budget.
func (q *QP) Install(e *rnic.Engine) error {
	q.E = engOf(e)
	q.Rd.store = &q.E.storeBytes
	return q.QP.Install(e)
}

// HasWork (rnic.QPOps).
func (q *QP) HasWork() bool { return q.hasWork() } // rd/state.go

// Due (rnic.QPOps): a timer due.
func (q *QP) Due(now time.Time) bool {
	d, ok := q.Deadline()
	return ok && !d.After(now)
}

// Deadline (rnic.QPOps): the datagram timers and RD's (retransmission,
// delayed ACK).
func (q *QP) Deadline() (time.Time, bool) {
	d, ok := q.QP.Deadline()
	if r, rok := q.deadline(); rok && (!ok || r.Before(d)) {
		return r, true
	}
	return d, ok
}

// Service (rnic.QPOps).
func (q *QP) Service(now time.Time) bool { return q.E.serviceRD(q, now) } // rd/state.go

// Removed (rnic.QPOps): the ACKs it owes leave, then its socket lingers.
func (q *QP) Removed() { q.E.close(q, time.Now()) } // rd/linger.go

// Modified (transportQP): the datagram QP's, and RESET starts RD anew.
func (q *QP) Modified(to proto.QPState, qkey uint32) {
	q.QP.Modified(to, qkey)
	if to == proto.QPStateReset {
		q.reset() // rd/state.go
	}
}

// Inspect (transportQP): the datagram figures and RD's state.
func (q *QP) Inspect(m map[string]int64) {
	q.QP.Inspect(m)
	q.inspect(m) // rd/state.go
}
