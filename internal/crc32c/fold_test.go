package crc32c

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
	"math/rand"
	"testing"
)

// xPowModSlow is x^e mod P one shift at a time.
func xPowModSlow(e int) uint32 {
	r := uint64(1)
	for i := 0; i < e; i++ {
		r <<= 1
		if r&(1<<32) != 0 {
			r ^= poly
		}
	}
	return uint32(r)
}

// TestXPowMod checks x^e mod P against the standard library's table: the
// raw CRC (zero register, no final xor) of a 1 bit followed by e-32 zero
// bits is x^e mod P, reflected.
func TestXPowMod(t *testing.T) {
	for n := 1; n <= 40; n++ {
		// A message of n octets whose first bit is 1 is x^(8n-1); its raw
		// CRC (zero register, no final xor) is x^(8n-1)·x^32 mod P.
		msg := make([]byte, n)
		msg[0] = 1
		raw := ^crc32.Update(0xFFFFFFFF, table, msg)
		if want := reflect32(xPowMod(8*n - 1 + 32)); raw != want {
			t.Fatalf("x^%d mod P = %#08x (reflected), the CRC of a message says %#08x", 8*n+31, want, raw)
		}
	}
	for e := 0; e < 5000; e += 13 {
		if got, want := xPowMod(e), xPowModSlow(e); got != want {
			t.Fatalf("x^%d mod P = %#08x by squaring, %#08x shift by shift", e, got, want)
		}
	}
	for a := 0; a < 300; a += 7 {
		for b := 0; b < 300; b += 11 {
			if got, want := mulModP(xPowMod(a), xPowMod(b)), xPowMod(a+b); got != want {
				t.Fatalf("x^%d·x^%d = %#08x, x^%d = %#08x", a, b, got, a+b, want)
			}
		}
	}
	if xPowMod(32) != poly&0xFFFFFFFF {
		t.Fatalf("x^32 mod P = %#08x, want the polynomial's low bits %#08x", xPowMod(32), uint32(poly&0xFFFFFFFF))
	}
	if reflect32(uint32(poly&0xFFFFFFFF)) != 0x82F63B78 {
		t.Fatalf("reflected polynomial = %#08x, want 0x82F63B78 (RFC 3720 §B.4)", reflect32(uint32(poly&0xFFFFFFFF)))
	}
}

// clmul is a software carry-less 64×64 → 128-bit multiply (PCLMULQDQ).
func clmul(a, b uint64) (lo, hi uint64) {
	for i := 0; i < 64; i++ {
		if b>>i&1 != 0 {
			lo ^= a << i
			if i > 0 {
				hi ^= a >> (64 - i)
			}
		}
	}
	return lo, hi
}

// fold is FOLD16 of the assembly: x moved by the constant pair k.
func fold(x, k [2]uint64) [2]uint64 {
	l0, h0 := clmul(x[0], k[0])
	l1, h1 := clmul(x[1], k[1])
	return [2]uint64{l0 ^ l1, h0 ^ h1}
}

func xor(a, b [2]uint64) [2]uint64 { return [2]uint64{a[0] ^ b[0], a[1] ^ b[1]} }

func load(p []byte) [2]uint64 {
	return [2]uint64{binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])}
}

// foldModel is the XMM path of the assembly in Go with a software carry-less
// multiply: it checks the constants and the reflection arithmetic of fold.go
// independently of the assembly.
func foldModel(crc uint32, p []byte) uint32 {
	k := makeFoldTable() // 128, 256, 384, 512, ...
	var x [4][2]uint64
	for i := range x {
		x[i] = load(p[16*i:])
	}
	x[0][0] ^= uint64(^crc)
	p = p[64:]
	for ; len(p) >= 64; p = p[64:] {
		for i := range x {
			x[i] = xor(fold(x[i], k[3]), load(p[16*i:]))
		}
	}
	acc := xor(xor(fold(x[0], k[2]), fold(x[1], k[1])), xor(fold(x[2], k[0]), x[3]))
	for ; len(p) >= 16; p = p[16:] {
		acc = xor(fold(acc, k[0]), load(p))
	}
	var rest [16]byte
	binary.LittleEndian.PutUint64(rest[:], acc[0])
	binary.LittleEndian.PutUint64(rest[8:], acc[1])
	// The raw CRC (zero register) of the remainder and the tail.
	return crc32.Update(crc32.Update(0xFFFFFFFF, table, rest[:]), table, p)
}

func TestFoldModel(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for n := 64; n < 600; n++ {
		b := randomBuf(rng, n)
		seed := rng.Uint32()
		if got, want := foldModel(seed, b), crc32.Update(seed, table, b); got != want {
			t.Fatalf("folding model over %d octets = %#08x, hash/crc32 says %#08x", n, got, want)
		}
	}
}

// TestFoldConstantsSmall: every constant is reduced (fits in 32 bits), so a
// 64×32 product fits in 96 bits as the assembly assumes.
func TestFoldConstantsSmall(t *testing.T) {
	for i, pair := range foldK {
		for _, c := range pair {
			if bits.Len64(c) > 32 {
				t.Fatalf("constant %#x of distance %d has more than 32 bits", c, foldDistances[i])
			}
		}
	}
}
