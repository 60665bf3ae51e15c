#include "textflag.h"

// func meanAVX2(out *float32, ins **float32, k, n int, kk float64)
// out[j] = float32((+0 + ins[0][j] + … + ins[k-1][j]) / kk), each sum in f64
// in input order, NaN written canonical; n a multiple of 16, k ≥ 1.
TEXT ·meanAVX2(SB), NOSPLIT, $0-40
	MOVQ         out+0(FP), DI
	MOVQ         ins+8(FP), SI
	MOVQ         k+16(FP), R8
	MOVQ         n+24(FP), CX
	VBROADCASTSD kk+32(FP), Y8
	SHRQ         $4, CX
	JZ           mdone
	MOVL         $0x7fc00000, AX
	MOVQ         AX, X9
	VPBROADCASTD X9, Y9
	XORQ         R9, R9 // byte offset of this step in every input

mloop:
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	XORQ   R10, R10

minner:
	MOVQ      (SI)(R10*8), R11
	ADDQ      R9, R11
	VCVTPS2PD (R11), Y4
	VCVTPS2PD 16(R11), Y5
	VCVTPS2PD 32(R11), Y6
	VCVTPS2PD 48(R11), Y7
	VADDPD    Y4, Y0, Y0
	VADDPD    Y5, Y1, Y1
	VADDPD    Y6, Y2, Y2
	VADDPD    Y7, Y3, Y3
	INCQ      R10
	CMPQ      R10, R8
	JNE       minner

	VDIVPD      Y8, Y0, Y0
	VDIVPD      Y8, Y1, Y1
	VDIVPD      Y8, Y2, Y2
	VDIVPD      Y8, Y3, Y3
	VCVTPD2PSY  Y0, X0
	VCVTPD2PSY  Y1, X1
	VCVTPD2PSY  Y2, X2
	VCVTPD2PSY  Y3, X3
	VINSERTF128 $1, X1, Y0, Y0
	VINSERTF128 $1, X3, Y2, Y2
	VCMPPS      $3, Y0, Y0, Y10
	VBLENDVPS   Y10, Y9, Y0, Y0
	VCMPPS      $3, Y2, Y2, Y11
	VBLENDVPS   Y11, Y9, Y2, Y2
	VMOVUPS     Y0, (DI)
	VMOVUPS     Y2, 32(DI)
	ADDQ        $64, R9
	ADDQ        $64, DI
	DECQ        CX
	JNZ         mloop

mdone:
	VZEROUPPER
	RET

// func nesterovAVX2(w, wIn, m, mIn, grad *float32, n int, lr, beta float32, flags int)
// tenzro_outer_step on F32 weights, 8 coordinates at a time (n a multiple
// of 8): flags bit 0 = momentum present, bit 1 = Nesterov.
//   buf = has ? f32(mIn·beta) + g : g            (two roundings, as nesterov.c)
//   m   = buf, NaN canonical
//   d   = nesterov ? fma(buf, beta, g) : buf     (one rounding: VFMADD)
//   w   = fma(d, −lr, wIn), NaN canonical        (one rounding: VFMADD)
TEXT ·nesterovAVX2(SB), NOSPLIT, $0-64
	MOVQ         w+0(FP), DI
	MOVQ         wIn+8(FP), SI
	MOVQ         m+16(FP), R8
	MOVQ         mIn+24(FP), R9
	MOVQ         grad+32(FP), R10
	MOVQ         n+40(FP), CX
	MOVQ         flags+56(FP), R11
	VBROADCASTSS beta+52(FP), Y8
	MOVL         lr+48(FP), AX
	XORL         $0x80000000, AX
	MOVQ         AX, X9
	VBROADCASTSS X9, Y9
	MOVL         $0x7fc00000, AX
	MOVQ         AX, X10
	VPBROADCASTD X10, Y10
	SHRQ         $3, CX
	JZ           ndone
	XORQ         DX, DX // byte offset

nloop:
	VMOVUPS (R10)(DX*1), Y0
	TESTQ   $1, R11
	JZ      nohas
	VMULPS  (R9)(DX*1), Y8, Y1
	VADDPS  Y0, Y1, Y1
	JMP     hasdone

nohas:
	VMOVAPS Y0, Y1

hasdone:
	VCMPPS    $3, Y1, Y1, Y2
	VBLENDVPS Y2, Y10, Y1, Y3
	VMOVUPS   Y3, (R8)(DX*1)
	TESTQ     $2, R11
	JZ        nonest
	VFMADD231PS Y8, Y1, Y0
	JMP       nestdone

nonest:
	VMOVAPS Y1, Y0

nestdone:
	VMOVUPS     (SI)(DX*1), Y4
	VFMADD231PS Y9, Y0, Y4
	VCMPPS      $3, Y4, Y4, Y2
	VBLENDVPS   Y2, Y10, Y4, Y4
	VMOVUPS     Y4, (DI)(DX*1)
	ADDQ        $32, DX
	DECQ        CX
	JNZ         nloop

ndone:
	VZEROUPPER
	RET
