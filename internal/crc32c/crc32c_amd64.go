package crc32c

import (
	"hash/crc32"

	"golang.org/x/sys/cpu"
)

// Which amd64 paths this CPU can run. VPCLMULQDQ on YMM registers needs
// AVX2 (which also says the OS saves YMM state) and CPUID leaf 7 ECX bit 10;
// golang.org/x/sys/cpu reports that bit only together with AVX-512, so it is
// read here.
var (
	hasSSE42 = cpu.X86.HasSSE42
	hasFold  = cpu.X86.HasSSE42 && cpu.X86.HasSSE41 && cpu.X86.HasPCLMULQDQ
	hasWide  = hasFold && cpu.X86.HasAVX2 && hasVPCLMULQDQ()
)

// Below foldMin octets the single-lane crc32 instruction is as fast as
// folding. From 256 octets the assembly folds in YMM lanes (when wide).
const foldMin = 64

func hasVPCLMULQDQ() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<10) != 0
}

func update(crc uint32, b []byte) uint32 {
	switch {
	case len(b) >= foldMin && hasFold:
		return updateFold(crc, b, hasWide)
	case hasSSE42:
		return updateSSE42(crc, b)
	}
	return crc32.Update(crc, table, b)
}

// Impl names the implementation in use, for benchmarks and logs.
func Impl() string {
	switch {
	case hasWide:
		return "vpclmulqdq-ymm"
	case hasFold:
		return "pclmulqdq"
	case hasSSE42:
		return "sse4.2"
	}
	return "hash/crc32"
}

// updateSSE42 runs the SSE4.2 crc32 instruction over b, 8 octets at a time.
//
//go:noescape
func updateSSE42(crc uint32, b []byte) uint32

// updateFold folds b (at least 64 octets) in four 128-bit lanes with
// PCLMULQDQ, or, when wide is set and b has at least 256 octets, in four
// 256-bit lanes with VPCLMULQDQ, and finishes with the crc32 instruction.
//
//go:noescape
func updateFold(crc uint32, b []byte, wide bool) uint32

// cpuid executes CPUID with the given leaf and sub-leaf.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
