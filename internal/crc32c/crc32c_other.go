//go:build !amd64

package crc32c

import "hash/crc32"

// update is the standard library's CRC-32C (hardware accelerated on arm64,
// ppc64le, s390x and loong64; a slicing-by-8 table elsewhere).
func update(crc uint32, b []byte) uint32 { return crc32.Update(crc, table, b) }

// Impl names the implementation in use, for benchmarks and logs.
func Impl() string { return "hash/crc32" }
