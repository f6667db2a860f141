package crc32c

import (
	"strconv"
	"testing"
)

// BenchmarkPaths runs each amd64 path on the same sizes, to set foldMin,
// wideMin and hybridMin: run it with -count and compare the minima (the
// machine is shared).
func BenchmarkPaths(b *testing.B) {
	paths := []struct {
		name string
		ok   bool
		min  int
		f    func(uint32, []byte) uint32
	}{
		{"sse42", hasSSE42, 0, updateSSE42},
		{"xmm", hasFold, foldMin, func(c uint32, b []byte) uint32 { return updateFold(c, b, false, 0, nil) }},
		{"ymm", hasWide, foldMin, func(c uint32, b []byte) uint32 { return updateFold(c, b, true, 0, nil) }},
		{"hybrid", hasWide, 128 + hybridRound, func(c uint32, b []byte) uint32 {
			if k := (len(b) - 128) / hybridRound; k <= hybridMaxK {
				return updateFold(c, b, true, k, &hybridShift[k]) // even below hybridMin
			}
			return updateHybrid(c, b)
		}},
	}
	for _, n := range []int{64, 128, 256, 376, 624, 1024, 1448, 9000, 65536} {
		buf := make([]byte, n)
		for _, p := range paths {
			if !p.ok || n < p.min {
				continue
			}
			b.Run(strconv.Itoa(n)+"/"+p.name, func(b *testing.B) {
				b.SetBytes(int64(n))
				for i := 0; i < b.N; i++ {
					p.f(0, buf)
				}
			})
		}
	}
}
