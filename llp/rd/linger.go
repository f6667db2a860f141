package rd

import (
	"net/netip"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// Linger is what an Endpoint leaves behind when its QP is destroyed, kept
// by the engine for a bounded time on the QP's port, as TCP keeps a closed
// connection in TIME-WAIT (RFC 9293 §3.6; §3.10.7.4: what arrives then is
// a retransmission of the peer's FIN, and it is acknowledged again). The
// endpoint sends the acknowledgements it owes once when it closes
// (OwedAcks); over a lossy path that ACK can be lost, and a QP that is
// gone could not answer the retransmission: its sender would retransmit
// until MaxRetries and complete a message that was delivered with retry
// exceeded.
//
// A Linger remembers, per peer whose DATA the endpoint received recently,
// only the sequence state of that peer's space — the peer's incarnation,
// ours towards it, the Cumulative Ack — and nothing of the application
// (no payload, no held datagrams, no send state). It answers:
//
//   - DATA of that space already delivered (Seq before the Cumulative
//     Ack): the ACK again, as the endpoint would have (a Duplicate);
//   - DATA of that space not delivered: the ACK (what was delivered
//     completes) and a RESET — the space has no receiver any more, so its
//     sender ends it after one round trip (PeerReset, the engine's
//     WCRetryExcErr) instead of retransmitting until MaxRetries;
//   - any other DATA from a remembered address (another space, another
//     incarnation): a RESET, as the endpoint answers DATA for a space it
//     does not know;
//   - anything else (ACKs, Challenges, unknown addresses): nothing, as a
//     closed port.
//
// RESETs to one address are limited as the handshake's replies are
// (cookie.go): a burst of replyAddrBurst, then one per ReplyInterval. A Linger is pure
// (no clock, no sockets) and never changes after Linger but for these
// limits; it does not expire by itself: the engine drops it.
type Linger struct {
	inc      uint32 // the endpoint's incarnation
	advWnd   uint16
	interval int64 // Config.ReplyInterval, ns
	base     time.Time
	peers    map[netip.AddrPort]*lingerPeer
	stats    LingerStats
}

// lingerPeer is the state a Linger keeps of one peer (LingerPeerBytes).
type lingerPeer struct {
	inc, mine, mineOld uint32 // the peer's incarnation; ours towards it (0: the endpoint's), and the one before
	cum                uint32 // Cumulative Ack: everything before it was delivered
	tat                int64  // reply limit: theoretical arrival time (GCRA), ns since base
}

// LingerPeerBytes is the size of the state a Linger keeps per peer, besides
// its map entry (an address and a pointer).
const LingerPeerBytes = int(unsafe.Sizeof(lingerPeer{}))

// LingerStats counts what a Linger answered.
type LingerStats struct {
	Acks    uint64 // ACKs sent again (delivered DATA retransmitted)
	Resets  uint64 // RESETs sent (DATA nobody will deliver)
	Limited uint64 // RESETs the per-address limit suppressed
	Ignored uint64 // datagrams not answered (unknown address, not DATA, malformed)
}

// Linger returns the state to keep for the endpoint's peers once its QP is
// destroyed at now: every peer with a receive space whose last DATA
// arrived within recent before now (a peer silent longer has nothing
// outstanding it retransmits: a retransmission would have refreshed it),
// at most maxPeers of them (0: no limit). nil when no peer qualifies. It
// may be called before or after OwedAcks; the endpoint is not changed.
func (e *Endpoint) Linger(now time.Time, recent time.Duration, maxPeers int) *Linger {
	t := e.stamp(now)
	var l *Linger
	for addr, p := range e.peers {
		if p.rcvNext == 0 || p.inc == 0 || t-p.lastRecv > int64(recent) {
			continue
		}
		if maxPeers > 0 && l != nil && len(l.peers) >= maxPeers {
			break
		}
		if l == nil {
			l = &Linger{inc: e.inc, advWnd: e.advWnd, interval: int64(e.cfg.ReplyInterval), base: now,
				peers: make(map[netip.AddrPort]*lingerPeer)}
		}
		l.peers[addr] = &lingerPeer{inc: p.inc, mine: p.mine, mineOld: p.mineOld, cum: p.cumAck()}
	}
	return l
}

// Peers returns the number of peers the Linger remembers.
func (l *Linger) Peers() int { return len(l.peers) }

// Has reports whether the Linger remembers peer.
func (l *Linger) Has(peer netip.AddrPort) bool { return l.peers[peer] != nil }

// Stats returns what the Linger answered.
func (l *Linger) Stats() LingerStats { return l.stats }

// ours returns our incarnation towards p.
func (l *Linger) ours(p *lingerPeer) uint32 {
	if p.mine != 0 {
		return p.mine
	}
	return l.inc
}

// isOurs reports whether inc names the endpoint as p knew it (Endpoint.isOurs).
func (l *Linger) isOurs(p *lingerPeer, inc uint32) bool {
	return inc == l.inc || (inc != 0 && (inc == p.mine || inc == p.mineOld))
}

// Receive takes the parsed RD header h of a datagram from peer that
// arrived at now on the lingering port and appends the replies to send
// (SendAck actions, in order) to out.
func (l *Linger) Receive(now time.Time, peer netip.AddrPort, h dgram.RDHeader, out []Action) []Action {
	p := l.peers[peer]
	if p == nil || h.Version != dgram.RDVersion || h.Type != dgram.RDData || h.Incarnation == 0 {
		l.stats.Ignored++
		return out
	}
	ours := l.ours(p)
	if h.Incarnation == p.inc && (h.EchoedIncarnation == 0 || l.isOurs(p, h.EchoedIncarnation)) {
		l.stats.Acks++
		out = append(out, Action{Kind: SendAck, Peer: peer, Header: dgram.RDHeader{
			Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagAck | dgram.FlagExtSACK,
			Incarnation: ours, EchoedIncarnation: p.inc, Window: l.advWnd, CumAck: p.cum,
		}})
		if dgram.SeqLess(h.Seq, p.cum) {
			return out // delivered: the ACK is all it needs
		}
	}
	if !l.mayReply(now, p) {
		l.stats.Limited++
		return out
	}
	// Nobody will deliver it: end its space (Endpoint.queueReset's RESET;
	// the victim names the incarnation of ours it echoed when that is not
	// the current one).
	victim := h.EchoedIncarnation
	if victim == ours {
		victim = 0
	}
	l.stats.Resets++
	return append(out, Action{Kind: SendAck, Peer: peer, Header: dgram.RDHeader{
		Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagReset,
		Incarnation: ours, EchoedIncarnation: h.Incarnation, CumAck: victim,
	}})
}

// mayReply applies the per-address limit of RESETs (Endpoint.mayReply's
// GCRA: a burst of replyAddrBurst, then one per ReplyInterval) and takes
// one from it if allowed. ACKs are not limited: they answer only DATA
// naming both incarnations of the space, as the endpoint's did.
func (l *Linger) mayReply(now time.Time, p *lingerPeer) bool {
	t := int64(now.Sub(l.base))
	tat := max(p.tat, t)
	if tat-t > l.interval*(replyAddrBurst-1) {
		return false
	}
	p.tat = tat + l.interval
	return true
}
