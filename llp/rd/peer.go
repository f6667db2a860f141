package rd

import (
	"net/netip"
	"unsafe"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// outSeg is one unacknowledged DATA datagram (32 bytes).
type outSeg struct {
	tok      Token
	sentAt   int64 // latest transmission (the first one until segRetx: RTT samples)
	deadline int64
	retries  uint16 // retransmissions (MaxRetries)
	flags    uint8
	timeouts uint8 // retransmission timeouts: the backoff exponent
}

const (
	segSacked    = 1 << iota // the receiver holds it (no retransmission; not yet Acked)
	segRetx                  // retransmitted at least once (Karn: no RTT sample)
	segFastRetx              // fast-retransmitted at least once (statistics only)
	segNotReady              // receiver was not ready: retry at deadline, not counted
	segResend                // resend at deadline although not the oldest (peer's new life)
	segHandshake             // with segResend: the peer challenged us (cookie.go); not a retransmission
)

// ring is a growable FIFO of outSeg indexed from the oldest; the buffer is
// allocated on first use and released when the peer's send half resets.
type ring struct {
	buf  []outSeg // len is a power of two
	head int
	n    int
}

func (r *ring) at(i int) *outSeg { return &r.buf[(r.head+i)&(len(r.buf)-1)] }

func (r *ring) pushBack(s outSeg) {
	if r.n == len(r.buf) {
		nb := make([]outSeg, max(4, 2*len(r.buf)))
		for i := 0; i < r.n; i++ {
			nb[i] = *r.at(i)
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = s
	r.n++
}

func (r *ring) popFront() outSeg {
	s := *r.at(0)
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return s
}

// peer is the state of one (this QP, peer QP address) pair: the send half
// (our sequence space towards it) and the receive half (its space towards
// us).
type peer struct {
	addr netip.AddrPort
	inc  uint32 // the peer's incarnation, 0 = not known
	prev uint32 // the incarnation it had before its last restart: stale
	mine uint32 // our incarnation towards it when not the endpoint's (after a send space ended), else 0
	// mineOld is the incarnation of ours mine replaced: DATA echoing it is
	// still for this life (the peer had not heard of mine yet).
	mineOld uint32

	// send half
	nextSeq    uint32 // next sequence number to assign (a space starts at 1)
	sndUna     uint32 // oldest unacknowledged; out.at(0) has it
	ackCum     uint32 // newest CumAck received
	limit      uint32 // first sequence number beyond the peer's window
	sackHigh   uint32 // highest sequence number SACKed in this space (0 = none)
	sackTo     uint32 // SACK bitmaps of the latest CumAck cover up to here (exclusive)
	nSacked    uint16 // datagrams in out with segSacked
	spaceAcked bool   // the peer acknowledged this space: echo its incarnation
	checkAck   bool   // the peer's incarnation changed: check its first ack against our space
	active     bool   // in Endpoint.active
	reoPersist uint8  // > 0: the path was seen reordering, holes wait a reordering window; counts down per repaired hole
	extSACK    bool   // the peer sets dgram.FlagExtSACK: it takes SACK Block ACKs
	nrBackoff  uint8  // NOTREADY back-offs in a row: the next waits Config.NotReadyBackoff·2^nrBackoff
	// probes counts the tail probes (probe) sent since the peer last
	// acknowledged or SACKed something new; progressed: it has in this
	// space (the path delivers).
	probes     uint8
	progressed bool
	// proven: the address proved it receives there (its DATA carried our
	// cookie, or it acknowledged our DATA): DATA from its incarnation is
	// taken without a cookie (cookie.go).
	proven bool
	// cookieDue: the peer challenged us and has not acknowledged since:
	// DATA carries cookie (the peer's cookie for us, from its Challenge),
	// no piggybacked ack.
	cookieDue bool
	out       ring
	srtt      int64 // ns, 0 = no sample yet
	rttvar    int64
	minRTT    int64 // smallest RTT sample, ns (0 = none)
	reoAt     int64 // reorder timer: recheck the holes then (0 = off)
	lastSend  int64
	// rtoAt is the latest retransmission timeout. An ACK covering only
	// datagrams sent before it most likely answers the retransmission
	// (a timeout means the ACKs of the first transmissions were lost): its
	// RTT sample is taken from the timeout, not from their transmission
	// (Karn's problem, RFC 6298 §3). Measured from their transmission the
	// sample contained the timeout itself: at 20 % loss SRTT grew to 35 ms
	// on a 200 µs path, and every later timeout waited MaxRTO.
	rtoAt int64
	next  int64 // earliest timer of this peer

	// receive half
	rcvNext   uint32   // next expected = CumAck sent; 0 = no receive space
	cookie    uint32   // (send half) the peer's cookie for us; see cookieDue
	held      []uint64 // reorder bitmap indexed by seq mod bits; nil until needed
	heldN     uint16
	unacked   uint16 // datagrams received since the last ACK went out
	heldNew   uint16 // datagrams held beyond CumAck+32 since the last SACK Blocks
	ackDue    bool
	draining  bool // DeliverHeld actions queued, not yet taken by Poll
	dropping  bool // DiscardHeld queued, not yet taken by Poll: hold nothing
	nrDue     bool // the pending ACK carries NOTREADY
	hold      bool // acks must not cover holdSeq until holdTok is acked (HoldAcks)
	blocksDue bool // the next ACK carries SACK Blocks
	holdSeq   uint32
	holdTok   Token
	ackAt     int64
	lastRecv  int64
}

// PeerStateBytes is the size of the fixed per-peer struct; a live peer
// costs this plus its map entry, plus 32 bytes per outstanding datagram
// while sending and ReorderLimit/8 bytes while holding.
const PeerStateBytes = int(unsafe.Sizeof(peer{}))

// busy reports whether p has a timer running.
func (p *peer) busy() bool { return p.out.n > 0 || p.ackDue }

// resetSend starts a new send space at 1; window is the initial window
// assumed until the peer advertises its own.
func (p *peer) resetSend(window int) {
	p.out = ring{}
	p.nextSeq, p.sndUna, p.ackCum = 1, 1, 1
	p.limit = 1 + uint32(window)
	p.spaceAcked, p.checkAck = false, false
	p.nrBackoff = 0
	p.reoAt, p.sackHigh, p.nSacked = 0, 0, 0
	p.probes, p.progressed = 0, false
}

func (p *peer) resetReceive() {
	p.rcvNext = 0
	p.held = nil
	p.heldN = 0
	p.unacked = 0
	p.ackDue, p.nrDue = false, false
	p.hold, p.blocksDue, p.heldNew = false, false, 0
}

func (p *peer) isHeld(seq uint32) bool {
	if p.held == nil {
		return false
	}
	i := seq & uint32(len(p.held)*64-1)
	return p.held[i/64]&(1<<(i%64)) != 0
}

func (p *peer) setHeld(seq uint32, on bool, bits int) {
	if p.held == nil {
		p.held = make([]uint64, bits/64)
	}
	i := seq & uint32(len(p.held)*64-1)
	if on {
		p.held[i/64] |= 1 << (i % 64)
	} else {
		p.held[i/64] &^= 1 << (i % 64)
	}
}

// cumAck returns the Cumulative Ack to advertise: rcvNext, or the held
// back sequence number while HoldAcks is in force.
func (p *peer) cumAck() uint32 {
	if p.hold && dgram.SeqLess(p.holdSeq, p.rcvNext) {
		return p.holdSeq
	}
	return p.rcvNext
}

// sackBits returns the SACK bitmap for cum+1 … cum+32 (cum = cumAck()):
// held datagrams, and while acks are held back the delivered ones after
// the held-back number (a SACK stops retransmission, it does not ack).
func (p *peer) sackBits() uint32 {
	cum := p.cumAck()
	if p.heldN == 0 && cum == p.rcvNext {
		return 0
	}
	return p.sackBitsFrom(cum + 1)
}

// heldFrom reports whether a datagram from base on (within the reorder
// bitmap's reach) is held.
func (p *peer) heldFrom(base uint32) bool {
	if p.held == nil || p.heldN == 0 {
		return false
	}
	for x := base; dgram.SeqLess(x, p.rcvNext+uint32(len(p.held)*64)); x++ {
		if p.isHeld(x) {
			return true
		}
	}
	return false
}

// sackBitsFrom returns the SACK bitmap of base … base+31.
func (p *peer) sackBitsFrom(base uint32) uint32 {
	var s uint32
	for i := uint32(0); i < 32; i++ {
		if x := base + i; dgram.SeqLess(x, p.rcvNext) || p.isHeld(x) {
			s |= 1 << i
		}
	}
	return s
}
