#include "textflag.h"

// CRC-32C (RFC 3720 §B.4, RFC 5044 §8.1) on amd64. The constants come from
// foldK (fold.go), computed from the polynomial at start-up.

// func updateSSE42(crc uint32, b []byte) uint32
TEXT ·updateSSE42(SB), NOSPLIT, $0-36
	MOVL crc+0(FP), AX
	NOTL AX
	MOVQ b_base+8(FP), SI
	MOVQ b_len+16(FP), CX
	CMPQ CX, $8
	JB   tail
loop8:
	CRC32Q (SI), AX
	ADDQ $8, SI
	SUBQ $8, CX
	CMPQ CX, $8
	JAE  loop8
tail:
	CMPQ CX, $4
	JB   tail2
	CRC32L (SI), AX
	ADDQ $4, SI
	SUBQ $4, CX
tail2:
	CMPQ CX, $2
	JB   tail1
	CRC32W (SI), AX
	ADDQ $2, SI
	SUBQ $2, CX
tail1:
	TESTQ CX, CX
	JZ   done
	CRC32B (SI), AX
done:
	NOTL AX
	MOVL AX, ret+32(FP)
	RET

// FOLD16 moves the 128-bit lane X by the distance whose constant pair is in
// K and xors it into D, using T as scratch: D ^= X.lo·K.lo ^ X.hi·K.hi.
// X is clobbered.
#define FOLD16(K, X, T, D) \
	MOVOA X, T \
	PCLMULQDQ $0x00, K, X \
	PCLMULQDQ $0x11, K, T \
	PXOR X, D \
	PXOR T, D

// FOLD32 is FOLD16 on both 128-bit halves of a YMM register (VEX encoded).
#define FOLD32(K, Y, T, D) \
	VPCLMULQDQ $0x00, K, Y, T \
	VPCLMULQDQ $0x11, K, Y, Y \
	VPXOR T, D, D \
	VPXOR Y, D, D

// func updateFold(crc uint32, b []byte, wide bool) uint32
// len(b) >= 64.
TEXT ·updateFold(SB), NOSPLIT, $0-44
	MOVL crc+0(FP), AX
	NOTL AX
	MOVQ b_base+8(FP), SI
	MOVQ b_len+16(FP), CX

	// Ask for every line of the first 2 KiB at once: the sending daemon
	// digests payload a rank has just copied, on another CPU, and the
	// misses then overlap instead of coming one lane at a time. The YMM
	// loop asks 2 KiB ahead, where the next datagram usually is (prefetch
	// never faults). In MPI 1 MiB runs this took a third off the sender's
	// CRC samples (docs/wire-format.md "CRC32c speed").
	MOVQ CX, DI
	CMPQ DI, $2048
	JBE  pfstart
	MOVQ $2048, DI
pfstart:
	XORL R8, R8
pfloop:
	PREFETCHT0 (SI)(R8*1)
	ADDQ       $64, R8
	CMPQ       R8, DI
	JB         pfloop

	CMPB wide+32(FP), $0
	JEQ  narrow
	CMPQ CX, $256
	JB   narrow

	// Four YMM lanes, 128 octets a round; the initial register is xored
	// into the first 4 octets (VMOVD zeroes the rest of Y15).
	VMOVD   AX, X15
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VPXOR   Y15, Y0, Y0
	ADDQ    $128, SI
	SUBQ    $128, CX
	VBROADCASTI128 ·foldK+80(SB), Y12 // x^1024

wloop:
	CMPQ CX, $128
	JB   wreduce
	PREFETCHT0 2048(SI)
	PREFETCHT0 2112(SI)
	VPCLMULQDQ $0x00, Y12, Y0, Y4
	VPCLMULQDQ $0x11, Y12, Y0, Y0
	VPCLMULQDQ $0x00, Y12, Y1, Y5
	VPCLMULQDQ $0x11, Y12, Y1, Y1
	VPCLMULQDQ $0x00, Y12, Y2, Y6
	VPCLMULQDQ $0x11, Y12, Y2, Y2
	VPCLMULQDQ $0x00, Y12, Y3, Y7
	VPCLMULQDQ $0x11, Y12, Y3, Y3
	VPXOR 0(SI), Y4, Y4
	VPXOR 32(SI), Y5, Y5
	VPXOR 64(SI), Y6, Y6
	VPXOR 96(SI), Y7, Y7
	VPXOR Y4, Y0, Y0
	VPXOR Y5, Y1, Y1
	VPXOR Y6, Y2, Y2
	VPXOR Y7, Y3, Y3
	ADDQ $128, SI
	SUBQ $128, CX
	JMP  wloop

