package rd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// Config holds the tunables of an Endpoint. Zero fields take the defaults
// of DefaultConfig.
type Config struct {
	Window          int           // max DATA datagrams in flight (sent, neither acknowledged nor SACKed) per peer (default 256)
	InitialRTO      time.Duration // before any RTT sample (default 20ms)
	MinRTO          time.Duration // default 2ms
	MaxRTO          time.Duration // default 1s; also caps the backed-off timeout
	MaxRetries      int           // retransmission timeouts of one datagram before it fails (default 15); fast retransmissions and tail probes (the path delivers) do not count
	NotReadyBackoff time.Duration // first wait after NOTREADY (default 1ms, doubling to MaxRTO); not counted against MaxRetries
	AckDelay        time.Duration // delayed standalone ACK (default 200µs); piggybacked when DATA goes that way first
	IdleTimeout     time.Duration // send half reset after this idle; receive half after 2×; then the peer is freed (default 30s)
	ReorderLimit    int           // out-of-order datagrams a receiver holds per peer, and the window it advertises (default 4×Window)
	MaxPeers        int           // hard cap on peer states (default 65536); new peers beyond it are refused

	// Replies to unproven addresses (Challenges and RESETs, cookie.go):
	// at most ReplyRate per second (default 2000) with bursts of
	// ReplyBurst (default 100) for the endpoint, and at most one per
	// address per ReplyInterval (default 5ms).
	ReplyRate     int
	ReplyBurst    int
	ReplyInterval time.Duration
	// CookieKey is the secret of the cookies (SipHash-2-4 key); all zero:
	// derived from the incarnation (deterministic, for tests only: the
	// engine gives 16 random octets).
	CookieKey [16]byte

	// AckedRuns: an ACK that acknowledges consecutive tokens to one peer
	// reports them as one Acked action (Action.N), not one action each
	// (docs/rd.md "Sending runs": a cumulative ACK covers a run). The
	// actions are otherwise the same, in the same order.
	AckedRuns bool
}

