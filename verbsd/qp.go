package verbsd

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// qp is a UD queue pair: its rings in the client's region, its UDP socket,
// and the engine's state for it (engine-owned).
type qp struct {
	s   *session
	eng *engine // the engine that owns and serves it (engines.go place)
	// cqOverran: a CQ it uses overran on another engine; its own engine
	// moves it to ERROR at its next service (engines.go serveShared).
	cqOverran atomic.Bool
	handle    uint32
	qpn       uint32
	pd        *pd
	sendCQ    *cq
	recvCQ    *cq
	srq       *srq
	caps      proto.QPCaps
	sigAll    bool
	noCRC     bool
	// mergeImm: an RC QP created with merge_send_imm (rc_imm.go).
	mergeImm bool
	qkey     uint32 // datagram QPs: the Q_Key every accepted datagram names (keys.go)
	state    proto.QPState
	errWhy   string // why a local error or the client moved the QP to ERROR (errorQP, modify-qp; rc_log.go)

	region *mapping
	sq     *shm.Consumer
	rq     *shm.Consumer // nil with an SRQ

	fd       int
	local    netip.AddrPort
	readable bool // epoll said the socket has datagrams

	onReady  bool      // on the engine's ready list (ready.go)
	lastWork time.Time // the last pass that did work on it

	views qpViews // where its rings' entries are (look-ahead)

	// Send side.
	lastMSN uint32 // MSN of the last message sent or failed (first message: 1)
	sendSeg uint32 // next segment of the head SQE (0: not started)
	blocked bool   // the socket buffer was full (EAGAIN)
	gso     bool   // UDP GSO allowed on its socket (off after the kernel refused)

	// Receive side.
	rwr      recvWR
	reasm    reassembler
	backlog  udBacklog // UD: parked sockets, held datagrams (ud_backlog.go)
	maxRecvS uint32    // SGEs per RQE (QP's or SRQ's)

	// Datagram extensions: Write-Record records being received (wrec*.go)
	// and the multicast groups the QP is attached to (mcast*.go).
	wrec  wrecTable
	mcast mcastState

	stats counters
	guard accessGuard // refused remote accesses (access_guard.go)

	// RC (nil rc on UD QPs; see rc_*.go).
	rc         *rcConn
	onRCClosed rcCloseFunc // set by the CM; told when the connection ends

	// RD (nil on UD and RC QPs; see rd_*.go).
	rd *rdQP

	// Connection manager (cm*.go).
	typ proto.QPType // RC or UD
	cm  qpCM
}

// recvWR is a copied, validated receive work request.
type recvWR struct {
	valid bool
	wrid  uint64
	bufs  [][]byte // translated SGEs
	total int
}

// recvRing returns the consumer receives come from (the SRQ's or the QP's).
func (q *qp) recvRing() *shm.Consumer {
	if q.srq != nil {
		return q.srq.cons
	}
	return q.rq
}

// hasWorkLocal reports whether the client published work the engine must
// act on now: sends in RTS, or anything to flush in ERROR (through hasWork,
// engines.go).
func (q *qp) hasWorkLocal() bool {
	if q.typ == proto.QPTypeRC {
		return q.rcHasWork()
	}
	if q.rd != nil {
		return q.rdHasWork() // rd_qp.go
	}
	if q.backlogWork() { // ud_backlog.go: a receive posted for what waits
		return true
	}
	switch q.state {
	case proto.QPStateRTS:
		n, err := q.sq.Available()
		return n > 0 || err != nil || q.sendSeg != 0
	case proto.QPStateError:
		// A corrupt ring (err) is not work: nothing in it can be flushed.
		if n, _ := q.sq.Available(); n > 0 {
			return true
		}
		if q.rq != nil {
			if n, _ := q.rq.Available(); n > 0 {
				return true
			}
		}
	}
	return false
}

// serviceQP does at most PollBatch units of work on q and reports whether
// it did any.
func (e *engine) serviceQP(q *qp, now time.Time) bool {
	if q.typ == proto.QPTypeRC {
		return e.serviceRC(q, now) // rc_conn.go
	}
	if q.rd != nil {
		return e.serviceRD(q, now) // rd_qp.go
	}
	work := false
	if q.backlog.parked || q.backlog.waiting() {
		work = e.resumeBacklog(q, now) // ud_backlog.go
	}
	if q.readable && e.receive(q, now) {
		work = true
	}
	switch q.state {
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
		e.count(q, cReassemblyTimeout, int64(n))
	}
	if e.expireRecords(q, now) { // wrec_recv.go
		work = true
	}
	return work
}

// flush completes posted work requests of an ERROR QP with WCWRFlushErr,
// at most PollBatch per queue per pass.
func (e *engine) flush(q *qp) bool {
	work := false
	for range e.cfg.PollBatch {
		slot, err := q.sq.Peek()
		if err != nil || slot == nil {
			break
		}
		wrid := proto.GetSQE(slot).WRID
		q.sq.Advance()
		q.sq.Release()
		q.sendSeg = 0
		e.count(q, cFlushed, 1)
		e.postCQE(q.s, q.sendCQ, &proto.CQE{WRID: wrid, Status: proto.WCWRFlushErr, Opcode: proto.WCSend, QPN: q.qpn})
		work = true
	}
	if q.rq == nil {
		return work
	}
	for range e.cfg.PollBatch {
		slot, err := q.rq.Peek()
		if err != nil || slot == nil {
			break
		}
		wrid := proto.GetRQE(slot).WRID
		q.rq.Advance()
		q.rq.Release()
		e.count(q, cFlushed, 1)
		e.postCQE(q.s, q.recvCQ, &proto.CQE{WRID: wrid, Status: proto.WCWRFlushErr, Opcode: proto.WCRecv, QPN: q.qpn})
		work = true
	}
	return work
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
func closeQP(q *qp) {
	if q.fd >= 0 {
		unix.Close(q.fd)
		q.fd = -1
	}
	q.region.Close()
	q.reasm.reset()
	q.backlog = udBacklog{}
}
