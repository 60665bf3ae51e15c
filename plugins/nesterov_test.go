package plugins

import (
	"context"
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
)

// fmaf32 is the correctly rounded float32 fused multiply-add, computed
// exactly with big.Float and rounded once (to nearest even).
func fmaf32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

func randF32(r *rand.Rand) float32 {
	for {
		f := math.Float32frombits(r.Uint32())
		if !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) {
			return f
		}
	}
}

// TestFMAEmulation checks the guest's f32 FMA (TwoSum + round-to-odd in f64)
// against an exact reference on random and adversarial triples, and counts
// how often the naive float32(math.FMA(...)) double-rounds.
func TestFMAEmulation(t *testing.T) {
	e := testEngine(t)
	ctx := context.Background()
	rr, err := e.ResolveOuter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.lookup(ctx, rr.Hash)
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.newCall(ctx, p, e.cfg.Fuel, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close(ctx)
	r := rand.New(rand.NewPCG(7, 8))
	n := 60000
	if testing.Short() {
		n = 5000
	}
	naiveWrong := 0
	for i := 0; i < n; i++ {
		var a, b, cc float32
		switch i % 5 {
		case 4: // double-rounding traps: a*b lands on an f32 tie, c nudges it
			a = 1 + float32(r.IntN(1<<11)+1)*0x1p-12
			b = 1 + 0x1p-12
			cc = float32(math.Ldexp(1, -40-r.IntN(40))) * float32([]int{1, -1}[r.IntN(2)])
		case 0: // arbitrary bit patterns
			a, b, cc = randF32(r), randF32(r), randF32(r)
		case 1: // ordinary magnitudes
			a, b, cc = float32(r.NormFloat64()), float32(r.NormFloat64()), float32(r.NormFloat64())
		case 2: // near cancellation: c ~ -a*b
			a, b = float32(r.NormFloat64()), float32(r.NormFloat64())
			cc = -a*b + float32(r.NormFloat64())*1e-7
		default: // product bits straddling a half-ulp of c
			a = 1 + float32(r.IntN(1<<20))*0x1p-23
			b = 1 + float32(r.IntN(1<<20))*0x1p-23
			cc = float32(r.IntN(1<<24)) * 0x1p-24 * float32([]int{1, -1}[r.IntN(2)])
		}
		want := fmaf32(a, b, cc)
		res, err := c.invoke(ctx, "tenzro_fmaf", api.EncodeF32(a), api.EncodeF32(b), api.EncodeF32(cc))
		if err != nil {
			t.Fatal(err)
		}
		got := api.DecodeF32(res[0])
		if math.Float32bits(got) != math.Float32bits(want) && !(math.IsInf(float64(want), 0) && got == want) {
			t.Fatalf("fmaf(%g, %g, %g) = %g (%#x), want %g (%#x)", a, b, cc, got, math.Float32bits(got), want, math.Float32bits(want))
		}
		if float32(math.FMA(float64(a), float64(b), float64(cc))) != want {
			naiveWrong++
		}
	}
	t.Logf("%d triples exact; float32(math.FMA) double-rounded on %d of them", n, naiveWrong)
}

// goNesterov is the float32 reference of the outer step (PyTorch semantics).
func goNesterov(w, buf, g []float32, first bool, lr, beta float32) {
	for i := range w {
		if first {
			buf[i] = g[i]
		} else {
			buf[i] = buf[i]*beta + g[i]
		}
		d := fmaf32(buf[i], beta, g[i])
		w[i] = fmaf32(d, -lr, w[i])
	}
}

func outerSteps(t *testing.T, e *Engine, w []float32, grads [][]float32, lr, beta float32) ([]float32, []float32) {
	ctx := context.Background()
	rr, err := e.ResolveOuter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wb := f32s(w...)
	var mom []byte
	for _, g := range grads {
		out, err := e.OuterStep(ctx, syncer.OuterStepInput{Rule: rr, Dtype: machine.F32, N: len(w), Weights: wb, Momentum: mom,
			Aggregate: f32s(g...), LR: lr, Beta: beta, Nesterov: true})
		if err != nil {
			t.Fatal(err)
		}
		wb, mom = out.Weights, out.Momentum
	}
	return toF32(wb), toF32(mom)
}

func TestNesterovMatchesGoReference(t *testing.T) {
	e := testEngine(t)
	r := rand.New(rand.NewPCG(3, 4))
	const n, steps = 4099, 4
	w := randInputs(r, 1, n, 1)[0]
	grads := randInputs(r, steps, n, 0.01)
	gw, gm := outerSteps(t, e, w, grads, 0.7, 0.9)
	rw := append([]float32(nil), w...)
	rb := make([]float32, n)
	for s, g := range grads {
		goNesterov(rw, rb, g, s == 0, 0.7, 0.9)
	}
	for i := range rw {
		if math.Float32bits(rw[i]) != math.Float32bits(gw[i]) || math.Float32bits(rb[i]) != math.Float32bits(gm[i]) {
			t.Fatalf("coordinate %d: wasm w=%g m=%g, Go w=%g m=%g", i, gw[i], gm[i], rw[i], rb[i])
		}
	}
}

// TestNesterovMatchesPyTorch runs torch.optim.SGD(nesterov=True,
// momentum=0.9, lr=0.7) in float32 on the CPU and requires bit equality.
// It needs TENZRO_PYTHON (a python with torch; CI sets it).
func TestNesterovMatchesPyTorch(t *testing.T) {
	py := os.Getenv("TENZRO_PYTHON")
	if py == "" {
		t.Skip("TENZRO_PYTHON is unset: set it to a python with torch (scripts/venv.sh prints the venv) to compare with PyTorch")
	}
	e := testEngine(t)
	r := rand.New(rand.NewPCG(5, 6))
	const n, steps = 100003, 5 // odd size: the vector kernels' scalar tails run too
	w := randInputs(r, 1, n, 1)[0]
	grads := randInputs(r, steps, n, 0.05)
	dir := t.TempDir()
	writeRaw := func(name string, v []float32) {
		if err := os.WriteFile(filepath.Join(dir, name), f32s(v...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeRaw("w.bin", w)
	for s, g := range grads {
		writeRaw("g"+string(rune('0'+s))+".bin", g)
	}
	script := `
import sys, numpy as np, torch
d, n, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
w = torch.nn.Parameter(torch.from_numpy(np.fromfile(d + "/w.bin", dtype="<f4")))
opt = torch.optim.SGD([w], lr=0.7, momentum=0.9, nesterov=True)
for s in range(steps):
    w.grad = torch.from_numpy(np.fromfile(d + "/g%d.bin" % s, dtype="<f4"))
    opt.step()
w.detach().numpy().astype("<f4").tofile(d + "/w_out.bin")
opt.state[w]["momentum_buffer"].numpy().astype("<f4").tofile(d + "/m_out.bin")
print(torch.__version__, torch.backends.cpu.get_cpu_capability())
`
	cmd := exec.Command(py, "-c", script, dir, "100003", "5")
	outb, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, outb)
	}
	t.Logf("torch %s", strings.TrimSpace(string(outb)))
	readRaw := func(name string) []float32 {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[i*4:]))
		}
		return v
	}
	tw, tm := readRaw("w_out.bin"), readRaw("m_out.bin")
	gw, gm := outerSteps(t, e, w, grads, 0.7, 0.9)
	bad := 0
	for i := range tw {
		if math.Float32bits(tw[i]) != math.Float32bits(gw[i]) || math.Float32bits(tm[i]) != math.Float32bits(gm[i]) {
			if bad < 5 {
				t.Errorf("coordinate %d: wasm w=%g m=%g, torch w=%g m=%g", i, gw[i], gm[i], tw[i], tm[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d coordinates differ from PyTorch", bad, n)
	}
}
