package rd

import (
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// Receive takes the parsed RD header h of a datagram from peer and returns
// what to do with it. ready says whether the engine could accept this DATA
// now (a receive is posted, placement is possible; for an out-of-order
// datagram: whether it can store it and deliver it when its turn comes).
// Acknowledgements, RESETs and in-order held datagrams it causes are queued
// for the next Poll.
func (e *Endpoint) Receive(now time.Time, peer netip.AddrPort, h dgram.RDHeader, ready bool) Verdict {
	t := e.stamp(now)
	if h.Version != dgram.RDVersion || h.Incarnation == 0 {
		e.stats.Dropped++
		return Dropped
	}
	if p := e.peerAt(peer); p != nil && h.Flags&dgram.FlagReset == 0 {
		p.extSACK = h.Flags&dgram.FlagExtSACK != 0
	}
	switch h.Type {
	case dgram.RDData:
		return e.receiveData(t, peer, &h, ready)
	case dgram.RDAck:
		return e.receiveAck(t, peer, &h)
	}
	e.stats.Dropped++
	return Dropped
}

// receiveAck handles an ACK datagram (acknowledgement, NOTREADY, RESET).
func (e *Endpoint) receiveAck(t int64, addr netip.AddrPort, h *dgram.RDHeader) Verdict {
	p := e.lookup(t, addr, false)
	if h.EchoedIncarnation != e.ours(p) {
		e.stats.Stale++
		return Stale // for a space of ours that ended (or carries nothing we can check)
	}
	if p == nil {
		return AckOnly // we keep no state for it: nothing to acknowledge or reset
	}
	if p.prev != 0 && h.Incarnation == p.prev {
		e.stats.Stale++
		return Stale // from the peer's previous incarnation
	}
	if h.Flags&dgram.FlagChallenge != 0 {
		if h.Flags&(dgram.FlagAck|dgram.FlagReset) != 0 {
			e.stats.Dropped++
			return Dropped
		}
		e.takeChallenge(p, h)
		return AckOnly
	}
	if h.Flags&dgram.FlagReset != 0 {
		// The peer has no receive state for our current space.
		victim := h.CumAck
		if victim == 0 {
			victim = h.Incarnation
		}
		if p.inc != 0 && p.inc != victim {
			e.stats.Stale++
			return Stale // answers DATA we sent to its previous life: handled already
		}
		e.stats.ResetsReceived++
		e.endSend(p, PeerReset)
		e.learn(p, h.Incarnation)
		return AckOnly
	}
	e.learn(p, h.Incarnation)
	if h.Flags&dgram.FlagAck != 0 {
		// It acknowledges our DATA: it receives at this address.
		p.proven, p.cookieDue = true, false
		e.ackFrom(t, p, h)
	}
	return AckOnly
}

// ackFrom applies the ack fields of h, whose Echoed Incarnation names our
// current space. After the peer's incarnation changed (a new life, or a
// renewal of its own space) the first acknowledgement from the new one is
// taken only if it is consistent with our space — it acknowledges what it
// received of it: no less than the old incarnation acknowledged, nothing
// never sent. Otherwise the new incarnation holds receive state of another
// space of ours (or of a part of this one) and our space ends.
func (e *Endpoint) ackFrom(t int64, p *peer, h *dgram.RDHeader) {
	if p.checkAck {
		if dgram.SeqLess(h.CumAck, p.sndUna) || dgram.SeqLess(p.nextSeq, h.CumAck) {
			e.stats.BadAcks++
			e.abandon(p, PeerReset)
			return
		}
		p.checkAck = false
	}
	e.processAck(t, p, h)
}

// receiveData handles a DATA datagram.
func (e *Endpoint) receiveData(t int64, addr netip.AddrPort, h *dgram.RDHeader, ready bool) Verdict {
	p0 := e.peerAt(addr)
	if h.EchoedIncarnation != 0 && !e.isOurs(p0, h.EchoedIncarnation) {
		e.stats.Stale++
		e.queueReset(addr, e.ours(p0), h.Incarnation, h.EchoedIncarnation) // meant for our previous life (limited when unproven)
		return Stale
	}
	if p0 != nil && p0.prev != 0 && h.Incarnation == p0.prev {
		e.stats.Stale++
		return Stale // late DATA of the peer's previous space: drop, no RESET
	}
	if !e.proven(p0, addr, h) {
		e.challenge(t, addr, p0, h) // no state, nothing buffered (cookie.go)
		return Unproven
	}
	p := e.lookup(t, addr, true)
	if p == nil {
		e.stats.Dropped++
		return Dropped
	}
	p.proven = true
	p.extSACK = h.Flags&dgram.FlagExtSACK != 0
	e.learn(p, h.Incarnation) // a new incarnation: its old space towards us is gone
	if p.rcvNext == 0 {
		if h.EchoedIncarnation != 0 && h.Seq != 1 {
			// The sender has a space towards us that we do not know (we
			// restarted, or dropped it): it must start a new one.
			e.queueReset(addr, e.ours(p), h.Incarnation, 0)
			e.stats.Stale++
			return Stale
		}
		p.rcvNext = 1
	} else if h.Seq == 1 && p.rcvNext != 1 && p.heldN == 0 && t-p.lastRecv >= int64(e.cfg.IdleTimeout)/2 {
		// The sender reset its idle send half and started a new space.
		p.resetReceive()
		p.rcvNext = 1
		e.stats.NewSpaces++
	}
	p.lastRecv = t
	v := e.place(t, p, h, ready)
	if h.Flags&dgram.FlagAck != 0 && h.EchoedIncarnation == e.ours(p) {
		p.cookieDue = false // it acknowledges: it holds state for us again
		e.ackFrom(t, p, h)
	}
	return v
}

// place decides about DATA h in p's receive space and schedules the ACK.
func (e *Endpoint) place(t int64, p *peer, h *dgram.RDHeader, ready bool) Verdict {
	seq := h.Seq
	if dgram.SeqLess(seq, p.rcvNext) || p.isHeld(seq) {
		e.stats.Duplicates++
		e.scheduleAck(t, p, true)
		return Duplicate
	}
	d := seq - p.rcvNext
	if p.dropping && (d != 0 || p.draining) {
		// The engine has yet to discard the held datagrams of the old
		// space; anything it stored now would go with them. The sender
		// retransmits.
		e.stats.Dropped++
		return Dropped
	}
	if d >= uint32(e.advWnd) || int(d) > e.cfg.ReorderLimit {
		e.stats.Dropped++
		e.scheduleAck(t, p, true)
		return Dropped
	}
	if !ready {
		if d == 0 {
			p.nrDue = true
			e.scheduleAck(t, p, true)
		}
		return NotReady
	}
	if d > 0 {
		p.setHeld(seq, true, e.heldBits())
		p.heldN++
		if d > 32 {
			p.heldNew++ // beyond the main SACK bitmap: report in SACK Blocks
		}
		if p.heldNew >= blockEvery || (p.heldNew > 0 && h.Flags&dgram.FlagAckReq != 0) {
			p.blocksDue = true
		}
		e.stats.Held++
		e.scheduleAck(t, p, true)
		return Hold
	}
	v := Deliver
	if p.draining {
		// Held datagrams before this one are queued for delivery but the
		// engine has not taken them yet: this one must follow them.
		v = Hold
		e.stats.Held++
		e.pushDeliverHeld(p, seq)
	}
	p.rcvNext++
	e.stats.Delivered++
	filled := p.heldN > 0 // it fills (part of) a gap: acknowledge at once (RFC 5681 §4.2)
	for p.heldN > 0 && p.isHeld(p.rcvNext) {
		p.setHeld(p.rcvNext, false, 0)
		p.heldN--
		e.stats.Delivered++
		e.pushDeliverHeld(p, p.rcvNext)
		p.rcvNext++
	}
	p.unacked++
	if h.Flags&dgram.FlagAckReq != 0 && p.heldN > 0 {
		p.blocksDue = true
	}
	e.scheduleAck(t, p, h.Flags&dgram.FlagAckReq != 0 || p.unacked >= 2 || p.heldN > 0 || filled)
	return v
}

func (e *Endpoint) pushDeliverHeld(p *peer, seq uint32) {
	p.draining = true
	e.push(Action{Kind: DeliverHeld, Peer: p.addr, Token: Token(seq),
		Header: dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Incarnation: p.inc, Seq: seq}})
}

