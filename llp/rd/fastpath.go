package rd

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// The steady state of proven peers, moved to a rank that serves them on
// its QP's own socket while it polls and back (docs/design-small-messages.md
// "RD protocol state: what moves to shared memory"; the engine lays it
// into the fast-path page, proto/fastpath_rd.go). The Endpoint stays pure:
// FastpathExport hands out the fields and freezes the exported peers'
// timers (the rank owns them now), FastpathImport takes them back — the
// engine has checked them against what it exported — and restarts the
// timers of what the rank left outstanding. Everything else (handshake,
// holes and SACK, NOTREADY, RESET, the retransmission timer) stays here.

// FPPeer is one peer's state as it moves to the rank and back.
type FPPeer struct {
	Addr netip.AddrPort
	// Read-only for the rank.
	OurInc, PeerInc uint32 // Sender Incarnation of our DATA, the peer's (echoed)
	Cookie          uint32
	AdvWnd          uint16 // the Window our acks advertise
	MaySend         bool   // the peer acknowledged our space: DATA may piggyback acks
	MayRecv         bool   // a receive space from the peer exists
	RTO             time.Duration
	// Send half.
	NextSeq, SndUna, AckCum, Limit uint32
	// Receive half.
	RcvNext uint32
	Unacked uint16
	AckDue  bool
	// Out (FastpathExportOut only): the datagrams outstanding towards the
	// peer, oldest first (SndUna on), which the rank keeps outstanding
	// from now on (the engine lays their copies into its ring).
	Out []FPOut
}

// FPOut is one DATA datagram the rank left outstanding: its token (the
// engine's name for the copy it keeps) and when the rank sent it.
type FPOut struct {
	Tok    Token
	SentAt time.Time
}

// fastpathExportableOut reports whether p has no state only the endpoint
// can serve: nothing held, held back, drained, NOTREADY, reorder timer,
// Challenge answered, nor an incarnation change to check; at most maxOut
// datagrams outstanding, each sent once and never SACKed, retransmitted,
// refused (NOTREADY) or due again, and each one ok says the rank can keep.
func fastpathExportableOut(p *peer, maxOut int, ok func(Token) bool) bool {
	if p.heldN != 0 || p.hold || p.draining || p.dropping || p.nrDue || p.reoAt != 0 || p.cookieDue || p.checkAck {
		return false
	}
	if p.out.n == 0 {
		return true
	}
	if p.out.n > maxOut || p.nSacked != 0 || p.nextSeq-p.sndUna != uint32(p.out.n) {
		return false
	}
	for i := 0; i < p.out.n; i++ {
		s := p.out.at(i)
		if s.flags != 0 || s.retries != 0 || !ok(s.tok) {
			return false
		}
	}
	return true
}

// FastpathExport appends to out the state of at most n peers the rank
// may serve — proven, with a known incarnation and a space in either
// direction, the most recently active first — and reports true; those
// peers' delayed ACKs move with them (the rank owes them now) and their
// timers stop until FastpathImport. It exports nothing and reports false
// when any peer has state only the endpoint serves (fastpathExportable),
// an action is queued, or a peer left out owes an acknowledgement: the
// engine keeps the socket and tries again later.
func (e *Endpoint) FastpathExport(now time.Time, n int, out []FPPeer) ([]FPPeer, bool) {
	return e.FastpathExportOut(now, n, out, 0, nil)
}

