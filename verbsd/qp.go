package verbsd

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
// is behind ops (transport.go): the engine serves a QP only through it.
type QP struct {
	s   *Session
	eng *Engine // the engine that owns and serves it (engines.go place)
	ops qpOps   // its transport (transport.go)
	// cqOverran: a CQ it uses overran on another engine; its own engine
	// moves it to ERROR at its next service (engines.go serveShared).
	cqOverran atomic.Bool
	handle    uint32
	qpn       uint32
	typ       proto.QPType
	pd        *pd
	sendCQ    *cq
	recvCQ    *cq
	srq       *srq
	caps      proto.QPCaps
	sigAll    bool
	state     proto.QPState
	errWhy    string // why a local error or the client moved the QP to ERROR (errorQP, modify-qp; rc_log.go)

	region *mapping
	sq     *shm.Consumer
	rq     *shm.Consumer // nil with an SRQ

	fd       int
	local    netip.AddrPort
	readable bool // epoll said the socket is readable
	blocked  bool // the socket buffer was full (EAGAIN)

	onReady  bool      // on the engine's ready list (ready.go)
	lastWork time.Time // the last pass that did work on it

	views    qpViews // where its rings' entries are (look-ahead)
	maxRecvS uint32  // SGEs per RQE (QP's or SRQ's)

	stats counters
	guard accessGuard // refused remote accesses (access_guard.go)
}

// recvWR is a copied, validated receive work request.
type recvWR struct {
	valid bool
	wrid  uint64
	bufs  [][]byte // translated SGEs
	total int
}

// recvRing returns the consumer receives come from (the SRQ's or the QP's).
func (q *QP) recvRing() *shm.Consumer {
	if q.srq != nil {
		return q.srq.cons
	}
	return q.rq
}

// discardPosted drops every posted work request without completions (the
// move to RESET).
func discardPosted(c *shm.Consumer) {
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

// closeQP releases q's socket and region (after removeQP).
func closeQP(q *QP) {
	if q.fd >= 0 {
		unix.Close(q.fd)
		q.fd = -1
	}
	q.region.Close()
	q.ops.closed() // transport.go
}
