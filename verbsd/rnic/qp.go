package rnic

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// QP is the engine's part of a queue pair of any type: its rings in the
// client's region, its socket, its CQs and SRQ, its state, and its place in
// the engine's polling set (engine-owned). What a transport keeps besides
// is behind ops (ud/qp.go): the engine serves a QP only through it.
type QP struct {
	S   *Session
	Eng *Engine // the engine that owns and serves it (rnic/engines.go place)
	Ops QPOps   // its transport (ud/qp.go)
	// cqOverran: a CQ it uses overran on another engine; its own engine
	// moves it to ERROR at its next service (rnic/engines.go serveShared).
	cqOverran atomic.Bool
	Handle    uint32
	QPN       uint32
	Typ       proto.QPType
	PD        *PD
	SendCQ    *CQ
	RecvCQ    *CQ
	SRQ       *SRQ
	Caps      proto.QPCaps
	SigAll    bool
	State     proto.QPState
	ErrWhy    string // why a local error or the client moved the QP to ERROR (errorQP, modify-qp; rc/log.go)

	Region *Mapping
	Sq     *shm.Consumer
	Rq     *shm.Consumer // nil with an SRQ

	FD       int
	Local    netip.AddrPort
	Readable bool // epoll said the socket is readable
	Blocked  bool // the socket buffer was full (EAGAIN)

	onReady  bool      // on the engine's ready list (rnic/ready.go)
	lastWork time.Time // the last pass that did work on it

	views    qpViews // where its rings' entries are (look-ahead)
	MaxRecvS uint32  // SGEs per RQE (QP's or SRQ's)

	Stats counters
	guard accessGuard // refused remote accesses (rnic/access_guard.go)
}

// RecvWR is a copied, validated receive work request.
type RecvWR struct {
	Valid bool
	WRID  uint64
	Bufs  [][]byte // translated SGEs
	Total int
}

// RecvRing returns the consumer receives come from (the SRQ's or the QP's).
func (q *QP) RecvRing() *shm.Consumer {
	if q.SRQ != nil {
		return q.SRQ.Cons
	}
	return q.Rq
}

// DiscardPosted drops every posted work request without completions (the
// move to RESET).
func DiscardPosted(c *shm.Consumer) {
	if c == nil {
		return
	}
	for {
		slot, err := c.Peek()
		if err != nil || slot == nil {
			break
		}
		c.Advance()
	}
	c.Release()
}

// CloseQP releases q's socket and region (after removeQP).
func CloseQP(q *QP) {
	if q.FD >= 0 {
		unix.Close(q.FD)
		q.FD = -1
	}
	q.Region.Close()
	q.Ops.Closed() // ud/qp.go
}
