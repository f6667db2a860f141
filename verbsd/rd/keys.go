package rd

import (
	"net/netip"
)

// Q_Keys of an RD QP's peers. Every RD datagram names the destination's
// Q_Key (docs/wire-format.md §5.1), the acknowledgements and Read Responses
// the RD layer sends on its own too, so the QP keeps the key of each peer
// it talks to: the key its work requests named for that address (which
// wins), else the Source Q_Key of that peer's accepted datagrams (learned
// only for a peer not yet known, so that a sender holding this QP's key
// cannot redirect the answers meant for a peer the application named). A
// peer whose key is not known (the table is full) gets datagrams with
// Q_Key 0, which it drops: it retransmits, and is learned once there is
// room.

// maxPeerKeys bounds an RD QP's peer key table (12 octets and a map slot
// per peer; the RD layer's own per-peer state is far larger).
const maxPeerKeys = 1 << 16

// peerKeyCache remembers the entry of r.keys looked at last: a stream to
// one peer names its key on every work request (setPeerKey), learns it from
// every datagram (learnPeerKey) and sends with it (peerKey), and hashing a
// netip.AddrPort for each was 4 % of an RD daemon's CPU at 64 B.
type peerKeyCache struct {
	ok   bool // peer is in r.keys with key k
	peer netip.AddrPort
	k    uint32
}

// cachedKey returns peer's key and whether it is known, through the cache.
func (r *state) cachedKey(peer netip.AddrPort) (uint32, bool) {
	if c := &r.keyCache; c.ok && c.peer == peer {
		return c.k, true
	}
	k, ok := r.keys[peer]
	if ok {
		r.keyCache = peerKeyCache{ok: true, peer: peer, k: k}
	}
	return k, ok
}

// peerKey returns the Q_Key to send to peer with (0 if unknown).
func (r *state) peerKey(peer netip.AddrPort) uint32 {
	k, _ := r.cachedKey(peer)
	return k
}

// setPeerKey records the key a work request names for peer.
func (r *state) setPeerKey(peer netip.AddrPort, k uint32) {
	if old, ok := r.cachedKey(peer); ok || len(r.keys) < maxPeerKeys {
		if old != k || !ok {
			r.keys[peer] = k
			r.keyCache = peerKeyCache{ok: true, peer: peer, k: k}
		}
		return
	}
	for p := range r.keys { // full: forget one learned peer for a named one
		delete(r.keys, p)
		break
	}
	r.keys[peer] = k
	r.keyCache = peerKeyCache{ok: true, peer: peer, k: k} // the forgotten one may have been cached
}

// learnPeerKey records the Source Q_Key of an accepted datagram from peer,
// if peer is not known yet and there is room.
func (r *state) learnPeerKey(peer netip.AddrPort, k uint32) {
	if _, ok := r.cachedKey(peer); !ok && len(r.keys) < maxPeerKeys {
		r.keys[peer] = k
		r.keyCache = peerKeyCache{ok: true, peer: peer, k: k}
	}
}
