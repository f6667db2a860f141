package verbsd

import (
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
)

// rdEngine is an engine as the RD transport sees it: the datagram engine
// (its scratch is shared with UD) and what RD keeps per engine.
type rdEngine struct {
	*ud.Engine

	// rdStoreBytes: octets held in the reorder stores of all RD QPs
	// (rd_recv.go storeRoom, -rd-reorder-bytes).
	rdStoreBytes int
	// rdLinger: the ports of destroyed RD QPs that linger (rd_linger.go).
	rdLinger rdLingers
	// rdRecv: the RD receive being claimed or placed into (rd_recv.go).
	rdRecv rnic.RecvWR
}

// rdEngOf returns the RD engine of a core engine.
func rdEngOf(c *rnic.Engine) *rdEngine {
	for _, x := range c.Ext {
		if e, ok := x.(*rdEngine); ok {
			return e
		}
	}
	panic("verbsd: an engine without its RD transport")
}

// rnic.EngineHooks: the lingering ports of destroyed RD QPs (rd_linger.go).
func (e *rdEngine) Service(now time.Time) bool  { return e.rdLingerService(now) }
func (e *rdEngine) Event(fd int32) bool         { return e.rdLingerEvent(fd) }
func (e *rdEngine) Deadline() (time.Time, bool) { return e.rdLingerDeadline() }
func (e *rdEngine) CloseAll()                   { e.rdLingerCloseAll() }
func (e *rdEngine) Inspect(m map[string]int64)  { e.rdInspect(m) } // rd_qp.go

// count, errorQP and markReady take the RD QP.
func (e *rdEngine) count(q *rdQP, c rnic.Counter, n int64) {
	if q == nil {
		e.Count(nil, c, n)
		return
	}
	e.Count(q.QP.QP, c, n)
}
func (e *rdEngine) errorQP(q *rdQP, why string) { e.ErrorQP(q.QP.QP, why) }
func (e *rdEngine) markReady(q *rdQP)           { e.MarkReady(q.QP.QP) }

// rdQP is an RD queue pair (docs/rd.md): a datagram QP (socket,
// Write-Record, reassembly) made reliable by its RD state.
type rdQP struct {
	*ud.QP
	e  *rdEngine // its engine (set when installed)
	rd *rdState
}

// newRDQPView makes the RD transport of a datagram QP.
func newRDQPView(d *ud.QP, st *rdState) *rdQP {
	q := &rdQP{QP: d, rd: st}
	d.Ops = q
	return q
}

// rdQPOf returns the RD view of a core QP (nil if it is no RD QP).
func rdQPOf(c *rnic.QP) *rdQP {
	q, _ := c.Ops.(*rdQP)
	return q
}

// Install (transportQP): the datagram QP's, and its reorder store counts
// against the engine's budget.
func (q *rdQP) Install(e *rnic.Engine) error {
	q.e = rdEngOf(e)
	q.rd.store = &q.e.rdStoreBytes
	return q.QP.Install(e)
}

// HasWork (rnic.QPOps).
func (q *rdQP) HasWork() bool { return q.rdHasWork() } // rd_qp.go

// Due (rnic.QPOps): a timer due.
func (q *rdQP) Due(now time.Time) bool {
	d, ok := q.Deadline()
	return ok && !d.After(now)
}

// Deadline (rnic.QPOps): the datagram timers and RD's (retransmission,
// delayed ACK).
func (q *rdQP) Deadline() (time.Time, bool) {
	d, ok := q.QP.Deadline()
	if r, rok := q.rdDeadline(); rok && (!ok || r.Before(d)) {
		return r, true
	}
	return d, ok
}

// Service (rnic.QPOps).
func (q *rdQP) Service(now time.Time) bool { return q.e.serviceRD(q, now) } // rd_qp.go

// Removed (rnic.QPOps): the ACKs it owes leave, then its socket lingers.
func (q *rdQP) Removed() { q.e.rdClose(q, time.Now()) } // rd_linger.go

// Modified (transportQP): the datagram QP's, and RESET starts RD anew.
func (q *rdQP) Modified(to proto.QPState, qkey uint32) {
	q.QP.Modified(to, qkey)
	if to == proto.QPStateReset {
		q.rdReset() // rd_qp.go
	}
}

// Inspect (transportQP): the datagram figures and RD's state.
func (q *rdQP) Inspect(m map[string]int64) {
	q.QP.Inspect(m)
	q.rdInspect(m) // rd_qp.go
}
