//go:build !amd64

package plugins

// No assembly here: the Go kernels run (variables, as on amd64, so that
// tests can name them).
var (
	haveMeanAVX2 = false
	haveStepAVX2 = false
)

func meanBlock(in [][]float32, b0, b1 int, out []float32) { meanBlockGo(in, b0, b1, out) }

func stepF32(w, wIn, m, mIn, g []float32, has bool, lr, beta float32, nesterov bool) int { return 0 }
