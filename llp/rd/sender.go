package rd

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// CanSend reports whether the window towards peer is open: fewer than
// Window datagrams are unacknowledged and the next sequence number is
// inside the window the peer advertised (one probe datagram is allowed
// when the peer advertised 0 and nothing is outstanding).
func (e *Endpoint) CanSend(peer netip.AddrPort) bool {
	p := e.peerAt(peer)
	if p == nil {
		return len(e.peers) < e.cfg.MaxPeers
	}
	return e.canSend(p)
}

func (e *Endpoint) canSend(p *peer) bool {
	if p.out.n-int(p.nSacked) >= e.cfg.Window {
		return false // Window datagrams in flight (RFC 6675's pipe: SACKed ones left it)
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
	h := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Flags: dgram.FlagExtSACK, Incarnation: e.ours(p), Seq: seq}
	if !p.spaceAcked {
		h.CumAck = p.cookie // without FlagAck: our cookie for the peer (cookie.go)
		return h            // Echoed 0: the receiver cannot validate piggybacked acks
	}
	if p.cookieDue {
		// The peer challenged us (it dropped its state for us): the cookie,
		// no piggybacked ack, until it acknowledges again.
		h.EchoedIncarnation, h.CumAck = p.inc, p.cookie
		return h
	}
	h = e.ackHeader(p, dgram.RDData)
	h.Seq = seq
	if h.Flags&dgram.FlagAck != 0 && !p.nrDue && !(p.extSACK && h.SACK != 0) {
		// (With datagrams held the standalone ACK stays due: it carries
		// the SACK Blocks beyond CumAck+32 a piggybacked ack cannot.)
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
	if p.reoAt != 0 {
		next = min(next, p.reoAt)
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
	prevTo := p.sackTo // the previous reports covered up to here: unSACKed below it was reported missing
	run := -1          // AckedRuns: the index in pending of the Acked action the next token may extend
	for dgram.SeqLess(p.sndUna, cum) && p.out.n > 0 {
		e.noteReordering(p, p.out.at(0), p.sndUna, prevTo)
		s := p.out.popFront()
		if s.flags&segSacked != 0 {
			p.nSacked--
		}
		p.sndUna++
		advanced = true
		if s.flags&segRetx != 0 {
			repaired = true
		}
		if s.flags&(segRetx|segSacked) == 0 {
			sampleAt = max(sampleAt, s.sentAt, p.rtoAt)
		}
		e.stats.Acked++
		switch {
		case run >= 0 && run == len(e.pending)-1 && e.pending[run].Token+Token(e.pending[run].N) == s.tok:
			e.pending[run].N++ // nothing came between: the run goes on
		case e.cfg.AckedRuns:
			run = len(e.pending)
			e.push(Action{Kind: Acked, N: 1, Peer: p.addr, Token: s.tok})
		default:
			e.push(Action{Kind: Acked, Peer: p.addr, Token: s.tok})
		}
		if p.hold && s.tok == p.holdTok {
			e.releaseHold(p) // the peer has the error message: ack the refused DATA now
		}
	}
	if advanced {
		p.progress()
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
	// sackTo: the latest acknowledgement's bitmap and the SACK Blocks
	// that followed it in order (base = sackTo) cover every datagram
	// below it. Only there is an unSACKed datagram known missing
	// (fastRetransmit); beyond it a hole may be one an older report showed
	// before the datagram arrived, whose newer report was lost.
	base := cum + 1
	if h.Type == dgram.RDAck && h.Flags&dgram.FlagSACKBlock != 0 {
		base = h.Seq
		if p.sackTo == base {
			p.sackTo += 32
		}
	} else {
		p.sackTo = cum + 33
	}
	if h.SACK != 0 {
		for i := uint32(0); i < 32; i++ {
			if h.SACK&(1<<i) == 0 {
				continue
			}
			off := int(base + i - p.sndUna)
			if off >= p.out.n {
				break
			}
			s := p.out.at(off)
			if s.flags&segSacked == 0 {
				e.noteReordering(p, s, base+i, prevTo)
				s.flags |= segSacked
				p.nSacked++
				p.progress()
				if p.sackHigh == 0 || dgram.SeqLess(p.sackHigh, base+i) {
					p.sackHigh = base + i
				}
				if s.flags&segRetx == 0 && dgram.SeqLessEq(base+i, horizon) {
					sampleAt = max(sampleAt, s.sentAt, p.rtoAt)
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
		wait := int64(e.cfg.NotReadyBackoff)
		for i := uint8(0); i < p.nrBackoff && wait < int64(e.cfg.MaxRTO); i++ {
			wait *= 2
		}
		deadline := t + min(wait, int64(e.cfg.MaxRTO))
		if wait < int64(e.cfg.MaxRTO) {
			p.nrBackoff++
		}
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
		e.fastRetransmit(t, p)
	}
}

// noteReordering records that the path reorders (RFC 8985 §6.2 step 2)
// when datagram s (seq), never retransmitted, is acknowledged or SACKed
// for the first time although the previous reports, covering it
// contiguously (below prevTo), showed it missing while a later one was
// SACKed: it arrived after a later datagram. Only contiguous coverage
// counts: a lost or overtaken ACK leaves a gap in what the sender knows,
// and the next report filling it is not reordering (on veth at 1 % loss
// each way that misreading switched every run to the slow rule).
func (e *Endpoint) noteReordering(p *peer, s *outSeg, seq, prevTo uint32) {
	if s.flags&(segSacked|segRetx) != 0 || p.sackHigh == 0 {
		return
	}
	if dgram.SeqLess(seq, prevTo) && dgram.SeqLess(seq, p.sackHigh) {
		if p.reoPersist == 0 {
			e.stats.Reordering++
		}
		p.reoPersist = reorderPersist
	}
}

// reorderPersist is how many fast retransmissions the reordering window
// stays in force after reordering was last seen (RFC 8985 §6.2,
// reo_wnd_persist = 16): a single misread (an ACK lost at the wrong
// moment can look like a late datagram) does not slow a FIFO path for
// good.
const reorderPersist = 16

// dupThreshold is RFC 6675's DupThresh: SACKed datagrams after a hole
// that declare it lost.
const dupThreshold = 3

// fastRetransmit resends the holes the SACKed datagrams show lost (RFC
// 6675 §5 with the time rules of RACK, RFC 8985), scanning p's whole
// window (every datagram a SACK ever covered keeps segSacked):
//
//   - a hole is lost when dupThreshold later datagrams are SACKed (fewer
//     when fewer were sent after it: early retransmit, RFC 5827);
//   - and it has been outstanding, since its latest transmission, for a
//     round trip plus a reordering window. While the path has shown no
//     reordering (noteReordering) that is RACK's default, the minimum RTT
//     plus min_RTT/4 (RFC 8985 §6.2): a hole is resent about one round
//     trip after it was sent. Once the path reorders it is SRTT plus
//     max(SRTT/4, 4·RTTVAR). (The latter for every path — SRTT + 4·RTTVAR
//     on a noisy host is about an RTO — stalled a full window on each
//     hole: measured 0.1–0.3 of the lossless goodput at 1 % loss.)
//     When the SACK count is reached but not the time, a reorder timer
//     (reoAt) makes the check again without waiting for another ACK (RFC
//     8985 §7.3): once the window is full no more ACKs come;
//   - a retransmitted hole is lost again only when a datagram sent after
//     that retransmission is SACKed (RFC 8985 §6.2: delivered later in
//     send order), so duplicate ACKs and ACKs in flight resend nothing.
func (e *Endpoint) fastRetransmit(t int64, p *peer) {
	sacked := 0
	for off := 0; off < p.out.n; off++ {
		if p.out.at(off).flags&segSacked != 0 {
			sacked++
		}
	}
	wait := p.minRTT + p.minRTT/4
	switch {
	case p.minRTT == 0:
		wait = e.rto(p) // no round trip measured yet: no reordering window either
	case p.reoPersist > 0:
		wait = p.srtt + max(p.srtt/4, 4*p.rttvar)
	}
	p.reoAt = 0
	for off := 0; off < p.out.n && sacked > 0; off++ {
		if !dgram.SeqLess(p.sndUna+uint32(off), p.sackTo) {
			break // not covered by the latest acknowledgement
		}
		s := p.out.at(off)
		if s.flags&segSacked != 0 {
			sacked--
			continue
		}
		thresh := dupThreshold
		if p.reoPersist == 0 {
			thresh = min(thresh, p.out.n-1-off)
		}
		if sacked < thresh || s.flags&segNotReady != 0 || int(s.retries) >= e.cfg.MaxRetries {
			continue
		}
		if s.flags&segRetx != 0 && !p.sackedSentAfter(off, s.sentAt) {
			continue
		}
		if t-s.sentAt < wait {
			if at := s.sentAt + wait; p.reoAt == 0 || at < p.reoAt {
				p.reoAt = at
			}
			continue
		}
		s.flags |= segFastRetx
		e.stats.FastRetransmits++
		if p.reoPersist > 0 {
			p.reoPersist-- // RFC 8985 §6.2 step 4: the reordering window lapses after 16 recoveries without reordering
		}
		e.retransmit(t, p, off, false, false) // the path delivers: not counted against MaxRetries
	}
	if p.reoAt != 0 {
		e.armed(p, p.reoAt)
	}
}

// sackedSentAfter reports whether a datagram after offset off that was
// sent later than at is SACKed.
func (p *peer) sackedSentAfter(off int, at int64) bool {
	for o := off + 1; o < p.out.n; o++ {
		if s := p.out.at(o); s.flags&segSacked != 0 && s.sentAt > at {
			return true
		}
	}
	return false
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
		if e.probing(p) {
			// Since its latest transmission the receiver answered
			// without it (this ACK): a probe timeout after that
			// transmission, however long ago, is when it is lost.
			s.deadline = s.sentAt + e.pto(p, s)
		} else {
			s.deadline = max(s.deadline, t+e.backedOff(p, s.timeouts))
		}
		break
	}
	e.rearm(p)
}

// retransmit queues the datagram at offset off for resending; counted
// retransmissions count against MaxRetries, timeouts also back its timer
// off (a fast retransmission is a loss the SACKs showed on a path that
// delivers: it does not double the timer, RFC 6298 §5.5 backs off on
// timeouts).
func (e *Endpoint) retransmit(t int64, p *peer, off int, counted, timeout bool) {
	s := p.out.at(off)
	if counted {
		s.retries++
	}
	if timeout && s.timeouts < 255 {
		s.timeouts++
	}
	if s.flags&segHandshake != 0 {
		// Sent again because the peer dropped it unbuffered and
		// challenged us: as a first transmission (RTT samples count).
		e.stats.HandshakeResends++
	} else {
		s.flags |= segRetx
		e.stats.Retransmits++
	}
	s.flags &^= segResend | segHandshake
	s.sentAt = t
	if e.probing(p) {
		s.deadline = t + e.pto(p, s)
	} else {
		s.deadline = t + e.backedOff(p, s.timeouts)
	}
	h := e.dataHeader(p, p.sndUna+uint32(off))
	h.Flags |= dgram.FlagAckReq
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
		out = e.takeAcks(p, out)
	}
	if p.reoAt != 0 && p.reoAt <= t {
		e.fastRetransmit(t, p) // the reorder timer: holes past their reordering window
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
			e.retransmit(t, p, off, false, false)
		case s.flags&segHandshake != 0:
			e.retransmit(t, p, off, false, false)
		case int(s.retries) >= e.cfg.MaxRetries:
			e.abandon(p, Failed)
			out = e.flush(out)
			p.next = e.timerDeadline(p)
			return out
		case s.flags&segResend == 0 && e.probing(p):
			// A tail probe (probe): the path delivers, the oldest
			// datagram's latest transmission or its ACK was lost.
			e.stats.Probes++
			p.probes++
			p.rtoAt = t
			e.retransmit(t, p, off, false, false)
		default:
			if s.flags&segResend == 0 {
				e.stats.Timeouts++
				p.rtoAt = t
			}
			e.retransmit(t, p, off, true, s.flags&segResend == 0)
		}
	}
	out = e.flush(out)
	p.next = e.timerDeadline(p)
	return out
}

// takeAcks appends p's standalone ACK and clears the pending-ack state;
// when p understands extended SACK (dgram.FlagExtSACK) and we hold datagrams
// beyond CumAck+32, one SACK Block ACK (dgram.FlagSACKBlock, bitmap based at
// its Sequence Number; wire-format.md §7.1) per further 32 datagrams,
// from CumAck+33 in order up to the last held one, so that the sender
// sees every hole of the reorder window in one round trip, not one hole
// per round trip. Blocks go out when due (blocksDue): after every
// blockEvery datagrams held beyond CumAck+32, and on an ACKREQ (the
// sender's window is full: it waits for this report).
func (e *Endpoint) takeAcks(p *peer, out []Action) []Action {
	h := e.ackHeader(p, dgram.RDAck)
	if p.nrDue {
		h.Flags |= dgram.FlagNotReady
		e.stats.NotReadySent++
	}
	p.ackDue, p.nrDue = false, false
	p.unacked = 0
	e.stats.AcksSent++
	out = append(out, Action{Kind: SendAck, Peer: p.addr, Header: h})
	if !p.extSACK || p.heldN == 0 || h.Flags&dgram.FlagAck == 0 || !p.blocksDue {
		return out
	}
	p.blocksDue, p.heldNew = false, 0
	for base := h.CumAck + 33; p.heldFrom(base); base += 32 {
		x := h
		x.Flags = x.Flags&^dgram.FlagNotReady | dgram.FlagSACKBlock
		x.Seq = base
		x.SACK = p.sackBitsFrom(base)
		e.stats.AcksSent++
		out = append(out, Action{Kind: SendAck, Peer: p.addr, Header: x})
	}
	return out
}
