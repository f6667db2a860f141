package crc32c

import (
	"hash/crc32"
	"math/rand"
	"testing"
)

// TestAMD64Paths runs each assembly path directly, whatever Update would
// pick on this CPU, against hash/crc32.
func TestAMD64Paths(t *testing.T) {
	t.Logf("implementation in use: %s", Impl())
	type path struct {
		name string
		ok   bool
		min  int
		f    func(uint32, []byte) uint32
	}
	paths := []path{
		{"sse42", hasSSE42, 0, updateSSE42},
		{"pclmulqdq", hasFold, 64, func(c uint32, b []byte) uint32 { return updateFold(c, b, false) }},
		{"vpclmulqdq", hasWide, 64, func(c uint32, b []byte) uint32 { return updateFold(c, b, true) }},
	}
	rng := rand.New(rand.NewSource(4))
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			if !p.ok {
				t.Skipf("this CPU lacks %s", p.name)
			}
			lengths := []int{9000, 65536, 100000}
			for n := p.min; n <= 4096+300; n++ {
				lengths = append(lengths, n)
			}
			for _, n := range lengths {
				b := randomBuf(rng, n)
				seed := rng.Uint32()
				if got, want := p.f(seed, b), crc32.Update(seed, table, b); got != want {
					t.Fatalf("%s over %d octets = %#08x, hash/crc32 says %#08x", p.name, n, got, want)
				}
			}
		})
	}
}
