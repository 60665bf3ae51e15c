package plugins

import "golang.org/x/sys/cpu"

// meanAVX2 is meanBlockGo on n coordinates, n a multiple of 16
// (sweep_amd64.s).
//
//go:noescape
func meanAVX2(out *float32, ins **float32, k, n int, kk float64)

// nesterovAVX2 is the F32 outer step on n coordinates, n a multiple of 8
// (sweep_amd64.s); flags: 1 momentum present, 2 Nesterov.
//
//go:noescape
func nesterovAVX2(w, wIn, m, mIn, grad *float32, n int, lr, beta float32, flags int)

// haveMeanAVX2 and haveStepAVX2 turn the assembly on: the step's fused
// multiply-adds need FMA3, whose single rounding is the module's fma32.
var (
	haveMeanAVX2 = cpu.X86.HasAVX2
	haveStepAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA
)

// meanBlock sets out[j] to the Mean of in[i][b0+j] (len(out) = b1−b0).
func meanBlock(in [][]float32, b0, b1 int, out []float32) {
	if v := (b1 - b0) &^ 15; haveMeanAVX2 && v > 0 && len(in) <= MaxK {
		var ptrs [MaxK]*float32
		for i, x := range in {
			ptrs[i] = &x[b0]
		}
		meanAVX2(&out[0], &ptrs[0], len(in), v, float64(len(in)))
		b0, out = b0+v, out[v:]
	}
	meanBlockGo(in, b0, b1, out)
}

// stepF32 runs the F32 outer step on coordinates [0, len(g)) of its
// slices with the assembly where it can, and reports how many it did (a
// multiple of 8); nesterovRange does the rest.
func stepF32(w, wIn, m, mIn, g []float32, has bool, lr, beta float32, nesterov bool) int {
	v := len(g) &^ 7
	if !haveStepAVX2 || v == 0 {
		return 0
	}
	_, _, _ = w[v-1], wIn[v-1], m[v-1]
	flags := 0
	var mi *float32
	if has {
		_ = mIn[v-1]
		flags, mi = 1, &mIn[0]
	}
	if nesterov {
		flags |= 2
	}
	nesterovAVX2(&w[0], &wIn[0], &m[0], mi, &g[0], v, lr, beta, flags)
	return v
}
