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

// rdCounter names the RD statistics of a QP (Inspect: rd_*).
type rdCounter int

const (
	rdRetryExceeded   rdCounter = iota // work requests completed with WCRetryExcErr
	rdAcksOut                          // standalone ACK datagrams sent
	rdAccessErrors                     // Read Requests refused (access, bounds, STag)
	rdMsgTooLong                       // Sends longer than the receive they claimed
	rdBadMessage                       // DATA with a bad DDP/RDMAP header, QN or opcode (error message sent)
	rdErrMsgDropped                    // error messages not sent: queue full
	rdErrMsgUnmatched                  // error messages received naming no known work request
	rdReadBytesOut                     // Read Response payload octets sent (responder)
	rdDropFraming                      // datagrams dropped: RD header, truncated
	rdDropResponse                     // Read Response segments matching no outstanding Read
	rdBacklogged                       // in-order DATA kept until a receive is posted
	rdReorderFull                      // out-of-order DATA dropped: the reorder store was full (-rd-reorder-*bytes)
	rdCounterCount
)

var rdCounterNames = [rdCounterCount]string{
	rdRetryExceeded: "rd_retry_exceeded", rdAcksOut: "rd_acks_out", rdAccessErrors: "rd_access_errors",
	rdMsgTooLong: "rd_msg_too_long", rdBadMessage: "rd_bad_message", rdErrMsgDropped: "rd_error_msgs_dropped",
	rdErrMsgUnmatched: "rd_error_msgs_unmatched", rdReadBytesOut: "rd_read_bytes_out", rdDropFraming: "rd_drop_framing",
	rdDropResponse: "rd_drop_response", rdBacklogged: "rd_backlogged", rdReorderFull: "rd_reorder_full",
}

// rdState is the engine's RD state of a QP (engine-owned).
type rdState struct {
	cfg                *config.RDConfig
	dgramSize, sockBuf int
	ep                 *rd.Endpoint
	curSeq             uint32                    // RD sequence number of the datagram being delivered
	curValid           bool                      // curSeq is set (rdDeliverSeq)
	keys               map[netip.AddrPort]uint32 // peers' Q_Keys (rd/keys.go)
	keyCache           peerKeyCache              // the entry of keys looked at last (rd/keys.go)

	// Send queue: the work requests taken from the SQ and not completed,
	// in posting order; wrs[0] is the SQ ring's head (entries are consumed
	// from the ring when they complete).
	wrs      []*rdWR
	freeWRs  []*rdWR // completed records kept for reuse (newWR)
	nextWR   uint64  // sequence number of the next WR taken
	readsOut int     // RDMA Reads and atomics in wrs not completed (ORD)
	msn      [ddp.QueueCount]uint32

	// RFC 7306 atomics (rd/atomic.go): the next Request Identifier (from
	// a random start per QP), Atomic Responses being sent (in errs), and
	// the responder's replay cache.
	NextReqID  uint32
	atomicOut  int
	atomicSeen rdAtomicCache
	curImm     uint32 // Immediate Data of the Send being delivered (curHasImm)
	curHasImm  bool

	// Responder: accepted Read Requests being answered, in order.
	resps    []*rdResp
	nextResp uint64

	// Error messages being sent (reliably).
	errs    []*rdErrMsg
	nextErr uint64

	// Receive side.
	inMsgs   map[netip.AddrPort]*rdInMsg    // Send being received, per peer
	freeMsgs []*rdInMsg                     // finished inMsgs records kept for reuse (newInMsg)
	blocked  peerSet                        // scratch of rdFill, sendable, rdComplete: peers whose later WRs wait
	held     map[rdHeldKey][]byte           // out-of-order DATA (reorder store)
	free     [][]byte                       // recycled reorder-store buffers (holdCopy)
	backlog  map[netip.AddrPort][]rdHeldKey // in-order DATA waiting for a receive
	heldN    int
	// heldBytes: buffer octets of held (this QP's reorder store); store:
	// the device's total (ReorderQPBytes, ReorderBytes).
	heldBytes int
	store     *int
	claimed   int // receives consumed from the ring, not completed

	actions []rd.Action
	retx    []rdPending // retransmissions due
	acks    []rdPending // standalone ACKs due
	sgBufs  [][]byte
	scratch []byte // RD+DDP+RDMAP headers and trailers of one batch
	buf     []byte // one received datagram, contiguous

	stats [rdCounterCount]int64
}

type rdHeldKey struct {
	peer netip.AddrPort
	seq  uint32
}

// rdScratchStride is the scratch of one datagram: key header (8), RD
// header (24), DDP header (18), RDMAP header (28), CRC (4), rounded up.
const rdScratchStride = 88

// rdMaxBatch bounds the datagrams of one RD sendmmsg batch.
const rdMaxBatch = 256

// rdMaxDepth bounds an RD QP's ORD and IRD (RDConfig.Validate's limit).
const RdMaxDepth = 1024

