package crc32c

import (
	"hash/crc32"
	"strconv"
	"testing"
)

// benchPaths are the amd64 paths and hash/crc32, each run directly.
var benchPaths = []struct {
	name string
	ok   bool
	min  int
	f    func(uint32, []byte) uint32
}{
	{"hash-crc32", true, 0, func(c uint32, p []byte) uint32 { return crc32.Update(c, table, p) }},
	{"sse42", hasSSE42, 0, updateSSE42},
	{"xmm", hasFold, foldMin, func(c uint32, b []byte) uint32 { return updateFold(c, b, false) }},
	{"ymm", hasWide, foldMin, func(c uint32, b []byte) uint32 { return updateFold(c, b, true) }},
}

// BenchmarkPaths runs each path on the same (cached) buffers, to set
// foldMin and the YMM threshold: run it with -count and compare the minima
// (the machine is shared).
func BenchmarkPaths(b *testing.B) {
	for _, n := range []int{64, 128, 256, 512, 1024, 1448, 9000, 65536} {
		buf := make([]byte, n)
		for _, p := range benchPaths {
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

// BenchmarkCold digests 1448-octet datagrams in turn through a buffer
// larger than the L2 cache (4 MiB) or than all caches (64 MiB), as the
// sending daemon digests payload a rank has just copied into staging:
// ns per datagram on cold data (the YMM loop prefetches 2 KiB ahead: the
// next datagram follows here, as it does in staging and in a GRO slot).
func BenchmarkCold(b *testing.B) {
	const n = 1448
	for _, total := range []int{4 << 20, 64 << 20} {
		buf := make([]byte, total)
		for i := range buf {
			buf[i] = byte(i)
		}
		for _, p := range benchPaths {
			if !p.ok {
				continue
			}
			b.Run(strconv.Itoa(total>>20)+"MiB/"+p.name, func(b *testing.B) {
				b.SetBytes(n)
				off := 0
				for i := 0; i < b.N; i++ {
					if off+n > total {
						off = 0
					}
					p.f(0, buf[off:off+n])
					off += n
				}
			})
		}
	}
}
