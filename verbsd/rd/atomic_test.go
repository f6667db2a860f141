package rd

import (
	"net/netip"
	"testing"
)

// TestRDAtomicCacheEviction: the replay cache keeps the last
// atomicCacheSize entries.
func TestRDAtomicCacheEviction(t *testing.T) {
	var c atomicCache
	src := netip.MustParseAddrPort("10.0.0.1:17500")
	for i := range atomicCacheSize + 10 {
		c.put(atomicKey{src, uint32(i)}, atomicEntry{orig: uint64(i)})
	}
	if len(c.m) != atomicCacheSize {
		t.Fatalf("%d entries, want %d", len(c.m), atomicCacheSize)
	}
	for i := range 10 {
		if _, ok := c.get(atomicKey{src, uint32(i)}); ok {
			t.Fatalf("entry %d survived eviction", i)
		}
	}
	if v, ok := c.get(atomicKey{src, atomicCacheSize + 9}); !ok || v.orig != atomicCacheSize+9 {
		t.Fatalf("newest entry: %v %v", v, ok)
	}
}