// FastpathExportOut is FastpathExport that also lets go peers with at
// most maxOut datagrams outstanding (fastpathExportableOut: each sent
// once, each one ok accepts), which must then be among the n exported:
// their tokens and send times are in FPPeer.Out, and the endpoint
// forgets them (the rank keeps them outstanding; FastpathImport brings
// back what is still unacknowledged, under tokens of the engine's).
func (e *Endpoint) FastpathExportOut(now time.Time, n int, out []FPPeer, maxOut int, ok func(Token) bool) ([]FPPeer, bool) {
	t := e.stamp(now)
	if len(e.pending) > 0 {
		return out, false
	}
	cand := make([]*peer, 0, len(e.peers))
	for _, p := range e.peers {
		if !fastpathExportableOut(p, maxOut, ok) {
			return out, false
		}
		if p.proven && p.inc != 0 && (p.spaceAcked || p.rcvNext != 0) {
			cand = append(cand, p)
		} else if p.ackDue || p.out.n > 0 {
			return out, false
		}
	}
	slices.SortFunc(cand, func(a, b *peer) int {
		return cmp.Compare(max64(b.lastSend, b.lastRecv), max64(a.lastSend, a.lastRecv))
	})
	for i, p := range cand {
		if i >= n && (p.ackDue || p.out.n > 0) {
			return out, false
		}
	}
	cand = cand[:min(len(cand), n)]
	for _, p := range cand {
		fp := FPPeer{Addr: p.addr, OurInc: e.ours(p), PeerInc: p.inc, Cookie: p.cookie, AdvWnd: e.advWnd,
			MaySend: p.spaceAcked, MayRecv: p.rcvNext != 0, RTO: time.Duration(e.rto(p)),
			NextSeq: p.nextSeq, SndUna: p.sndUna, AckCum: p.ackCum, Limit: p.limit,
			RcvNext: p.rcvNext, Unacked: p.unacked, AckDue: p.ackDue}
		if p.out.n > 0 {
			fp.Out = make([]FPOut, p.out.n)
			for i := range p.out.n {
				s := p.out.popFront()
				fp.Out[i] = FPOut{Tok: s.tok, SentAt: e.timeOf(s.sentAt)}
			}
		}
		out = append(out, fp)
		p.ackDue, p.unacked = false, 0
		p.lastSend, p.lastRecv = t, t // not idle: the rank serves it
		p.next = e.timerDeadline(p)
	}
	return out, true
}

func max64(a, b int64) int64 { return max(a, b) }

// FastpathReady reports, without changing anything, whether
// FastpathExport of n peers would export (it may refuse a few more
// cases: a peer left out owing an ACK is judged more strictly here).
func (e *Endpoint) FastpathReady(n int) bool {
	return e.FastpathReadyOut(n, 0, nil)
}

// FastpathReadyOut is FastpathReady for FastpathExportOut.
func (e *Endpoint) FastpathReadyOut(n, maxOut int, ok func(Token) bool) bool {
	if len(e.pending) > 0 {
		return false
	}
	cand, due := 0, false
	for _, p := range e.peers {
		if !fastpathExportableOut(p, maxOut, ok) {
			return false
		}
		if p.proven && p.inc != 0 && (p.spaceAcked || p.rcvNext != 0) {
			cand++
			due = due || p.ackDue || p.out.n > 0
		} else if p.ackDue || p.out.n > 0 {
			return false
		}
	}
	return cand <= n || !due
}

// FastpathImport takes back the state the rank kept of peer st.Addr (the
// engine checked it against its export: sequence numbers not behind it,
// outs in sequence from st.SndUna, len(outs) == st.NextSeq − st.SndUna)
// and restarts its timers: the oldest outstanding datagram's
// retransmission timeout from its transmission, an owed acknowledgement at
// once. It fails, changing nothing, when the peer is no longer known or
// the numbers do not fit together.
func (e *Endpoint) FastpathImport(now time.Time, st FPPeer, outs []FPOut) error {
	t := e.stamp(now)
	p := e.peerAt(st.Addr)
	if p == nil {
		return fmt.Errorf("rd: fast-path import: no peer %v", st.Addr)
	}
	if st.NextSeq-st.SndUna != uint32(len(outs)) || p.out.n != 0 {
		return fmt.Errorf("rd: fast-path import of %v: %d outstanding for sequence numbers %d..%d (%d the endpoint's)",
			st.Addr, len(outs), st.SndUna, st.NextSeq, p.out.n)
	}
	if st.SndUna != st.NextSeq || st.NextSeq != p.nextSeq || st.SndUna != p.sndUna {
		p.progressed = true // the rank's DATA was acknowledged: the path delivers
	}
	p.nextSeq, p.sndUna, p.ackCum, p.limit = st.NextSeq, st.SndUna, st.AckCum, st.Limit
	if p.nextSeq != 1 {
		p.spaceAcked = p.spaceAcked || st.MaySend
	}
	for _, o := range outs {
		s := int64(o.SentAt.Sub(e.base))
		s = min(max(s, 0), t)
		p.out.pushBack(outSeg{tok: o.Tok, sentAt: s, deadline: s + e.rto(p)})
		p.lastSend = max(p.lastSend, s)
	}
	if st.MayRecv {
		p.rcvNext = st.RcvNext
	}
	p.unacked = st.Unacked
	if st.AckDue || st.Unacked > 0 {
		e.scheduleAck(t, p, true)
	}
	p.lastRecv = t
	p.next = e.timerDeadline(p)
	if p.busy() {
		e.armed(p, p.next)
	}
	return nil
}
