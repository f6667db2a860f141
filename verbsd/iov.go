package verbsd

import (
	"encoding/binary"

	"github.com/iwarpd/iwarpd/internal/crc32c"
)

// appendRange appends to dst the sub-slices of pieces that cover octets
// [off, off+n) of their concatenation (no copy). Octets beyond the pieces
// are silently not covered: callers pass ranges inside them.
func appendRange(dst [][]byte, pieces [][]byte, off, n int) [][]byte {
	for _, p := range pieces {
		if n <= 0 {
			break
		}
		if off >= len(p) {
			off -= len(p)
			continue
		}
		k := min(len(p)-off, n)
		dst = append(dst, p[off:off+k])
		n -= k
		off = 0
	}
	return dst
}

// copyRange copies octets [off, off+len(dst)) of the concatenation of
// pieces into dst and returns how many it copied.
func copyRange(dst []byte, pieces [][]byte, off int) int {
	done := 0
	for _, p := range pieces {
		if done == len(dst) {
			break
		}
		if off >= len(p) {
			off -= len(p)
			continue
		}
		done += copy(dst[done:], p[off:])
		off = 0
	}
	return done
}

// scatter copies src into the pieces in order and returns how many octets
// fitted.
func scatter(pieces [][]byte, src []byte) int {
	done := 0
	for _, p := range pieces {
		if done == len(src) {
			break
		}
		done += copy(p, src[done:])
	}
	return done
}

// checksumRange returns the CRC32c of octets [0, n) of the concatenation of
// pieces.
func checksumRange(pieces [][]byte, n int) uint32 {
	var c uint32
	for _, p := range pieces {
		if n <= 0 {
			break
		}
		k := min(len(p), n)
		c = crc32c.Update(c, p[:k])
		n -= k
	}
	return c
}

// trailerAt reads the little-endian CRC trailer at octet off of pieces.
func trailerAt(pieces [][]byte, off int) uint32 {
	var b [crc32c.Size]byte
	copyRange(b[:], pieces, off)
	return binary.LittleEndian.Uint32(b[:])
}

// copyBetween copies n octets at offset off of the concatenation of src
// into the concatenation of dst (from its start) and returns how many it
// copied (fewer when either runs out).
func copyBetween(dst, src [][]byte, off, n int) int {
	done, di, dOff := 0, 0, 0
	for _, p := range src {
		if done == n || di == len(dst) {
			break
		}
		if off >= len(p) {
			off -= len(p)
			continue
		}
		p = p[off:min(len(p), off+n-done)]
		off = 0
		for len(p) > 0 && di < len(dst) {
			k := copy(dst[di][dOff:], p)
			p = p[k:]
			done += k
			dOff += k
			if dOff == len(dst[di]) {
				di, dOff = di+1, 0
			}
		}
	}
	return done
}
