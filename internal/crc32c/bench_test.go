package crc32c

import (
	"hash/crc32"
	"strconv"
	"testing"
)

// BenchmarkChecksum compares this package with hash/crc32's Castagnoli in
// the same run, for datagram sizes: a header-only datagram, a 1448-octet
// veth MTU payload, and larger ones.
func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{64, 1448, 2048, 9000, 65536} {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(i)
		}
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.Run(Impl(), func(b *testing.B) {
				b.SetBytes(int64(n))
				for i := 0; i < b.N; i++ {
					Checksum(buf)
				}
			})
			b.Run("hash-crc32", func(b *testing.B) {
				b.SetBytes(int64(n))
				for i := 0; i < b.N; i++ {
					crc32.Checksum(buf, table)
				}
			})
		})
	}
}
