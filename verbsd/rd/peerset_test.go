package rd

import (
	"net/netip"
	"testing"
)

// peerN is the i-th of distinct test peers (i < 16 000 000).
func peerN(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i / 250 / 250), byte(i / 250 % 250), byte(i%250 + 1)}), uint16(17500+i%7))
}

// TestPeerSet: membership matches a map's for sets of 0 … 3·peerSetInline
// peers (inline and overflowing into the map), across resets, with
// duplicates added, and an address differing only in the port is another
// peer.
func TestPeerSet(t *testing.T) {
	var s peerSet
	for size := range 3*peerSetInline + 1 {
		s.reset()
		want := map[netip.AddrPort]bool{}
		for i := range size {
			p := peerN(i * 3)
			s.add(p)
			s.add(p) // twice: still one member
			want[p] = true
		}
		for i := range 3*size + 4 {
			p := peerN(i)
			if got := s.has(p); got != want[p] {
				t.Fatalf("size %d: has(%v) = %v, want %v", size, p, got, want[p])
			}
		}
		if size > 0 {
			p := peerN(0)
			other := netip.AddrPortFrom(p.Addr(), p.Port()+1000)
			if s.has(other) {
				t.Fatalf("size %d: has(%v): only %v was added", size, other, p)
			}
		}
		if n := s.n + len(s.more); n != size {
			t.Fatalf("size %d: %d members (inline %d, map %d)", size, n, s.n, len(s.more))
		}
	}
	s.reset()
	for i := range 3*peerSetInline + 4 {
		if s.has(peerN(i)) {
			t.Fatalf("after reset: has(%v)", peerN(i))
		}
	}
}

// TestPeerKeyCache: the remembered entry of the key table never answers
// for another peer or with a stale key — a named key replaces a learned
// one, a learned key never replaces a known one, and a peer forgotten to
// make room is not answered from the cache.
func TestPeerKeyCache(t *testing.T) {
	r := &state{keys: map[netip.AddrPort]uint32{}}
	a, b := peerN(1), peerN(2)
	r.learnPeerKey(a, 10)
	if k := r.peerKey(a); k != 10 {
		t.Fatalf("learned a: key %d, want 10", k)
	}
	if k := r.peerKey(b); k != 0 {
		t.Fatalf("b unknown: key %d, want 0", k)
	}
	r.learnPeerKey(a, 11) // known: not learned again
	if k := r.peerKey(a); k != 10 {
		t.Fatalf("a learned twice: key %d, want 10", k)
	}
	r.setPeerKey(a, 12) // named: wins
	if k := r.peerKey(a); k != 12 || r.keys[a] != 12 {
		t.Fatalf("a named 12: key %d (table %d)", k, r.keys[a])
	}
	r.learnPeerKey(b, 20)
	r.setPeerKey(a, 13)
	if ka, kb := r.peerKey(a), r.peerKey(b); ka != 13 || kb != 20 {
		t.Fatalf("keys a %d b %d, want 13 20", ka, kb)
	}
	// Full table: naming a new peer forgets one; whichever it was, the
	// cache answers as the table does.
	r = &state{keys: map[netip.AddrPort]uint32{}}
	for i := range maxPeerKeys {
		r.learnPeerKey(peerN(i), uint32(i)+1)
	}
	c := peerN(maxPeerKeys + 5)
	for i := range maxPeerKeys {
		_ = r.peerKey(peerN(i)) // every one cached in turn
	}
	r.setPeerKey(c, 7)
	if len(r.keys) != maxPeerKeys || r.peerKey(c) != 7 {
		t.Fatalf("table %d entries, c's key %d", len(r.keys), r.peerKey(c))
	}
	forgotten := 0
	for i := range maxPeerKeys {
		p := peerN(i)
		k, ok := r.keys[p]
		if got := r.peerKey(p); got != k {
			t.Fatalf("peer %v: key %d, table %d (%v)", p, got, k, ok)
		}
		if !ok {
			forgotten++
		}
	}
	if forgotten != 1 {
		t.Fatalf("%d peers forgotten, want 1", forgotten)
	}
}