// blockEvery is how many datagrams held beyond CumAck+32 make SACK Blocks
// due (takeAcks).
const blockEvery = 16

// heldBits is the size of the reorder bitmap: a power of two above
// ReorderLimit, at least 64.
func (e *Endpoint) heldBits() int {
	n := 64
	for n <= e.cfg.ReorderLimit {
		n *= 2
	}
	return n
}

// scheduleAck arms p's ACK: now, or after AckDelay.
func (e *Endpoint) scheduleAck(t int64, p *peer, now bool) {
	at := t + int64(e.cfg.AckDelay)
	if now {
		at = t
	}
	if !p.ackDue || at < p.ackAt {
		p.ackAt = at
	}
	p.ackDue = true
	e.armed(p, p.ackAt)
}

// OwedAcks appends the acknowledgements the endpoint owes at now, for an
// engine about to close the QP's socket: the replies already queued (ACKs,
// NOTREADYs, RESETs, Challenges) and, for every peer whose acknowledgement
// is pending — delayed by AckDelay, or not yet due — its standalone ACK
// (with SACK Blocks when due), as takeAcks sends it when the timer fires.
// Without them a peer whose last DATA was delivered just before the close
// retransmits it into a closed port until its retry count runs out and
// completes a delivered message with retry exceeded. Other queued actions
// (Acked, DeliverHeld, ...) are dropped: the QP is going away. The
// endpoint must not be used afterwards.
func (e *Endpoint) OwedAcks(now time.Time, out []Action) []Action {
	e.stamp(now)
	for _, a := range e.pending {
		if a.Kind == SendAck {
			out = append(out, a)
		}
	}
	clear(e.pending)
	e.pending = e.pending[:0]
	for _, p := range e.peers {
		if p.ackDue {
			out = e.takeAcks(p, out)
		}
	}
	return out
}

// InOrder reports whether DATA seq from peer would be delivered now rather
// than held (the engine asks before it decides whether it has room to hold
// it): peer has a receive space expecting seq, or none and seq is 1.
func (e *Endpoint) InOrder(peer netip.AddrPort, seq uint32) bool {
	p := e.peerAt(peer)
	if p == nil || p.rcvNext == 0 {
		return seq == 1
	}
	return seq == p.rcvNext
}
