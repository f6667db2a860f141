package crc32c

import (
	"encoding/binary"
	"hash/crc32"
)

// Size is the size of the CRC field on the wire.
const Size = 4

// table is the standard library's Castagnoli table: the portable path, and
// the reference the tests compare the fast paths with.
var table = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C of b (RFC 3720 §B.4, RFC 5044 §8.1).
func Checksum(b []byte) uint32 { return update(0, b) }

// Update returns the CRC-32C of the concatenation of the bytes already
// digested into crc and b (crc is a finished value, as Checksum returns).
func Update(crc uint32, b []byte) uint32 { return update(crc, b) }

// Append appends the wire form of crc (little-endian) to b.
func Append(b []byte, crc uint32) []byte { return binary.LittleEndian.AppendUint32(b, crc) }

// Get reads a wire-form CRC from the first 4 bytes of b.
func Get(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
