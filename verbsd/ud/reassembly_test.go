package ud

import (
	"net/netip"
	"testing"
	"time"
)

func TestReassembler(t *testing.T) {
	var r Reassembler
	now := time.Unix(1000, 0)
	src := netip.MustParseAddrPort("10.0.0.1:17000")
	data := []byte("0123456789abcdef")
	piece := func(s string) [][]byte { return [][]byte{[]byte(s)} }
	add := func(msn, mo uint32, last bool, s string) (*Partial, AddResult) {
		return r.Add(PartialKey{src, msn}, mo, last, piece(s), 0, len(s), false, now.Add(time.Second), 2, 1<<20)
	}
	if p, _ := add(1, 8, true, string(data[8:])); p != nil {
		t.Fatal("complete after the last segment alone")
	}
	if p, _ := add(1, 8, true, string(data[8:])); p != nil {
		t.Fatal("duplicate completed the message")
	}
	p, res := add(1, 0, false, string(data[:8]))
	if p == nil || res != AddOK || string(p.Buf) != string(data) {
		t.Fatalf("reassembled %v %v", p, res)
	}
	if r.Partials() != 0 {
		t.Fatal("completed message still held")
	}
	// Overlap beyond the known total is bad.
	add(2, 8, true, "xxxx")
	if _, res := add(2, 10, false, "yyyyyyyy"); res != AddBad {
		t.Fatalf("segment past the end: %v", res)
	}
	// Bounded: a third partial evicts the oldest.
	add(3, 4, true, "zz")
	add(4, 4, true, "zz")
	if _, res := add(5, 4, true, "zz"); res != AddEvicted || r.Partials() != 2 {
		t.Fatalf("eviction: %v, %d partials", res, r.Partials())
	}
	if d, ok := r.NextDeadline(); !ok || !d.Equal(now.Add(time.Second)) {
		t.Fatalf("deadline %v %v", d, ok)
	}
	if n := r.Expire(now.Add(2 * time.Second)); n != 2 || r.Partials() != 0 {
		t.Fatalf("expired %d", n)
	}
}
