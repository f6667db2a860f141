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
// folding; from wideMin on, the YMM fold runs (when the CPU has it), and
// from hybridMin on (two rounds; with one it is no faster), the hybrid
// rounds.
//
// A hybrid round folds 128 octets in the YMM lanes while three crc32
// instruction streams each digest hybridLane octets further on: the
// carry-less multiplier and the crc32 unit work at once. A buffer of
// 128 + k·hybridRound + r octets (r < hybridRound) is laid out as
// [vector: 128·(k+1) + r][stream 1: S][stream 2: S][stream 3: S], S =
// k·hybridLane; the vector part finishes alone and the four CRCs are joined
// with hybridShift[k] (x^(8S) and x^(24S)). Longer buffers go in pieces of
// at most hybridMaxK rounds.
const (
	foldMin     = 64
	wideMin     = 256
	hybridLane  = 40
	hybridRound = 128 + 3*hybridLane
	hybridMaxK  = 64
	hybridMin   = 128 + 2*hybridRound
)

// hybridShift[k] moves a raw CRC past S = k·hybridLane octets (low
// quadword) and past 3·S octets (high quadword).
var hybridShift = func() (t [hybridMaxK + 1][2]uint64) {
	for k := 1; k <= hybridMaxK; k++ {
		s := k * hybridLane
		t[k] = [2]uint64{foldConst(8 * s), foldConst(8 * 3 * s)}
	}
	return t
}()

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
	case len(b) >= hybridMin && hasWide:
		return updateHybrid(crc, b)
	case len(b) >= foldMin && hasFold:
		return updateFold(crc, b, hasWide, 0, nil)
	case hasSSE42:
		return updateSSE42(crc, b)
	}
	return crc32.Update(crc, table, b)
}

// Impl names the implementation in use, for benchmarks and logs.
func Impl() string {
	switch {
	case hasWide:
		return "vpclmulqdq-ymm+crc32x3"
	case hasFold:
		return "pclmulqdq"
	case hasSSE42:
		return "sse4.2"
	}
	return "hash/crc32"
}

// updateHybrid runs the hybrid rounds over b (at least hybridMin octets).
func updateHybrid(crc uint32, b []byte) uint32 {
	for len(b) >= hybridMin {
		k := (len(b) - 128) / hybridRound
		n := len(b)
		if k > hybridMaxK {
			k, n = hybridMaxK, 128+hybridMaxK*hybridRound
		}
		crc = updateFold(crc, b[:n], true, k, &hybridShift[k])
		b = b[n:]
	}
	switch {
	case len(b) >= foldMin:
		return updateFold(crc, b, true, 0, nil)
	case len(b) > 0:
		return updateSSE42(crc, b)
	}
	return crc
}

// updateSSE42 runs the SSE4.2 crc32 instruction over b, 8 octets at a time.
//
//go:noescape
func updateSSE42(crc uint32, b []byte) uint32

// updateFold folds b (at least 64 octets) in four 128-bit lanes with
// PCLMULQDQ, or, when wide is set and b has at least 256 octets, in four
// 256-bit lanes with VPCLMULQDQ, and finishes with the crc32 instruction.
// With k > 0 (and wide), it first runs k hybrid rounds, joining the streams
// with shift (len(b) >= 128 + k·hybridRound).
//
//go:noescape
func updateFold(crc uint32, b []byte, wide bool, k int, shift *[2]uint64) uint32

// cpuid executes CPUID with the given leaf and sub-leaf.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
