package rd

import (
	"fmt"
	"math/bits"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// CanSend reports whether the window towards peer is open: fewer than
// Window datagrams are unacknowledged and the next sequence number is
// inside the window the peer advertised (one probe datagram is allowed
// when the peer advertised 0 and nothing is outstanding).
func (e *Endpoint) CanSend(peer netip.AddrPort) bool {
	p := e.peers[peer]
	if p == nil {
		return len(e.peers) < e.cfg.MaxPeers
	}
	return e.canSend(p)
}

func (e *Endpoint) canSend(p *peer) bool {
	if p.out.n >= e.cfg.Window {
		return false
	}
	if p.out.n > 0 && p.out.at(0).flags&segNotReady != 0 {
		return false // the receiver is not ready: wait for the back-off
	}
	return dgram.SeqLess(p.nextSeq, p.limit) || p.out.n == 0
}

// Send assigns the next sequence number towards peer to the DATA datagram
// named tok, arms its retransmission timer and returns its RD header, with
// the acknowledgement of peer's DATA piggybacked when possible (which
// cancels the pending delayed ACK). It fails with ErrWindowClosed when
// CanSend is false and ErrTooManyPeers when peer would be a new peer beyond
// MaxPeers.
func (e *Endpoint) Send(now time.Time, peer netip.AddrPort, tok Token) (dgram.RDHeader, error) {
	t := e.stamp(now)
	p := e.lookup(t, peer, true)
	if p == nil {
		return dgram.RDHeader{}, fmt.Errorf("rd: send to %v: %w", peer, ErrTooManyPeers)
	}
	if !e.canSend(p) {
		return dgram.RDHeader{}, fmt.Errorf("rd: send to %v: %w", peer, ErrWindowClosed)
	}
	seq := p.nextSeq
	p.nextSeq++
	s := outSeg{tok: tok, sentAt: t, deadline: t + e.rto(p)}
	p.out.pushBack(s)
	p.lastSend = t
	e.stats.Sent++
	h := e.dataHeader(p, seq)
	if !e.canSend(p) {
		h.Flags |= dgram.FlagAckReq // the window is now full: ask for an ACK at once
	}
	e.armed(p, s.deadline)
	return h, nil
}

// dataHeader builds the header of DATA seq to p, piggybacking p's ack
// state when p can check it (our space was acknowledged, so the Echoed
// Incarnation is valid) and no NOTREADY is pending.
func (e *Endpoint) dataHeader(p *peer, seq uint32) dgram.RDHeader {
	h := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Incarnation: e.ours(p), Seq: seq}
	if !p.spaceAcked {
		return h // Echoed 0: the receiver cannot validate piggybacked acks
	}
	h = e.ackHeader(p, dgram.RDData)
	h.Seq = seq
	if h.Flags&dgram.FlagAck != 0 && !p.nrDue {
		p.ackDue = false
		p.unacked = 0
	}
	return h
}

func (e *Endpoint) armed(p *peer, deadline int64) {
	if !p.active || deadline < p.next {
		p.next = deadline
	}
	e.activate(p)
}

// rearm recomputes p's earliest timer after deadlines moved later.
func (e *Endpoint) rearm(p *peer) {
	p.next = e.timerDeadline(p)
	e.activate(p)
}

// timerDeadline returns p's earliest timer: the delayed ACK, the
// retransmission timer — which only the oldest datagram neither
// acknowledged nor SACKed has (RFC 6298 §5: one timer, restarted when an
// ACK acknowledges new data) — and the individual timers of datagrams
// waiting out a NOTREADY back-off or to be resent to a peer's new life.
func (e *Endpoint) timerDeadline(p *peer) int64 {
	next := int64(1<<63 - 1)
	if p.ackDue {
		next = p.ackAt
	}
	oldest := true
	for off := 0; off < p.out.n; off++ {
		s := p.out.at(off)
		switch {
		case s.flags&segSacked != 0:
		case s.flags&(segNotReady|segResend) != 0:
			next = min(next, s.deadline)
		case oldest:
			oldest = false
			next = min(next, s.deadline)
		}
	}
	return next
}

