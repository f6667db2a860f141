package crc32c

import (
	"bytes"
	"hash/crc32"
	"math/rand"
	"testing"
)

// randomBuf returns n random octets at a random offset (0..63) into a larger
// buffer, so the fast paths see every alignment.
func randomBuf(rng *rand.Rand, n int) []byte {
	off := rng.Intn(64)
	b := make([]byte, off+n)
	rng.Read(b)
	return b[off:]
}

// TestMatchesStdlib compares Checksum and Update with hash/crc32's
// Castagnoli for every length 0..4096 and a few large ones.
func TestMatchesStdlib(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	lengths := []int{9000, 65535, 65536, 65537, 1 << 20}
	for n := 0; n <= 4096; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		b := randomBuf(rng, n)
		if got, want := Checksum(b), crc32.Checksum(b, table); got != want {
			t.Fatalf("Checksum of %d octets at offset %p = %#08x, hash/crc32 says %#08x", n, &b, got, want)
		}
		seed := rng.Uint32()
		if got, want := Update(seed, b), crc32.Update(seed, table, b); got != want {
			t.Fatalf("Update(%#08x) of %d octets = %#08x, hash/crc32 says %#08x", seed, n, got, want)
		}
	}
}

// TestUpdateChained feeds a buffer in random pieces, as the daemon does for
// a header and the payload's scatter-gather pieces.
func TestUpdateChained(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for iter := 0; iter < 2000; iter++ {
		b := randomBuf(rng, rng.Intn(10000))
		want := crc32.Checksum(b, table)
		c := uint32(0)
		for rest := b; len(rest) > 0; {
			k := rng.Intn(len(rest) + 1)
			if rng.Intn(4) == 0 {
				k = rng.Intn(min(len(rest), 300) + 1)
			}
			c = Update(c, rest[:k])
			rest = rest[k:]
		}
		if c != want {
			t.Fatalf("chained Update over %d octets = %#08x, want %#08x", len(b), c, want)
		}
	}
}

// TestUpdateEmpty: an empty update leaves the CRC alone.
func TestUpdateEmpty(t *testing.T) {
	for _, c := range []uint32{0, 1, 0xE3069283, 0xFFFFFFFF} {
		if got := Update(c, nil); got != c {
			t.Fatalf("Update(%#08x, nil) = %#08x", c, got)
		}
	}
}

func FuzzChecksum(f *testing.F) {
	f.Add([]byte("123456789"), uint16(4))
	f.Add(bytes.Repeat([]byte{0xff}, 1448), uint16(700))
	f.Add(make([]byte, 4096), uint16(4000))
	f.Fuzz(func(t *testing.T, b []byte, split uint16) {
		want := crc32.Checksum(b, table)
		if got := Checksum(b); got != want {
			t.Fatalf("Checksum of %d octets = %#08x, hash/crc32 says %#08x", len(b), got, want)
		}
		k := int(split) % (len(b) + 1)
		if got := Update(Checksum(b[:k]), b[k:]); got != want {
			t.Fatalf("Update split at %d of %d octets = %#08x, want %#08x", k, len(b), got, want)
		}
	})
}
