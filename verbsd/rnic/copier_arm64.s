#include "textflag.h"

// The copier thread's atomics (rnic/copier_thread.go); see copier_amd64.s.

// func procLoad(p *uint32) uint32
TEXT ·procLoad(SB),NOSPLIT,$0-12
	MOVD	p+0(FP), R0
	LDARW	(R0), R0
	MOVW	R0, ret+8(FP)
	RET

// func procStore(p *uint32, v uint32): store-release; a later procLoad
// (load-acquire) is not reordered before it.
TEXT ·procStore(SB),NOSPLIT,$0-12
	MOVD	p+0(FP), R0
	MOVW	v+8(FP), R1
	STLRW	R1, (R0)
	RET

// func procPause()
TEXT ·procPause(SB),NOSPLIT,$0-0
	YIELD
	RET