// processAck applies the ack fields of h (FlagAck set, Echoed Incarnation
// checked) to p's send half.
func (e *Endpoint) processAck(t int64, p *peer, h *dgram.RDHeader) {
	cum := h.CumAck
	if dgram.SeqLess(p.nextSeq, cum) {
		// Acknowledges numbers never sent in this space: the peer kept the
		// receive state of an earlier space of ours. Start both over.
		e.stats.BadAcks++
		e.abandon(p, PeerReset)
		return
	}
	if dgram.SeqLess(cum, p.sndUna) {
		return // older than what we know: reordered ACK
	}
	p.spaceAcked = true
	var sampleAt int64 = -1
	advanced, repaired := false, false
	// The highest sequence number the previous ACKs could SACK: a
	// datagram beyond it SACKed now may have arrived long ago.
	horizon := p.ackCum + 32
	for dgram.SeqLess(p.sndUna, cum) && p.out.n > 0 {
		s := p.out.popFront()
		p.sndUna++
		advanced = true
		if s.flags&segRetx != 0 {
			repaired = true
		}
		if s.flags&(segRetx|segSacked) == 0 {
			sampleAt = max(sampleAt, s.sentAt)
		}
		e.stats.Acked++
		e.push(Action{Kind: Acked, Peer: p.addr, Token: s.tok})
		if p.hold && s.tok == p.holdTok {
			e.releaseHold(p) // the peer has the error message: ack the refused DATA now
		}
	}
	if repaired {
		// A retransmission filled a hole: the datagrams after it waited
		// for the repair at the receiver, their ACK times measure the
		// repair, not the path (Karn's rule extended to them).
		sampleAt = -1
	}
	if advanced {
		p.nrBackoff = 0
		defer e.restartTimer(t, p) // after the RTT sample below
	}
	if dgram.SeqLessEq(p.ackCum, cum) {
		p.ackCum = cum
		p.limit = cum + uint32(h.Window)
	}
	if h.SACK != 0 {
		for i := uint32(0); i < 32; i++ {
			if h.SACK&(1<<i) == 0 {
				continue
			}
			off := int(cum + 1 + i - p.sndUna)
			if off >= p.out.n {
				break
			}
			s := p.out.at(off)
			if s.flags&segSacked == 0 {
				s.flags |= segSacked
				if s.flags&segRetx == 0 && dgram.SeqLessEq(cum+1+i, horizon) {
					sampleAt = max(sampleAt, s.sentAt)
				}
			}
		}
	}
	if sampleAt >= 0 {
		p.rttSample(t - sampleAt)
	}
	if h.Flags&dgram.FlagNotReady != 0 && cum == p.sndUna && p.out.n > 0 {
		// The receiver dropped cum and, not ready, everything after it that
		// it has not SACKed: all of it waits for the not-ready back-off and
		// is then resent without counting against MaxRetries.
		e.stats.NotReadyReceived++
		if p.nrBackoff == 0 {
			p.nrBackoff = int64(e.cfg.NotReadyBackoff)
		}
		deadline := t + p.nrBackoff
		p.nrBackoff = min(2*p.nrBackoff, int64(e.cfg.MaxRTO))
		for off := 0; off < p.out.n; off++ {
			s := p.out.at(off)
			if s.flags&segSacked == 0 {
				s.flags |= segNotReady
				s.flags &^= segFastRetx
				s.deadline = deadline
			}
		}
		e.rearm(p)
	}
	if h.SACK != 0 {
		e.fastRetransmit(t, p, cum, h.SACK)
	}
}

