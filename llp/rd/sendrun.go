package rd

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// Runs of DATA (the engine's send fast lane, docs/rd.md "Sending runs"):
// the datagrams of one message go out in runs, and a run is registered
// with the send half in one call instead of one Send per datagram.

// SentRun is what SendRun assigned: N DATA datagrams in a row. Datagram i
// (0 ≤ i < N) has the header First with Seq First.Seq+i and, on the last
// one when LastAckReq, FlagAckReq: exactly the headers N calls of Send
// would have returned.
type SentRun struct {
	First      dgram.RDHeader
	N          int
	LastAckReq bool // the run filled the window: the last datagram asks for an ACK at once
}

// Header returns the header of datagram i of the run.
func (r *SentRun) Header(i int) dgram.RDHeader {
	h := r.First
	h.Seq += uint32(i)
	if r.LastAckReq && i == r.N-1 {
		h.Flags |= dgram.FlagAckReq
	}
	return h
}

// SendRun is Send for up to n DATA datagrams towards peer in a row, named
// by the consecutive tokens tok, tok+1, …, tok+n-1 (the segments of one
// message): as many as the window allows now are assigned consecutive
// sequence numbers at once — one peer look-up, one timer update, the ring
// grown once — and the result is the state and headers of that many
// calls of Send: each datagram stays outstanding on its own (its own
// timer, SACK bit and retransmission). It fails as Send does when not
// even one may be sent; n ≤ 0 assigns nothing.
func (e *Endpoint) SendRun(now time.Time, peer netip.AddrPort, tok Token, n int) (SentRun, error) {
	if n <= 0 {
		return SentRun{}, nil
	}
	t := e.stamp(now)
	p := e.lookup(t, peer, true)
	if p == nil {
		return SentRun{}, fmt.Errorf("rd: send to %v: %w", peer, ErrTooManyPeers)
	}
	if !e.canSend(p) {
		return SentRun{}, fmt.Errorf("rd: send to %v: %w", peer, ErrWindowClosed)
	}
	room := e.runRoom(p)
	k := min(n, room)
	seq := p.nextSeq
	p.nextSeq += uint32(k)
	deadline := t + e.rto(p)
	p.out.pushRun(tok, k, t, deadline)
	p.lastSend = t
	e.stats.Sent += uint64(k)
	r := SentRun{First: e.dataHeader(p, seq), N: k, LastAckReq: k == room}
	e.armed(p, deadline)
	return r, nil
}

// SendRoom returns how many DATA datagrams in a row SendRun would assign
// towards peer now (0: CanSend is false; a new peer, which SendRun would
// create, gets its initial window).
func (e *Endpoint) SendRoom(peer netip.AddrPort) int {
	p := e.peerAt(peer)
	if p == nil {
		if len(e.peers) >= e.cfg.MaxPeers {
			return 0
		}
		return e.cfg.Window
	}
	if !e.canSend(p) {
		return 0
	}
	return e.runRoom(p)
}

// runRoom is how many DATA datagrams in a row canSend allows towards p
// (canSend(p) holds): while fewer than Window are in flight and the next
// sequence number is inside the peer's window, or one probe when nothing
// is outstanding. canSend turns false after the last of them and stays
// false while more are assigned.
func (e *Endpoint) runRoom(p *peer) int {
	room := e.cfg.Window - (p.out.n - int(p.nSacked))
	adv := 0
	if dgram.SeqLess(p.nextSeq, p.limit) {
		adv = int(p.limit - p.nextSeq)
	}
	if p.out.n == 0 {
		adv = max(adv, 1)
	}
	return min(room, adv)
}

// pushRun appends k segments named tok … tok+k-1, all sent at t with the
// deadline d, growing the buffer at most once.
func (r *ring) pushRun(tok Token, k int, t, d int64) {
	if need := r.n + k; need > len(r.buf) {
		size := max(4, len(r.buf))
		for size < need {
			size *= 2
		}
		nb := make([]outSeg, size)
		for i := 0; i < r.n; i++ {
			nb[i] = *r.at(i)
		}
		r.buf, r.head = nb, 0
	}
	mask := len(r.buf) - 1
	at := r.head + r.n
	for i := range k {
		r.buf[(at+i)&mask] = outSeg{tok: tok + Token(i), sentAt: t, deadline: d}
	}
	r.n += k
}
