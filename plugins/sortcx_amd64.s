#include "textflag.h"

// func cxAVX2(a, b *int32, n int)
// For i in [0, n) (n a multiple of 8): a[i], b[i] = min, max (signed).
TEXT ·cxAVX2(SB), NOSPLIT, $0-24
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   done

loop:
	VMOVDQU (SI), Y0
	VMOVDQU (DI), Y1
	VPMINSD Y1, Y0, Y2
	VPMAXSD Y1, Y0, Y3
	VMOVDQU Y2, (SI)
	VMOVDQU Y3, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     loop

done:
	VZEROUPPER
	RET
