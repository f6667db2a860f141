package rd

import (
	cryptorand "crypto/rand"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// RD queue pairs (docs/rd.md): the datagram profile with the RD header,
// reliable by the pure state machine of llp/rd (one rd.Endpoint per QP).
// The engine owns the bytes: a DATA datagram is rebuilt from its token
// whenever the state machine asks for a retransmission.
//
// Tokens: the top two bits say what a datagram carries, the rest names it:
//
//	00 | WR sequence (38 bits) | segment (24 bits)   a segment of a send WR
//	01 | response sequence (38) | segment (24)       a Read Response segment
//	10 | error message sequence                     an error message

// Token kinds.
const (
	tokWR      = 0
	tokResp    = 1
	tokErrMsg  = 2
	tokSegBits = 24
	tokSeqMask = 1<<38 - 1
)

func makeToken(kind int, seq uint64, seg uint32) rd.Token {
	return rd.Token(uint64(kind)<<62 | (seq&tokSeqMask)<<tokSegBits | uint64(seg))
}

func splitToken(t rd.Token) (kind int, seq uint64, seg uint32) {
	return int(t >> 62), uint64(t>>tokSegBits) & tokSeqMask, uint32(t) & (1<<tokSegBits - 1)
}

// counter names the RD statistics of a QP (Inspect: rd_*).
type counter int

const (
	retryExceeded   counter = iota // work requests completed with WCRetryExcErr
	acksOut                        // standalone ACK datagrams sent
	accessErrors                   // Read Requests refused (access, bounds, STag)
	msgTooLong                     // Sends longer than the receive they claimed
	badMessage                     // DATA with a bad DDP/RDMAP header, QN or opcode (error message sent)
	errMsgDropped                  // error messages not sent: queue full
	errMsgUnmatched                // error messages received naming no known work request
	readBytesOut                   // Read Response payload octets sent (responder)
	dropFraming                    // datagrams dropped: RD header, truncated
	dropResponse                   // Read Response segments matching no outstanding Read
	backlogged                     // in-order DATA kept until a receive is posted
	reorderFull                    // out-of-order DATA dropped: the reorder store was full (-rd-reorder-*bytes)
	fpTaken                        // datagrams the rank left outstanding, taken back at a take-over (rd/fastpath.go)
	fpResent                       // retransmissions of the rank's datagrams from their copies
	fpGiven                        // datagrams outstanding handed to the rank at a hand-back (rd/fastpath_out.go)
	fpReqsTaken                    // Read/atomic requests the rank sent itself, outstanding at a take-over (rd/fastpath_req.go)
	fpReqsResolved                 // those whose response or error message the engine took
	runTaken                       // DATA datagrams taken by the receive fast lane (rd/recv_run.go)
	runLost                        // runs llp/rd refused to commit (never: a bug)
	counterCount
)

var counterNames = [counterCount]string{
	retryExceeded: "rd_retry_exceeded", acksOut: "rd_acks_out", accessErrors: "rd_access_errors",
	msgTooLong: "rd_msg_too_long", badMessage: "rd_bad_message", errMsgDropped: "rd_error_msgs_dropped",
	errMsgUnmatched: "rd_error_msgs_unmatched", readBytesOut: "rd_read_bytes_out", dropFraming: "rd_drop_framing",
	dropResponse: "rd_drop_response", backlogged: "rd_backlogged", reorderFull: "rd_reorder_full",
	fpTaken: "rd_fastpath_taken", fpResent: "rd_fastpath_resent", fpGiven: "rd_fastpath_given",
	fpReqsTaken: "rd_fastpath_reqs_taken", fpReqsResolved: "rd_fastpath_reqs_resolved",
	runTaken: "rd_run_datagrams", runLost: "rd_run_lost",
}

// state is the engine's RD state of a QP (engine-owned).
type state struct {
	cfg                *config.RDConfig
	dgramSize, sockBuf int
	ep                 *rd.Endpoint
	curSeq             uint32                    // RD sequence number of the datagram being delivered
	curValid           bool                      // curSeq is set (deliverSeq)
	keys               map[netip.AddrPort]uint32 // peers' Q_Keys (rd/keys.go)
	keyCache           peerKeyCache              // the entry of keys looked at last (rd/keys.go)

	// Send queue: the work requests taken from the SQ and not completed,
	// in posting order; wrs[0] is the SQ ring's head (entries are consumed
	// from the ring when they complete).
	wrs      []*wr
	freeWRs  []*wr    // completed records kept for reuse (newWR)
	freeBufs [][]byte // Read Response read-ahead buffers kept for reuse (send.go readAhead)
	// retiredBufs: read-ahead buffers left while a batch was being built,
	// free again after it went out (send.go reuseReadAhead)
	retiredBufs [][]byte
	nextWR      uint64 // sequence number of the next WR taken
	readsOut    int    // RDMA Reads and atomics in wrs not completed (ORD)
	msn         [ddp.QueueCount]uint32

	// RFC 7306 atomics (rd/atomic.go): the next Request Identifier (from
	// a random start per QP), Atomic Responses being sent (in errs), and
	// the responder's replay cache.
	NextReqID  uint32
	atomicOut  int
	atomicSeen atomicCache
	curImm     uint32 // Immediate Data of the Send being delivered (curHasImm)
	curHasImm  bool

	// Responder: accepted Read Requests being answered, in order.
	resps    []*resp
	nextResp uint64

	// Error messages being sent (reliably).
	errs    []*errMsg
	nextErr uint64

	// Receive side.
	inMsgs   map[netip.AddrPort]*inMsg    // Send being received, per peer
	freeMsgs []*inMsg                     // finished inMsgs records kept for reuse (newInMsg)
	blocked  peerSet                      // scratch of fill, sendable, complete: peers whose later WRs wait
	held     map[heldKey][]byte           // out-of-order DATA (reorder store)
	free     [][]byte                     // recycled reorder-store buffers (holdCopy)
	backlog  map[netip.AddrPort][]heldKey // in-order DATA waiting for a receive
	heldN    int
	// heldBytes: buffer octets of held (this QP's reorder store); store:
	// the device's total (ReorderQPBytes, ReorderBytes).
	heldBytes int
	store     *int
	claimed   int // receives consumed from the ring, not completed

	fp      fpState // the fast path's RD halves (rd/fastpath.go)
	actions []rd.Action
	retx    []pending // retransmissions due
	acks    []pending // standalone ACKs due
	sgBufs  [][]byte
	// runParts: the source octets of the run being built (rd/sendrun.go)
	runParts [][]byte
	scratch  []byte  // RD+DDP+RDMAP headers and trailers of one batch
	buf      []byte  // one received datagram, contiguous
	run      runLane // the receive fast lane (rd/recv_run.go)
	noRun    bool    // tests: every datagram takes the general path

	stats    [counterCount]int64
	crcDrops int64 // datagrams dropped for their CRC (rd/crc_log.go)
}

type heldKey struct {
	peer netip.AddrPort
	seq  uint32
}

// scratchStride is the scratch of one datagram: key header (8), RD
// header (24), DDP header (18), RDMAP header (28), CRC (4), rounded up.
const scratchStride = 88

// maxBatch bounds the datagrams of one RD sendmmsg batch.
const maxBatch = 256

// RdMaxDepth bounds an RD QP's ORD and IRD (RDConfig.Validate's limit).
const RdMaxDepth = 1024

// qpConfig is cfg with the QP's own outstanding Reads and atomics:
// QPCaps.MaxRdAtomic as its ORD and MaxDestRdAtomic as its IRD where set
// (max_rd_atomic, max_dest_rd_atomic; 0: the daemon's -rd-ord / -rd-ird).
func qpConfig(cfg *config.RDConfig, c proto.QPCaps) *config.RDConfig {
	if c.MaxRdAtomic == 0 && c.MaxDestRdAtomic == 0 {
		return cfg
	}
	own := *cfg
	if c.MaxRdAtomic > 0 {
		own.ORD = int(c.MaxRdAtomic)
	}
	if c.MaxDestRdAtomic > 0 {
		own.IRD = int(c.MaxDestRdAtomic)
	}
	return &own
}

// newRDState makes the RD state of a new QP (or of a QP's new life). The
// window is clamped so that a window of datagrams fills at most half the
// socket buffer: more would overflow the receiver's socket and turn into
// loss.
//
// store is the device's reorder-store total (engine.storeBytes), which
// the QP's held datagrams count against (-rd-reorder-bytes).
func newRDState(cfg *config.RDConfig, datagramSize, socketBuffer int, store *int) *state {
	inc := rand.Uint32()
	for inc == 0 {
		inc = rand.Uint32()
	}
	link := cfg.Link
	link.AckedRuns = true // one Acked action per run a cumulative ACK covers (send.go resolveAcked)
	if socketBuffer > 0 && datagramSize > 0 {
		link.Window = max(min(link.Window, socketBuffer/2/datagramSize), 8)
	}
	cryptorand.Read(link.CookieKey[:]) // the cookie secret of this life (llp/rd cookie.go); never fails (Go 1.24+)
	return &state{cfg: cfg, dgramSize: datagramSize, sockBuf: socketBuffer, store: store, ep: rd.NewEndpoint(link, inc), inMsgs: map[netip.AddrPort]*inMsg{},
		keys: map[netip.AddrPort]uint32{},
		held: map[heldKey][]byte{}, backlog: map[netip.AddrPort][]heldKey{},
		scratch: make([]byte, maxBatch*scratchStride), buf: make([]byte, 64<<10)}
}

func (r *state) count(c counter, n int64) { r.stats[c] += n }

// hasWork reports whether an RD QP has something to do now (before
// sleeping): new work requests posted, or data to send with the window open.
func (q *QP) hasWork() bool {
	r := q.Rd
	if w, ok := q.fpHasWork(); ok { // rd/fastpath.go: the rank owns the socket, or asks for it
		return w
	}
	switch q.State {
	case proto.QPStateRTS:
		if n, err := q.SQ.Available(); err != nil || (n > 0 && uint32(len(r.wrs)) < q.SQView().Depth()) {
			return true
		}
		if len(r.backlog) > 0 {
			if n, err := q.RecvRing().Available(); err == nil && n > 0 {
				return true
			}
		}
		return r.sendable()
	case proto.QPStateError:
		if n, _ := q.SQ.Available(); n > 0 {
			return true
		}
		if q.RQ != nil {
			if n, _ := q.RQ.Available(); n > 0 {
				return true
			}
		}
		return r.claimed > 0
	}
	return false
}

// deadline is the earliest timer of q's state machine.
func (q *QP) deadline() (time.Time, bool) {
	if q.Rd == nil {
		return time.Time{}, false
	}
	if !q.DaemonReads() {
		return q.fpDeadline() // rd/fastpath.go: the rank's outstanding datagrams; llp/rd's timers wait
	}
	return q.Rd.ep.NextDeadline()
}

// serviceRD does one pass of work on an RD QP.
func (e *Engine) serviceRD(q *QP, now time.Time) bool {
	work := false
	serve := e.fpBegin(q, now) // rd/fastpath.go: false while the rank owns the socket and the peers
	if q.Readable && serve {
		work = e.receive(q, now)
	}
	if q.State == proto.QPStateError {
		if e.flush(q) {
			work = true
		}
		return e.Flush(q.QP) || work
	}
	if !serve {
		return work
	}
	if e.poll(q, now) {
		work = true
	}
	if e.send(q, now) {
		work = true
	}
	if e.complete(q) {
		work = true
	}
	if e.fpEnd(q, now) { // rd/fastpath.go: the rank asked for the socket
		work = true
	}
	return work
}

// flush completes, with WCWRFlushErr, the receives an ERROR RD QP
// claimed and the work requests taken from the SQ, and forgets the send
// state (the entries still in the SQ ring are flushed by flush).
func (e *Engine) flush(q *QP) bool {
	r := q.Rd
	work := false
	for peer, m := range r.inMsgs {
		delete(r.inMsgs, peer)
		if !m.claimed {
			continue // a message being discarded: its receive completed
		}
		e.count(q, rnic.CFlushed, 1)
		e.PostCQE(q.Session, q.RecvCQ, &proto.CQE{WRID: m.wrid, Status: proto.WCWRFlushErr, Opcode: proto.WCRecv, QPN: q.QPN})
		work = true
	}
	r.claimed = 0
	// The work requests taken from the SQ (consumed from the ring) and not
	// completed: flushed here, in posting order, before the ring's.
	for _, w := range r.wrs {
		if w.completed {
			continue
		}
		e.count(q, rnic.CFlushed, 1)
		e.PostCQE(q.Session, q.SendCQ, &proto.CQE{WRID: w.wrid, Status: proto.WCWRFlushErr, Opcode: wcOpcode(w), QPN: q.QPN})
		work = true
	}
	r.wrs, r.readsOut, r.resps, r.errs = nil, 0, nil, nil
	r.dropHeld()
	return work
}

// reset forgets everything (the move to RESET): a new life with a new
// incarnation, so that peers never confuse it with the old one.
func (q *QP) reset() {
	if q.Rd != nil {
		q.Rd.dropHeld()
		q.Rd = newRDState(q.Rd.cfg, q.Rd.dgramSize, q.Rd.sockBuf, q.Rd.store)
	}
}

// inspect adds q's RD counters to m.
func (q *QP) inspect(m map[string]int64) {
	if q.Rd == nil {
		return
	}
	for i, v := range q.Rd.stats {
		m[counterNames[i]] += v
	}
	st := q.Rd.ep.Stats()
	for k, v := range map[string]uint64{"rd_retransmits": st.Retransmits, "rd_fast_retransmits": st.FastRetransmits,
		"rd_timeouts": st.Timeouts, "rd_probes": st.Probes, "rd_notready": st.NotReadySent, "rd_notready_received": st.NotReadyReceived,
		"rd_dup": st.Duplicates, "rd_held": st.Held, "rd_dropped": st.Dropped, "rd_stale": st.Stale,
		"rd_resets": st.PeerResets, "rd_resets_sent": st.ResetsSent, "rd_resets_received": st.ResetsReceived,
		"rd_peers_created": st.PeersCreated, "rd_peers_reclaimed": st.PeersReclaimed, "rd_reordering": st.Reordering,
		"rd_unproven": st.Unproven, "rd_challenges": st.Challenges, "rd_challenges_received": st.ChallengesReceived,
		"rd_replies_limited": st.RepliesLimited, "rd_handshake_resends": st.HandshakeResends} {
		m[k] += int64(v)
	}
	m["rd_peers"] += int64(q.Rd.ep.Peers())
	m["rd_held_now"] += int64(q.Rd.heldN)
	m["rd_held_bytes"] += int64(q.Rd.heldBytes)
}

// inspect adds the RD counters of every QP, and those of the lingering
// ports (rd/linger.go), to the daemon's.
func (e *Engine) inspect(m map[string]int64) {
	for _, c := range e.QPs {
		if q := QPOf(c); q != nil {
			q.inspect(m)
		}
	}
	e.lingerInspect(m)
}

// closeAcks sends, when q is destroyed (close, rd/linger.go), the
// acknowledgements q owes its peers (llp/rd Endpoint.OwedAcks): delayed
// ACKs not yet due and replies queued but not yet sent. Without them a
// peer whose last message q delivered just before the close retransmits
// it into a closed port until its retry count runs out and completes a
// delivered message with WCRetryExcErr (fi_pingpong's final exchange,
// whose receiver closes as soon as it has the message). Best
// effort: a datagram the kernel refuses now is not retried.
func (e *Engine) closeAcks(q *QP, now time.Time) {
	r := q.Rd
	if r == nil || q.FD < 0 {
		return
	}
	for _, a := range r.ep.OwedAcks(now, r.actions[:0]) {
		r.acks = append(r.acks, pending{a.Peer, a.Token, a.Header})
	}
	for range 64 { // bounded: maxBatch ACKs per batch
		if len(r.acks) == 0 {
			return
		}
		b := &batch{e: e.Engine, q: q}
		e.Sb.Reset(q.Gso)
		k := 0
		for ; k < len(r.acks) && b.add(r.acks[k].peer, &r.acks[k].h, nil, nil, nil); k++ {
			r.count(acksOut, 1)
		}
		r.acks = r.acks[:copy(r.acks, r.acks[k:])]
		msgs := e.Sb.Finish()
		if len(msgs) == 0 {
			return
		}
		q.Blocked = false
		e.transmit(q, msgs)
		if q.Blocked {
			return // the socket's buffer is full: the rest are lost
		}
	}
}