// DefaultConfig returns the default configuration.
func DefaultConfig() Config {
	return Config{
		Window:          256,
		InitialRTO:      20 * time.Millisecond,
		MinRTO:          2 * time.Millisecond,
		MaxRTO:          time.Second,
		MaxRetries:      15,
		NotReadyBackoff: time.Millisecond,
		AckDelay:        200 * time.Microsecond,
		IdleTimeout:     30 * time.Second,
		MaxPeers:        65536,
		ReplyRate:       2000,
		ReplyBurst:      100,
		ReplyInterval:   5 * time.Millisecond,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Window <= 0 {
		c.Window = d.Window
	}
	if c.Window > 1<<15 {
		c.Window = 1 << 15
	}
	if c.InitialRTO <= 0 {
		c.InitialRTO = d.InitialRTO
	}
	if c.MinRTO <= 0 {
		c.MinRTO = d.MinRTO
	}
	if c.MaxRTO <= 0 {
		c.MaxRTO = d.MaxRTO
	}
	if c.MaxRTO < c.MinRTO {
		c.MaxRTO = c.MinRTO
	}
	if c.MaxRetries <= 0 {
		c.MaxRetries = d.MaxRetries
	}
	if c.NotReadyBackoff <= 0 {
		c.NotReadyBackoff = d.NotReadyBackoff
	}
	if c.AckDelay < 0 {
		c.AckDelay = 0
	} else if c.AckDelay == 0 {
		c.AckDelay = d.AckDelay
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.ReorderLimit <= 0 {
		c.ReorderLimit = 4 * c.Window
	}
	c.ReorderLimit = min(c.ReorderLimit, 1<<15)
	if c.MaxPeers <= 0 {
		c.MaxPeers = d.MaxPeers
	}
	if c.ReplyRate <= 0 {
		c.ReplyRate = d.ReplyRate
	}
	if c.ReplyBurst <= 0 {
		c.ReplyBurst = d.ReplyBurst
	}
	if c.ReplyInterval < 0 {
		c.ReplyInterval = 0
	} else if c.ReplyInterval == 0 {
		c.ReplyInterval = d.ReplyInterval
	}
	return c
}

// Token is the engine's opaque name for one DATA datagram (for example a
// work-request number and a segment index): it must be able to rebuild the
// datagram from it.
type Token uint64

// Verdict tells the engine what to do with a received datagram.
type Verdict uint8

const (
	// Deliver: DATA in order; place or deliver it now.
	Deliver Verdict = iota
	// Hold: DATA out of order within the reorder limit; keep it (keyed by
	// peer and Seq) until a DeliverHeld action names it.
	Hold
	// Duplicate: already received; drop (it is acknowledged again).
	Duplicate
	// NotReady: DATA the engine could not accept (ready == false); drop. For
	// the next expected datagram a NOTREADY ACK is sent.
	NotReady
	// Stale: addressed to a previous life of this QP (or an ACK for one);
	// drop. For DATA a RESET is sent.
	Stale
	// AckOnly: an ACK datagram; nothing to place.
	AckOnly
	// Dropped: malformed (incarnation 0, unknown type), beyond the window,
	// or a new peer beyond MaxPeers; drop.
	Dropped
	// Unproven: DATA from an address that has not proven it receives
	// there (no cookie, cookie.go); drop: nothing was kept, a Challenge
	// may be queued.
	Unproven
)

var verdictNames = [...]string{"Deliver", "Hold", "Duplicate", "NotReady", "Stale", "AckOnly", "Dropped", "Unproven"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// ActionKind says what an Action asks of the engine.
type ActionKind uint8

const (
	// Retransmit: send the DATA datagram of Token again, with Header.
	Retransmit ActionKind = iota + 1
	// SendAck: send the standalone ACK datagram Header to Peer (this also
	// carries RESET and NOTREADY).
	SendAck
	// Acked: Token was delivered in order at Peer. The engine completes a
	// work request when all its tokens are acked. With Config.AckedRuns
	// the action stands for N tokens, Token to Token+N-1, delivered in
	// that order.
	Acked
	// Failed: Token gave up after MaxRetries retransmissions (retry
	// exceeded). Every other token outstanding to Peer fails with it, in
	// sequence order, and the pair starts over (a RESET is sent).
	Failed
	// DeliverHeld: the held datagram with sequence number Header.Seq from
	// Peer (Token = Token(Header.Seq)) is now in order: deliver it.
	DeliverHeld
	// PeerReset: Token was outstanding to Peer when Peer restarted or lost
	// its state for this pair (RESET): it will not be acknowledged.
	PeerReset
	// DiscardHeld: drop every datagram held for Peer (its sequence space
	// was reset).
	DiscardHeld
)

var actionNames = [...]string{"?", "Retransmit", "SendAck", "Acked", "Failed", "DeliverHeld", "PeerReset", "DiscardHeld"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is one thing the engine must do, returned by Poll.
type Action struct {
	Kind ActionKind
	// N: an Acked action's number of tokens with Config.AckedRuns (1 or
	// more; the tokens Token, Token+1, …); 0 otherwise (one token).
	N      uint32
	Peer   netip.AddrPort
	Token  Token
	Header dgram.RDHeader // Retransmit, SendAck; DeliverHeld: Seq
}

// Stats counts events of an Endpoint.
type Stats struct {
	Sent, Retransmits, FastRetransmits, Timeouts uint64
	Probes                                       uint64 // tail probes (rtt.go probing): resent after a probe timeout, not counted as timeouts
	Acked, Failed, PeerResets                    uint64
	Delivered, Held, Duplicates, Dropped, Stale  uint64
	NotReadySent, NotReadyReceived               uint64
	AcksSent, ResetsSent, ResetsReceived         uint64
	BadAcks, NewSpaces, Renewals, AckHolds       uint64
	PeersCreated, PeersReclaimed, PeersRefused   uint64
	Reordering                                   uint64 // peers whose path was seen reordering (noteReordering)
	// The handshake (cookie.go): DATA dropped from unproven addresses,
	// Challenges sent and received, replies (Challenges, RESETs) to
	// unproven addresses the limits suppressed.
	// HandshakeResends: datagrams sent again after a Challenge.
	Unproven, Challenges, ChallengesReceived, RepliesLimited, HandshakeResends uint64
}

// Errors of Send.
var (
	ErrWindowClosed = errors.New("rd: window closed")
	ErrTooManyPeers = errors.New("rd: too many peers")
)

// maxPending bounds the queued actions caused by unsolicited input (RESET
// answers to stale DATA) between two Polls.
const maxPending = 1 << 16

// Endpoint is the reliability state of one RD QP towards all its peers.
type Endpoint struct {
	cfg     Config
	inc     uint32
	base    time.Time // origin of the int64 nanosecond stamps
	hasBase bool
	last    int64 // latest now seen
	peers   map[netip.AddrPort]*peer
	recent  *peer   // the peer peerAt found last (nil: none)
	active  []*peer // peers with timers running
	pending []Action
	sweepAt int64
	stats   Stats
	advWnd  uint16

	key      [2]uint64 // cookie key (SipHash-2-4)
	replyAt  []int64   // latest reply per address hash (replySlots), allocated on first use
	tokens   float64   // reply token bucket
	refillAt int64
}

// NewEndpoint returns an Endpoint for one life of an RD QP. incarnation is
// random and non-zero, fresh for each life (0 is replaced by 1).
func NewEndpoint(cfg Config, incarnation uint32) *Endpoint {
	if incarnation == 0 {
		incarnation = 1
	}
	cfg = cfg.withDefaults()
	adv := min(cfg.ReorderLimit+1, 0xffff)
	e := &Endpoint{cfg: cfg, inc: incarnation, peers: make(map[netip.AddrPort]*peer), advWnd: uint16(adv)}
	if cfg.CookieKey == ([16]byte{}) {
		e.key = keyFrom(uint64(incarnation))
	} else {
		e.key = [2]uint64{binary.LittleEndian.Uint64(cfg.CookieKey[:8]), binary.LittleEndian.Uint64(cfg.CookieKey[8:])}
	}
	return e
}

// Incarnation returns the endpoint's incarnation.
func (e *Endpoint) Incarnation() uint32 { return e.inc }

// Config returns the effective configuration (defaults filled in).
func (e *Endpoint) Config() Config { return e.cfg }

// Peers returns the number of live peer states.
func (e *Endpoint) Peers() int { return len(e.peers) }

// Stats returns the event counters.
func (e *Endpoint) Stats() Stats { return e.stats }

// stamp converts now to nanoseconds since the endpoint's first call; the
// clock never goes backwards (an earlier now is taken as the latest).
func (e *Endpoint) stamp(now time.Time) int64 {
	if !e.hasBase {
		e.base, e.hasBase = now.Add(-time.Nanosecond), true
	}
	t := int64(now.Sub(e.base))
	if t < e.last {
		t = e.last
	}
	e.last = t
	return t
}

func (e *Endpoint) timeOf(t int64) time.Time { return e.base.Add(time.Duration(t)) }

// peerAt returns addr's peer state, or nil. The peer found last is
// remembered: a stream to one peer looks its peer up several times per
// datagram (Send, CanSend, Receive, InOrder), and hashing a netip.AddrPort
// each time was 4 % of an RD daemon's CPU at 64 B.
func (e *Endpoint) peerAt(addr netip.AddrPort) *peer {
	if p := e.recent; p != nil && p.addr == addr {
		return p
	}
	p := e.peers[addr]
	if p != nil {
		e.recent = p
	}
	return p
}

func (e *Endpoint) lookup(t int64, addr netip.AddrPort, create bool) *peer {
	if p := e.peerAt(addr); p != nil {
		return p
	}
	if !create {
		return nil
	}
	if len(e.peers) >= e.cfg.MaxPeers {
		e.stats.PeersRefused++
		return nil
	}
	p := &peer{addr: addr, nextSeq: 1, sndUna: 1, ackCum: 1, limit: 1 + uint32(e.cfg.Window), lastSend: t, lastRecv: t}
	e.peers[addr] = p
	e.stats.PeersCreated++
	if len(e.peers) == 1 || e.sweepAt == 0 {
		e.sweepAt = t + int64(e.cfg.IdleTimeout)/4
	}
	return p
}

func (e *Endpoint) activate(p *peer) {
	if !p.active {
		p.active = true
		e.active = append(e.active, p)
	}
}

func (e *Endpoint) push(a Action) { e.pending = append(e.pending, a) }

// flush hands the queued actions to the engine (appending them to out):
// from here on the engine has taken the DeliverHeld and DiscardHeld
// actions among them.
func (e *Endpoint) flush(out []Action) []Action {
	for i := range e.pending {
		if a := &e.pending[i]; a.Kind == DeliverHeld || a.Kind == DiscardHeld {
			if p := e.peerAt(a.Peer); p != nil {
				p.draining, p.dropping = false, false
			}
		}
	}
	out = append(out, e.pending...)
	clear(e.pending)
	e.pending = e.pending[:0]
	return out
}

// Poll runs the timers due at now (retransmissions, delayed ACKs, idle
// reclamation) and appends to out every action queued since the last Poll
// followed by the ones the timers produced. Call it after Send and Receive
// and whenever NextDeadline passes.
func (e *Endpoint) Poll(now time.Time, out []Action) []Action {
	t := e.stamp(now)
	out = e.flush(out)
	kept := e.active[:0]
	for _, p := range e.active {
		if p.next <= t {
			out = e.runTimers(t, p, out)
		}
		if p.busy() {
			kept = append(kept, p)
		} else {
			p.active = false
		}
	}
	clear(e.active[len(kept):])
	e.active = kept
	if len(e.peers) > 0 && e.sweepAt <= t {
		e.sweep(t)
	}
	out = e.flush(out) // actions of the idle sweep
	if cap(e.pending) > 4096 {
		e.pending = nil // do not keep a burst's worth of queue
	}
	return out
}

// NextDeadline returns when Poll must next be called; false if no timer
// runs. A time in the past means now.
func (e *Endpoint) NextDeadline() (time.Time, bool) {
	if len(e.pending) > 0 {
		return e.timeOf(e.last), true
	}
	var next int64
	ok := false
	for _, p := range e.active {
		if !ok || p.next < next {
			next, ok = p.next, true
		}
	}
	if len(e.peers) > 0 && (!ok || e.sweepAt < next) {
		next, ok = e.sweepAt, true
	}
	if !ok {
		return time.Time{}, false
	}
	return e.timeOf(next), true
}

// sweep resets the halves of idle peers and frees peers idle in both
// directions.
func (e *Endpoint) sweep(t int64) {
	it := int64(e.cfg.IdleTimeout)
	for addr, p := range e.peers {
		if p.active || p.busy() {
			continue
		}
		if p.out.n == 0 {
			p.out.buf = nil // idle: keep no ring
		}
		if p.out.n == 0 && p.nextSeq != 1 && t-p.lastSend >= it {
			p.resetSend(e.cfg.Window) // the next DATA starts a new space at 1
		}
		if p.rcvNext != 0 && t-p.lastRecv >= 2*it {
			if p.heldN > 0 { // a gap its sender gave up on
				e.push(Action{Kind: DiscardHeld, Peer: p.addr})
				p.dropping = true
			}
			p.resetReceive()
		}
		if p.nextSeq == 1 && p.rcvNext == 0 && t-p.lastSend >= it && t-p.lastRecv >= it {
			delete(e.peers, addr)
			if e.recent == p {
				e.recent = nil
			}
			e.stats.PeersReclaimed++
		}
	}
	e.sweepAt = t + it/4
}

// header returns a header from e with the ack fields for p filled in when
// p has a receive space and p's incarnation is known.
func (e *Endpoint) ackHeader(p *peer, typ dgram.RDType) dgram.RDHeader {
	h := dgram.RDHeader{Version: dgram.RDVersion, Type: typ, Flags: dgram.FlagExtSACK, Incarnation: e.ours(p), EchoedIncarnation: p.inc}
	if p.rcvNext != 0 && p.inc != 0 {
		h.Flags |= dgram.FlagAck
		h.Window = e.advWnd
		h.CumAck = p.cumAck()
		h.SACK = p.sackBits()
	}
	return h
}

// endSend ends p's send space (our sequence space towards it): every
// outstanding token is reported with kind (PeerReset or Failed). When the
// space was used, our incarnation towards p is renewed, so that the next
// space — starting at 1 again — can never be taken by any life of the peer
// for the one that ended (it may keep receive state for it, or get late
// datagrams of it). The receive half is not touched: the peer's space
// towards us goes on.
func (e *Endpoint) endSend(p *peer, kind ActionKind) {
	used := p.nextSeq != 1 || p.out.n > 0
	for i := 0; i < p.out.n; i++ {
		s := p.out.at(i)
		e.push(Action{Kind: kind, Peer: p.addr, Token: s.tok})
		if kind == Failed {
			e.stats.Failed++
		} else {
			e.stats.PeerResets++
		}
		if p.hold && s.tok == p.holdTok {
			e.releaseHold(p) // the error message will not arrive: ack what was delivered
		}
	}
	p.resetSend(e.cfg.Window)
	if used {
		e.renew(p)
	}
}

// endReceive ends p's space towards us (the peer restarted or renewed its
// incarnation): held datagrams are discarded.
func (e *Endpoint) endReceive(p *peer) {
	if p.heldN > 0 || p.draining {
		e.push(Action{Kind: DiscardHeld, Peer: p.addr})
		p.dropping = true
	}
	p.resetReceive()
}

// renew takes a new incarnation of ours towards p only.
func (e *Endpoint) renew(p *peer) {
	old := e.ours(p)
	next := old*0x9e3779b1 + 0x7f4a7c15
	for next == 0 || next == old || next == e.inc || next == p.mineOld {
		next++
	}
	p.mineOld, p.mine = old, next
	e.stats.Renewals++
}

// isOurs reports whether inc names this life of the endpoint as seen by
// the peer p: the endpoint's incarnation or one of ours towards p.
func (e *Endpoint) isOurs(p *peer, inc uint32) bool {
	return inc == e.inc || (p != nil && inc != 0 && (inc == p.mine || inc == p.mineOld))
}

// learn records the peer's incarnation. A change ends the peer's old space
// towards us (its previous incarnation is remembered as stale); our space
// towards it goes on: if the new incarnation has no receive state for it,
// it answers our next DATA with RESET.
func (e *Endpoint) learn(p *peer, inc uint32) {
	if p.inc == inc {
		return
	}
	if p.inc != 0 {
		p.prev = p.inc
		e.endReceive(p)
		p.checkAck = p.nextSeq != 1
		// What the old incarnation SACKed it may never have delivered:
		// resend it to the new one now (which takes it or answers RESET).
		sacked := false
		for off := 0; off < p.out.n; off++ {
			if s := p.out.at(off); s.flags&segSacked != 0 {
				s.flags &^= segSacked
				p.nSacked--
				s.flags |= segResend
				s.deadline = min(s.deadline, e.last)
				sacked = true
			}
		}
		if sacked {
			e.rearm(p)
		}
	}
	p.inc = inc
}

// queueReset queues a RESET to addr for the pair (ours, peerInc) whose
// state on our side is gone. victim is the incarnation of ours that state
// belonged to when it is not ours (0 otherwise); it rides in the CumAck
// field, unused without FlagAck, so that a late or duplicated RESET
// answering DATA for a previous life does not reset the pair's newer state.
func (e *Endpoint) queueReset(addr netip.AddrPort, ours, peerInc, victim uint32) {
	if len(e.pending) >= maxPending || peerInc == 0 {
		return
	}
	if p := e.peerAt(addr); (p == nil || !p.proven) && !e.mayReply(e.last, addr) {
		return // an unproven address: limited (cookie.go)
	}
	if victim == ours {
		victim = 0
	}
	e.stats.ResetsSent++
	e.push(Action{Kind: SendAck, Peer: addr, Header: dgram.RDHeader{
		Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagReset,
		Incarnation: ours, EchoedIncarnation: peerInc, CumAck: victim,
	}})
}

// ours returns our incarnation towards p (the endpoint's unless the pair
// was restarted after a failure).
func (e *Endpoint) ours(p *peer) uint32 {
	if p != nil && p.mine != 0 {
		return p.mine
	}
	return e.inc
}

// abandon ends our send space towards p after a failure (retry exceeded,
// or an ACK proving the peer kept receive state of another space of ours):
// the outstanding tokens end with kind and our incarnation towards p is
// renewed; the peer sees the new incarnation on our next DATA and starts a
// new receive space, its own space towards us is not disturbed.
func (e *Endpoint) abandon(p *peer, kind ActionKind) {
	e.endSend(p, kind)
}

// HoldAcks keeps acknowledgements to peer from covering DATA seq (received
// from peer) until tok — a DATA token of ours to peer, sent or still to be
// sent, normally the error message about seq — is acknowledged, or ends
// (Failed, PeerReset). The engine calls it when it refuses a delivered
// datagram, before sending the error message: the peer then always learns
// of the error before the acknowledgement that would complete its work
// request. Datagrams after seq are SACKed meanwhile (no retransmission).
// A second call keeps the earliest seq and waits for the newer tok.
func (e *Endpoint) HoldAcks(peer netip.AddrPort, seq uint32, tok Token) {
	p := e.peerAt(peer)
	if p == nil || p.rcvNext == 0 || !dgram.SeqLess(seq, p.rcvNext) {
		return
	}
	if !p.hold || dgram.SeqLess(seq, p.holdSeq) {
		p.holdSeq = seq
	}
	p.hold, p.holdTok = true, tok
	e.stats.AckHolds++
}

// releaseHold ends a HoldAcks and sends the acknowledgement now.
func (e *Endpoint) releaseHold(p *peer) {
	p.hold = false
	if p.rcvNext != 0 {
		e.scheduleAck(e.last, p, true)
	}
}
