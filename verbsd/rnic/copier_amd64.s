#include "textflag.h"

// The copier thread's atomics (rnic/copier_thread.go). It runs without a P
// (in the scheduler's syscall state), where neither the race detector's
// sync/atomic nor any function that may grow the stack can be called.

// func procLoad(p *uint32) uint32
TEXT ·procLoad(SB),NOSPLIT,$0-12
	MOVQ	p+0(FP), AX
	MOVL	(AX), AX
	MOVL	AX, ret+8(FP)
	RET

// func procStore(p *uint32, v uint32): sequentially consistent (XCHG).
TEXT ·procStore(SB),NOSPLIT,$0-12
	MOVQ	p+0(FP), BX
	MOVL	v+8(FP), AX
	XCHGL	AX, 0(BX)
	RET

// func procPause()
TEXT ·procPause(SB),NOSPLIT,$0-0
	PAUSE
	RET
