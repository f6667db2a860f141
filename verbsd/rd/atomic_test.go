package rd

import (
	"net/netip"
	"testing"
)

// TestRDAtomicCacheEviction: the replay cache keeps the last
// rdAtomicCacheSize entries.
func TestRDAtomicCacheEviction(t *testing.T) {
	var c rdAtomicCache
	src := netip.MustParseAddrPort("10.0.0.1:17500")
	for i := range rdAtomicCacheSize + 10 {
		c.put(rdAtomicKey{src, uint32(i)}, rdAtomicEntry{orig: uint64(i)})
	}
	if len(c.m) != rdAtomicCacheSize {
		t.Fatalf("%d entries, want %d", len(c.m), rdAtomicCacheSize)
	}
	for i := range 10 {
		if _, ok := c.get(rdAtomicKey{src, uint32(i)}); ok {
			t.Fatalf("entry %d survived eviction", i)
		}
	}
	if v, ok := c.get(rdAtomicKey{src, rdAtomicCacheSize + 9}); !ok || v.orig != rdAtomicCacheSize+9 {
		t.Fatalf("newest entry: %v %v", v, ok)
	}
}
