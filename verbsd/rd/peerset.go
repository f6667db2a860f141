package rd

import "net/netip"

// peerSetInline is how many peers a peerSet holds without its map.
const peerSetInline = 4

// peerSet is a set of peer addresses for the per-pass scans of the send
// queue (fill, sendable, complete: the peers whose later work requests
// wait, RFC 5040 §5.5 ordering per peer). It is cleared and refilled every
// pass, once per outstanding work request: with one or a few peers — the
// common case — membership is a comparison of a few addresses instead of a
// hash of a netip.AddrPort per work request (which was 5 % of an RD
// sender's CPU at 64 B, 64 in flight); beyond peerSetInline peers it falls
// over to a map. The zero value is an empty set; it does not allocate
// until more than peerSetInline peers are added.
type peerSet struct {
	n      int // peers in inline (at most peerSetInline)
	inline [peerSetInline]netip.AddrPort
	more   map[netip.AddrPort]struct{} // the peers beyond inline
}

// has reports whether p is in the set.
func (s *peerSet) has(p netip.AddrPort) bool {
	for i := range s.n {
		if s.inline[i] == p {
			return true
		}
	}
	if len(s.more) == 0 {
		return false
	}
	_, ok := s.more[p]
	return ok
}

// add puts p into the set.
func (s *peerSet) add(p netip.AddrPort) {
	if s.has(p) {
		return
	}
	if s.n < peerSetInline {
		s.inline[s.n] = p
		s.n++
		return
	}
	if s.more == nil {
		s.more = make(map[netip.AddrPort]struct{})
	}
	s.more[p] = struct{}{}
}

// reset empties the set (keeping the map's storage).
func (s *peerSet) reset() {
	s.n = 0
	if len(s.more) > 0 {
		clear(s.more)
	}
}