// rdQPConfig is cfg with the QP's own outstanding Reads and atomics:
// QPCaps.MaxRdAtomic as its ORD and MaxDestRdAtomic as its IRD where set
// (max_rd_atomic, max_dest_rd_atomic; 0: the daemon's -rd-ord / -rd-ird).
func rdQPConfig(cfg *config.RDConfig, c proto.QPCaps) *config.RDConfig {
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

// newRDQP makes the RD state of a new QP (or of a QP's new life). The
// window is clamped so that a window of datagrams fills at most half the
// socket buffer: more would overflow the receiver's socket and turn into
// loss.
//
// store is the device's reorder-store total (engine.rdStoreBytes), which
// the QP's held datagrams count against (-rd-reorder-bytes).
func newRDState(cfg *config.RDConfig, datagramSize, socketBuffer int, store *int) *rdState {
	inc := rand.Uint32()
	for inc == 0 {
		inc = rand.Uint32()
	}
	link := cfg.Link
	if socketBuffer > 0 && datagramSize > 0 {
		link.Window = max(min(link.Window, socketBuffer/2/datagramSize), 8)
	}
	cryptorand.Read(link.CookieKey[:]) // the cookie secret of this life (llp/rd cookie.go); never fails (Go 1.24+)
	return &rdState{cfg: cfg, dgramSize: datagramSize, sockBuf: socketBuffer, store: store, ep: rd.NewEndpoint(link, inc), inMsgs: map[netip.AddrPort]*rdInMsg{},
		keys: map[netip.AddrPort]uint32{},
		held: map[rdHeldKey][]byte{}, backlog: map[netip.AddrPort][]rdHeldKey{},
		scratch: make([]byte, rdMaxBatch*rdScratchStride), buf: make([]byte, 64<<10)}
}

func (r *rdState) count(c rdCounter, n int64) { r.stats[c] += n }

// rdHasWork reports whether an RD QP has something to do now (before
// sleeping): new work requests posted, or data to send with the window open.
func (q *QP) rdHasWork() bool {
	r := q.Rd
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

// rdDeadline is the earliest timer of q's state machine.
func (q *QP) rdDeadline() (time.Time, bool) {
	if q.Rd == nil {
		return time.Time{}, false
	}
	return q.Rd.ep.NextDeadline()
}

// serviceRD does one pass of work on an RD QP.
func (e *Engine) serviceRD(q *QP, now time.Time) bool {
	work := false
	if q.Readable {
		work = e.rdReceive(q, now)
	}
	if q.State == proto.QPStateError {
		if e.rdFlush(q) {
			work = true
		}
		return e.Flush(q.QP) || work
	}
	if e.rdPoll(q, now) {
		work = true
	}
	if e.rdSend(q, now) {
		work = true
	}
	if e.rdComplete(q) {
		work = true
	}
	return work
}

// rdFlush completes, with WCWRFlushErr, the receives an ERROR RD QP
// claimed and the work requests taken from the SQ, and forgets the send
// state (the entries still in the SQ ring are flushed by flush).
func (e *Engine) rdFlush(q *QP) bool {
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
		e.PostCQE(q.Session, q.SendCQ, &proto.CQE{WRID: w.wrid, Status: proto.WCWRFlushErr, Opcode: rdWCOpcode(w), QPN: q.QPN})
		work = true
	}
	r.wrs, r.readsOut, r.resps, r.errs = nil, 0, nil, nil
	r.dropHeld()
	return work
}

// rdReset forgets everything (the move to RESET): a new life with a new
// incarnation, so that peers never confuse it with the old one.
func (q *QP) rdReset() {
	if q.Rd != nil {
		q.Rd.dropHeld()
		q.Rd = newRDState(q.Rd.cfg, q.Rd.dgramSize, q.Rd.sockBuf, q.Rd.store)
	}
}

// rdInspect adds q's RD counters to m.
func (q *QP) rdInspect(m map[string]int64) {
	if q.Rd == nil {
		return
	}
	for i, v := range q.Rd.stats {
		m[rdCounterNames[i]] += v
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

// rdInspect adds the RD counters of every QP, and those of the lingering
// ports (rd/linger.go), to the daemon's.
func (e *Engine) rdInspect(m map[string]int64) {
	for _, c := range e.QPs {
		if q := QPOf(c); q != nil {
			q.rdInspect(m)
		}
	}
	e.rdLingerInspect(m)
}

// rdCloseAcks sends, when q is destroyed (rdClose, rd/linger.go), the
// acknowledgements q owes its peers (llp/rd Endpoint.OwedAcks): delayed
// ACKs not yet due and replies queued but not yet sent. Without them a
// peer whose last message q delivered just before the close retransmits
// it into a closed port until its retry count runs out and completes a
// delivered message with WCRetryExcErr (issue 10: fi_pingpong's final
// exchange, whose receiver closes as soon as it has the message). Best
// effort: a datagram the kernel refuses now is not retried.
func (e *Engine) rdCloseAcks(q *QP, now time.Time) {
	r := q.Rd
	if r == nil || q.FD < 0 {
		return
	}
	for _, a := range r.ep.OwedAcks(now, r.actions[:0]) {
		r.acks = append(r.acks, rdPending{a.Peer, a.Token, a.Header})
	}
	for range 64 { // bounded: rdMaxBatch ACKs per batch
		if len(r.acks) == 0 {
			return
		}
		b := &rdBatch{e: e.Engine, q: q}
		e.Sb.Reset(q.Gso)
		k := 0
		for ; k < len(r.acks) && b.add(r.acks[k].peer, &r.acks[k].h, nil, nil, nil); k++ {
			r.count(rdAcksOut, 1)
		}
		r.acks = r.acks[:copy(r.acks, r.acks[k:])]
		msgs := e.Sb.Finish()
		if len(msgs) == 0 {
			return
		}
		q.Blocked = false
		e.rdTransmit(q, msgs)
		if q.Blocked {
			return // the socket's buffer is full: the rest are lost
		}
	}
}
