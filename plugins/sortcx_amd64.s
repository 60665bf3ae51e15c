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

// func keysAVX2(dst *int32, src *float32, n int)
// dst[i] = the sort key of src[i] (NaN made canonical), n a multiple of 8.
TEXT ·keysAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   kdone
	MOVL $0x7fffffff, AX
	MOVQ AX, X6
	VPBROADCASTD X6, Y6
	MOVL $0x7fc00000, AX
	MOVQ AX, X7
	VPBROADCASTD X7, Y7

kloop:
	VMOVUPS   (SI), Y0
	VCMPPS    $3, Y0, Y0, Y1
	VBLENDVPS Y1, Y7, Y0, Y0
	VPSRAD    $31, Y0, Y1
	VPAND     Y6, Y1, Y1
	VPXOR     Y1, Y0, Y0
	VMOVDQU   Y0, (DI)
	ADDQ      $32, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       kloop

kdone:
	VZEROUPPER
	RET

// func addKeysAVX2(s *float64, keys *int32, n int)
// s[i] += float64(the f32 whose key is keys[i]), n a multiple of 4.
TEXT ·addKeysAVX2(SB), NOSPLIT, $0-24
	MOVQ s+0(FP), DI
	MOVQ keys+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $2, CX
	JZ   adone
	MOVL $0x7fffffff, AX
	MOVQ AX, X6
	VPBROADCASTD X6, X6

aloop:
	VMOVDQU   (SI), X0
	VPSRAD    $31, X0, X1
	VPAND     X6, X1, X1
	VPXOR     X1, X0, X0
	VCVTPS2PD X0, Y0
	VADDPD    (DI), Y0, Y0
	VMOVUPD   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       aloop

adone:
	VZEROUPPER
	RET

// func finishAVX2(out *float32, s *float64, cnt float64, n int)
// out[i] = float32(s[i] / cnt), NaN written canonical, n a multiple of 4.
TEXT ·finishAVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ s+8(FP), SI
	VBROADCASTSD cnt+16(FP), Y5
	MOVQ n+24(FP), CX
	SHRQ $2, CX
	JZ   fdone
	MOVL $0x7fc00000, AX
	MOVQ AX, X7
	VPBROADCASTD X7, X7

floop:
	VMOVUPD    (SI), Y0
	VDIVPD     Y5, Y0, Y0
	VCVTPD2PSY Y0, X0
	VCMPPS     $3, X0, X0, X1
	VBLENDVPS  X1, X7, X0, X0
	VMOVUPS    X0, (DI)
	ADDQ       $32, SI
	ADDQ       $16, DI
	DECQ       CX
	JNZ        floop

fdone:
	VZEROUPPER
	RET
