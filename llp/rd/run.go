package rd

import (
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// Run is the reliability half of the engine's receive fast lane
// (docs/rd.md "Receive fast lane"): DATA datagrams from one proven peer
// that follow, in sequence, one Receive has just delivered, and whose RD
// headers equal that one's but for Seq and FlagAckReq. Receive would
// deliver each of them in turn (in order, nothing held, the same
// incarnations, the same acknowledgement fields — already applied), so
// the run only counts them (Take) and applies them at once (Commit): the
// receive space advances once, and the acknowledgement is scheduled once.
//
// The engine compares the headers itself (octet for octet, before it
// takes a datagram) and must Commit before it calls the endpoint for
// anything else (Receive, Poll, HoldAcks, Send, ...): between OpenRun and
// Commit the endpoint's state of the peer lags the datagrams taken.
type Run struct {
	e      *Endpoint
	p      *peer
	next   uint32 // sequence number the next datagram of the run carries
	n      uint32 // datagrams taken since the last Commit
	ackReq bool   // one of them asked for an acknowledgement (FlagAckReq)
}

// maxRun bounds the datagrams a run takes between two Commits (the
// receive half's counters are 16 bits).
const maxRun = 1 << 14

// runFlags are the flags a run's header may carry: those of an ordinary
// DATA datagram. NOTREADY, RESET, SACK Block and Challenge (which DATA
// does not carry from iwarpd) go through Receive, each datagram alone.
const runFlags = dgram.FlagAck | dgram.FlagAckReq | dgram.FlagExtSACK | dgram.FlagsReserved

// OpenRun starts run after h, a DATA header from peer for which Receive
// has just returned Deliver (nothing else called in between), and reports
// whether it may: the peer is proven under h's incarnation, nothing of it
// is held, queued for delivery or being discarded, and h's
// acknowledgement, if it carries one for our current space, would change
// nothing if applied again (no SACK bits, no check of a new incarnation
// pending). On false run is cleared.
func (e *Endpoint) OpenRun(peer netip.AddrPort, h *dgram.RDHeader, run *Run) bool {
	*run = Run{}
	p := e.peerAt(peer)
	if p == nil || !p.proven || h.Version != dgram.RDVersion || h.Type != dgram.RDData || h.Incarnation == 0 ||
		h.Incarnation != p.inc || h.Flags&^runFlags != 0 || p.rcvNext != h.Seq+1 || p.rcvNext == 1 ||
		p.heldN != 0 || p.draining || p.dropping {
		return false
	}
	if h.EchoedIncarnation != 0 && !e.isOurs(p, h.EchoedIncarnation) {
		return false
	}
	if h.Flags&dgram.FlagAck != 0 && h.EchoedIncarnation == e.ours(p) &&
		(p.checkAck || h.SACK != 0 || dgram.SeqLess(p.nextSeq, h.CumAck)) {
		return false
	}
	*run = Run{e: e, p: p, next: p.rcvNext}
	return true
}

// Take takes the DATA datagram seq (its header, but for Seq and ackReq —
// its FlagAckReq —, equal to the run's opener) when it is the next of
// the run, and reports whether it did. A datagram not taken goes to
// Receive, after Commit.
func (r *Run) Take(seq uint32, ackReq bool) bool {
	if r.p == nil || seq != r.next || r.n >= maxRun {
		return false
	}
	r.next++
	r.n++
	r.ackReq = r.ackReq || ackReq
	return true
}

// Pending returns the datagrams taken and not yet committed.
func (r *Run) Pending() int { return int(r.n) }

// Commit applies the datagrams taken since the last Commit at now, as
// Receive applies each (Deliver): the receive space advances past them,
// they count as delivered and unacknowledged, and the acknowledgement is
// scheduled (now: two or more are unacknowledged). It reports false, and
// applies nothing, if the peer's state moved since OpenRun (the engine
// called the endpoint before it committed: a bug); the run then takes
// nothing more.
func (r *Run) Commit(now time.Time) bool {
	if r.n == 0 {
		return true
	}
	e, p := r.e, r.p
	if e.peerAt(p.addr) != p || p.rcvNext+r.n != r.next || p.heldN != 0 || p.draining || p.dropping {
		*r = Run{}
		return false
	}
	t := e.stamp(now)
	p.lastRecv = t
	p.rcvNext = r.next
	p.unacked = uint16(min(int(p.unacked)+int(r.n), 0xffff))
	e.stats.Delivered += uint64(r.n)
	e.scheduleAck(t, p, r.ackReq || p.unacked >= 2)
	r.n, r.ackReq = 0, false
	return true
}