wreduce:
	// Y0·x^768 + Y1·x^512 + Y2·x^256 + Y3, into Y3.
	VBROADCASTI128 ·foldK+64(SB), Y12 // x^768
	FOLD32(Y12, Y0, Y4, Y3)
	VBROADCASTI128 ·foldK+48(SB), Y13 // x^512
	FOLD32(Y13, Y1, Y5, Y3)
	VBROADCASTI128 ·foldK+16(SB), Y14 // x^256
	FOLD32(Y14, Y2, Y6, Y3)
wloop1:
	CMPQ CX, $32
	JB   wlast
	VPCLMULQDQ $0x00, Y14, Y3, Y4
	VPCLMULQDQ $0x11, Y14, Y3, Y3
	VPXOR (SI), Y4, Y4
	VPXOR Y4, Y3, Y3
	ADDQ $32, SI
	SUBQ $32, CX
	JMP  wloop1

wlast:
	// Y3 = A·x^128 + B with A its low half.
	VEXTRACTI128 $1, Y3, X1
	VMOVDQU      ·foldK+0(SB), X12 // x^128
	VPCLMULQDQ   $0x00, X12, X3, X4
	VPCLMULQDQ   $0x11, X12, X3, X3
	VPXOR        X4, X3, X3
	VPXOR        X1, X3, X0
	VZEROUPPER
	JMP          single

narrow:
	// Four XMM lanes, 64 octets a round.
	MOVL  AX, X15
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	PXOR  X15, X0
	ADDQ  $64, SI
	SUBQ  $64, CX
	MOVOU ·foldK+48(SB), X12 // x^512
nloop:
	CMPQ CX, $64
	JB   nreduce
	MOVOU 0(SI), X8
	MOVOU 16(SI), X9
	MOVOU 32(SI), X10
	MOVOU 48(SI), X11
	FOLD16(X12, X0, X4, X8)
	FOLD16(X12, X1, X5, X9)
	FOLD16(X12, X2, X6, X10)
	FOLD16(X12, X3, X7, X11)
	MOVOA X8, X0
	MOVOA X9, X1
	MOVOA X10, X2
	MOVOA X11, X3
	ADDQ  $64, SI
	SUBQ  $64, CX
	JMP   nloop

nreduce:
	// X0·x^384 + X1·x^256 + X2·x^128 + X3, into X0.
	MOVOU ·foldK+32(SB), X13 // x^384
	FOLD16(X13, X0, X4, X3)
	MOVOU ·foldK+16(SB), X14 // x^256
	FOLD16(X14, X1, X5, X3)
	MOVOU ·foldK+0(SB), X12  // x^128
	FOLD16(X12, X2, X6, X3)
	MOVOA X3, X0

single:
	// One lane, 16 octets at a time; X12 holds x^128.
	CMPQ  CX, $16
	JB    finish
	MOVOU (SI), X8
	FOLD16(X12, X0, X4, X8)
	MOVOA X8, X0
	ADDQ  $16, SI
	SUBQ  $16, CX
	JMP   single

finish:
	// The CRC of the 16-octet remainder followed by the tail (under 16
	// octets), from a zero register.
	XORL   DX, DX
	MOVQ   X0, AX
	CRC32Q AX, DX
	PEXTRQ $1, X0, AX
	CRC32Q AX, DX
	CMPQ   CX, $8
	JB     ftail4
	CRC32Q (SI), DX
	ADDQ   $8, SI
	SUBQ   $8, CX
ftail4:
	CMPQ   CX, $4
	JB     ftail2
	CRC32L (SI), DX
	ADDQ   $4, SI
	SUBQ   $4, CX
ftail2:
	CMPQ   CX, $2
	JB     ftail1
	CRC32W (SI), DX
	ADDQ   $2, SI
	SUBQ   $2, CX
ftail1:
	TESTQ  CX, CX
	JZ     fdone
	CRC32B (SI), DX
fdone:
	NOTL DX
	MOVL DX, ret+40(FP)
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET
