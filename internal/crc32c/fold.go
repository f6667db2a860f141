package crc32c

// Constants of the carry-less-multiply folding (Intel, "Fast CRC Computation
// for Generic Polynomials Using PCLMULQDQ Instruction", 2009), derived here
// from the Castagnoli polynomial of RFC 3720 §B.4 rather than pasted.
//
// In the reflected bit order of CRC-32C (RFC 3720 §B.4, RFC 5044 §8.1) the
// first octet of a buffer carries the highest-degree coefficients and bit 0
// of an octet comes first. A 16-octet chunk X, read into a 128-bit register,
// is H·x^64 + L where H is its first 8 octets (the register's low quadword).
// Moving X forward by e bits, X·x^e ≡ H·(x^(e+64) mod P) + L·(x^e mod P), takes
// two 64×32-bit carry-less products. A 64-bit reflected operand times a
// 32-bit reflected constant lands in the 128-bit reflected product with an
// extra factor x^33, so the constant for "multiply by x^e" is x^(e-33) mod P.

// poly is the Castagnoli polynomial 0x1EDC6F41 with its x^32 term, in
// normal (non-reflected) bit order.
const poly = 1<<32 | 0x1EDC6F41

// xPowMod returns x^e mod P in normal bit order (bit i is the coefficient
// of x^i), by square and multiply.
func xPowMod(e int) uint32 {
	r, sq := uint32(1), uint32(2) // x^0, x^1
	for ; e > 0; e >>= 1 {
		if e&1 != 0 {
			r = mulModP(r, sq)
		}
		sq = mulModP(sq, sq)
	}
	return r
}

// mulModP multiplies two polynomials modulo P in normal bit order.
func mulModP(a, b uint32) uint32 {
	var r uint64
	for i := 31; i >= 0; i-- {
		r <<= 1
		if r&(1<<32) != 0 {
			r ^= poly
		}
		if b>>i&1 != 0 {
			r ^= uint64(a)
		}
	}
	return uint32(r)
}

// reflect32 reverses the bit order of v.
func reflect32(v uint32) uint32 {
	var r uint32
	for i := 0; i < 32; i++ {
		r = r<<1 | v>>i&1
	}
	return r
}

// foldConst is the reflected constant that multiplies a 64-bit reflected
// quadword by x^e (modulo P) in one carry-less product.
func foldConst(e int) uint64 { return uint64(reflect32(xPowMod(e - 33))) }

// foldPair is the 128-bit constant that moves a 16-octet chunk forward by e
// bits: the low quadword multiplies the chunk's first 8 octets (x^(e+64)),
// the high quadword its last 8 (x^e).
func foldPair(e int) [2]uint64 { return [2]uint64{foldConst(e + 64), foldConst(e)} }

// foldDistances are the folding distances, in bits, of the entries of the
// constant table the assembly reads (foldK, 16 octets each, in this order).
var foldDistances = [...]int{128, 256, 384, 512, 768, 1024}

// makeFoldTable returns the constant table for foldDistances.
func makeFoldTable() (t [len(foldDistances)][2]uint64) {
	for i, e := range foldDistances {
		t[i] = foldPair(e)
	}
	return t
}

// foldK is the folding constant table of foldDistances, read by the amd64
// assembly.
var foldK = makeFoldTable()
