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
// (no payload, no held datagrams, no send state). To DATA of a remembered
// space it answers with the ACK the endpoint would have sent (Cumulative
// Ack, no SACK): a retransmission of what was delivered completes at its
// sender, and with DATA never delivered the ACK still completes what was.
// Anything else — DATA of another space or from another address, ACKs,
// Challenges — gets nothing, as at a closed port: its sender retransmits
// until MaxRetries as it would without the Linger. A Linger is pure (no
// clock, no sockets, no timers) and never changes after Linger; it does
// not expire by itself: the engine drops it.
type Linger struct {
	inc    uint32 // the endpoint's incarnation
	advWnd uint16
	peers  map[netip.AddrPort]*lingerPeer
	stats  LingerStats
}

// lingerPeer is the state a Linger keeps of one peer (LingerPeerBytes).
type lingerPeer struct {
	inc, mine, mineOld uint32 // the peer's incarnation; ours towards it (0: the endpoint's), and the one before
	cum                uint32 // Cumulative Ack: everything before it was delivered
}

// LingerPeerBytes is the size of the state a Linger keeps per peer, besides
// its map entry (an address and a pointer).
const LingerPeerBytes = int(unsafe.Sizeof(lingerPeer{}))

// LingerStats counts what a Linger answered.
type LingerStats struct {
	Acks    uint64 // ACKs sent (DATA of a remembered space)
	Ignored uint64 // datagrams not answered (another space or address, not DATA, malformed)
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
			l = &Linger{inc: e.inc, advWnd: e.advWnd, peers: make(map[netip.AddrPort]*lingerPeer)}
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
// arrived on the lingering port and appends the reply to send (a SendAck
// action), if any, to out.
func (l *Linger) Receive(peer netip.AddrPort, h dgram.RDHeader, out []Action) []Action {
	p := l.peers[peer]
	if p == nil || h.Version != dgram.RDVersion || h.Type != dgram.RDData || h.Incarnation != p.inc ||
		(h.EchoedIncarnation != 0 && !l.isOurs(p, h.EchoedIncarnation)) {
		l.stats.Ignored++
		return out
	}
	l.stats.Acks++
	return append(out, Action{Kind: SendAck, Peer: peer, Header: dgram.RDHeader{
		Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagAck | dgram.FlagExtSACK,
		Incarnation: l.ours(p), EchoedIncarnation: p.inc, Window: l.advWnd, CumAck: p.cum,
	}})
}