// fastRetransmit resends each unacknowledged datagram that the SACK
// shows three later datagrams received after, once it has been
// outstanding for longer than reordering explains: SRTT plus a reordering
// window of max(SRTT/4, 4·RTTVAR) since its latest transmission (a time
// based rule in the spirit of RACK, RFC 8985). A reordered datagram
// arrives meanwhile; a lost retransmission is resent again one such
// interval later, without waiting for the timeout. Duplicate ACKs
// (nothing new SACKed) resend nothing the interval has not expired for.
func (e *Endpoint) fastRetransmit(t int64, p *peer, cum, sack uint32) {
	wait := p.srtt + max(p.srtt/4, 4*p.rttvar)
	for off := 0; off < p.out.n; off++ {
		seq := p.sndUna + uint32(off)
		i := seq - cum // 0 for cum itself; bit i-1 covers seq
		if i > 32 {
			break
		}
		later := sack
		if i > 0 {
			later = sack >> i
		}
		if bits.OnesCount32(later) < 3 {
			break
		}
		s := p.out.at(off)
		if s.flags&(segSacked|segNotReady) != 0 || int(s.retries) >= e.cfg.MaxRetries || t-s.sentAt < wait {
			continue
		}
		s.flags |= segFastRetx
		e.stats.FastRetransmits++
		e.retransmit(t, p, off, true)
	}
}

// restartTimer restarts the retransmission timer after an ACK
// acknowledged new data (RFC 6298 §5.3): the oldest outstanding datagram
// times out one (backed-off) RTO from now at the earliest.
func (e *Endpoint) restartTimer(t int64, p *peer) {
	for off := 0; off < p.out.n; off++ {
		s := p.out.at(off)
		if s.flags&(segSacked|segNotReady|segResend) != 0 {
			continue
		}
		s.deadline = max(s.deadline, t+e.backedOff(p, s.retries))
		break
	}
	e.rearm(p)
}

// retransmit queues the datagram at offset off for resending; counted
// retransmissions back its timer off.
func (e *Endpoint) retransmit(t int64, p *peer, off int, counted bool) {
	s := p.out.at(off)
	if counted {
		s.retries++
	}
	s.flags |= segRetx
	s.flags &^= segResend
	s.sentAt = t
	s.deadline = t + e.backedOff(p, s.retries)
	h := e.dataHeader(p, p.sndUna+uint32(off))
	h.Flags |= dgram.FlagAckReq
	e.stats.Retransmits++
	p.lastSend = t
	e.push(Action{Kind: Retransmit, Peer: p.addr, Token: s.tok, Header: h})
	e.armed(p, s.deadline)
}

// runTimers handles p's expired timers at t and appends the actions.
// Only the oldest outstanding datagram has a retransmission timer: the
// ones after it are resent when a SACK shows them missing
// (fastRetransmit) or when they become the oldest, never in a burst
// because one timer expired (no go-back-N).
func (e *Endpoint) runTimers(t int64, p *peer, out []Action) []Action {
	if p.ackDue && p.ackAt <= t {
		out = append(out, e.takeAck(p))
	}
	oldest := true
	for off := 0; off < p.out.n; off++ {
		s := p.out.at(off)
		if s.flags&segSacked != 0 {
			continue
		}
		own := s.flags&(segNotReady|segResend) != 0
		if !own && !oldest {
			continue
		}
		if !own {
			oldest = false
		}
		if s.deadline > t {
			continue
		}
		switch {
		case s.flags&segNotReady != 0:
			s.flags &^= segNotReady
			e.retransmit(t, p, off, false)
		case int(s.retries) >= e.cfg.MaxRetries:
			e.abandon(p, Failed)
			out = e.flush(out)
			p.next = e.timerDeadline(p)
			return out
		default:
			if s.flags&segResend == 0 {
				e.stats.Timeouts++
			}
			e.retransmit(t, p, off, true)
		}
	}
	out = e.flush(out)
	p.next = e.timerDeadline(p)
	return out
}

// takeAck builds p's standalone ACK and clears the pending-ack state.
func (e *Endpoint) takeAck(p *peer) Action {
	h := e.ackHeader(p, dgram.RDAck)
	if p.nrDue {
		h.Flags |= dgram.FlagNotReady
		e.stats.NotReadySent++
	}
	p.ackDue, p.nrDue = false, false
	p.unacked = 0
	e.stats.AcksSent++
	return Action{Kind: SendAck, Peer: p.addr, Header: h}
}
