// Package crc32c is the CRC-32C (Castagnoli) digest that MPA (RFC 5044 §6,
// §8.1) and the datagram profile put after every FPDU or datagram:
// polynomial 0x1EDC6F41 (reflected 0x82F63B78), init and final xor
// 0xFFFFFFFF, sent little-endian on the wire as siw and Wireshark do
// (RFC 3720 §B.4).
//
// On amd64 it folds the buffer with carry-less multiplies (VPCLMULQDQ on
// four YMM lanes where the CPU has it, else PCLMULQDQ on four XMM lanes) and
// finishes with the SSE4.2 crc32 instruction; short buffers use the crc32
// instruction alone. The folding constants are computed from the polynomial
// at start-up (fold.go). Other architectures and CPUs without these
// features use the standard library's hash/crc32.
//
// Imports: the standard library; golang.org/x/sys/cpu on amd64.
package crc32c
