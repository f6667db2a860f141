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
	Session *Session // the client session that created it
	Eng     *Engine  // the engine that owns and serves it (rnic/engines.go place)
	Ops     QPOps    // its transport: ud.QP, rd.QP or rc.QP
	// cqOverran: a CQ it uses overran on another engine; its own engine
	// moves it to ERROR at its next service (rnic/engines.go serveShared).
	cqOverran atomic.Bool
	Handle    uint32        // the session's handle of it
	QPN       uint32        // its QP number, device-wide
	Type      proto.QPType  // UD, RD or RC
	PD        *PD           // its protection domain
	SendCQ    *CQ           // completions of its send queue
	RecvCQ    *CQ           // completions of its receives
	SRQ       *SRQ          // its shared receive queue; nil: its own RQ
	Caps      proto.QPCaps  // queue depths, SGEs, inline size
	SigAll    bool          // every send work request completes (sq_sig_all)
	State     proto.QPState // RESET, INIT, RTR, RTS, ERROR
	ErrWhy    string        // why a local error or the client moved the QP to ERROR (errorQP, modify-qp; rc/log.go)

	Region *Mapping      // the client's memfd holding its rings
	SQ     *shm.Consumer // the send queue ring
	RQ     *shm.Consumer // the receive queue ring; nil with an SRQ

	FD       int            // its socket (UDP; RC: the connection's), -1 if none
	Local    netip.AddrPort // its socket's local address
	Readable bool           // epoll said the socket is readable
	Blocked  bool           // the socket buffer was full (EAGAIN)
	// ClientSock: FD is the client's own socket (ABI 5, rnic/qpsock.go).
	// SockDead: an error of that socket moved the QP to ERROR for good
	// (SocketFailed); it left the epoll set.
	ClientSock bool
	SockDead   bool
	// FP: the QP's fast-path page (rnic/fastpath.go), nil: none (the
	// engine alone reads its socket).
	FP *Fastpath

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
	return q.RQ
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

// CloseQP releases q's socket and region (after RemoveQP).
func CloseQP(q *QP) {
	if q.FD >= 0 {
		unix.Close(q.FD)
		q.FD = -1
	}
	q.Region.Close()
	q.FP.Close()
	q.Ops.Closed() // ud/qp.go
}
