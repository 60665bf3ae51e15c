package plugins

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
)

// specialF32 are values where an emulated FMA, a bf16 rounding or the
// momentum update can go wrong.
var specialF32 = []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
	math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 1.1754942e-38, 1 + 1.0/(1<<23),
	1 - 1.0/(1<<24), 3.3895314e38, 0.1, 1e-30, 1e30, 65504, 1.0 / 3}

func adversarial(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch r.IntN(4) {
		case 0:
			v[i] = specialF32[r.IntN(len(specialF32))]
		case 1:
			v[i] = math.Float32frombits(r.Uint32()) // any bit pattern
		case 2: // near a bf16 rounding tie
			v[i] = math.Float32frombits(r.Uint32()&0xffff0000 | 0x8000 | r.Uint32()&1)
		default:
			v[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(8)-4)))
		}
	}
	return v
}

// TestNativeOuterMatchesWasm: the native outer step gives the Wasm
// module's bytes (NaN canonicalised, as every outer step's) and fuel, for
// both element types, with and without momentum and nesterov, on
// adversarial values and many sizes, whole and chunked (a small page
// limit); and it does run.
func TestNativeOuterMatchesWasm(t *testing.T) {
	ctx := context.Background()
	engine := func(cfg Config) *Engine { return newEngine(t, cfg) }
	pairs := []struct {
		native, wasm *Engine
		sizes        []int
	}{
		{testEngine(t), engine(Config{WasmOuter: true}), []int{1, 2, 3, 7, 16, 17, 1023, 1024, 1025, 4099, 70001}},
		{engine(Config{MemoryPages: 64}), engine(Config{MemoryPages: 64, WasmOuter: true}), []int{300007}},
	}
	if testing.Short() {
		pairs[0].sizes = pairs[0].sizes[:9]
	}
	r := rand.New(rand.NewPCG(5, 6))
	ran := nativeSteps.Load()
	params := [][2]float32{{0.7, 0.9}, {1, 0}, {0, 0.5}, {-0.3, 0.99}, {1e-3, 1}, {float32(math.Inf(1)), 0.9}, {0.7, float32(math.NaN())}}
	cases := 0
	for _, pr := range pairs {
		outer, _ := pr.native.ResolveOuter(ctx)
		for _, n := range pr.sizes {
			for _, d := range []machine.Dtype{machine.F32, machine.BF16} {
				for _, has := range []bool{false, true} {
					for _, nest := range []bool{false, true} {
						cases++
						lp := params[cases%len(params)]
						in := syncer.OuterStepInput{Rule: outer, Dtype: d, N: n, Weights: syncer.EncodeValues(d, adversarial(r, n)),
							Aggregate: syncer.EncodeF32(adversarial(r, n)), LR: lp[0], Beta: lp[1], Nesterov: nest}
						if has {
							in.Momentum = syncer.EncodeF32(adversarial(r, n))
						}
						if cases%5 == 0 { // an aggregate that does not start at a multiple of 4
							b := make([]byte, len(in.Aggregate)+1)
							in.Aggregate = b[1:]
							copy(in.Aggregate, syncer.EncodeF32(adversarial(r, n)))
						}
						want, err := pr.wasm.OuterStep(ctx, in)
						if err != nil {
							t.Fatal(err)
						}
						got, err := pr.native.OuterStep(ctx, in)
						if err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(got.Weights, want.Weights) || !bytes.Equal(got.Momentum, want.Momentum) || got.Fuel != want.Fuel {
							t.Fatalf("n=%d %s momentum=%v nesterov=%v lr=%v beta=%v: native differs: fuel %d, Wasm %d; weights %s; momentum %s",
								n, d, has, nest, lp[0], lp[1], got.Fuel, want.Fuel, firstDiff(got.Weights, want.Weights, d.Size()), firstDiff(got.Momentum, want.Momentum, 4))
						}
					}
				}
			}
		}
	}
	if nativeSteps.Load() == ran {
		t.Fatal("the native outer step never ran")
	}
}

// TestNativeOuterBudget: with a budget one short of the step's fuel the
// module runs and fails as it always did; with exactly the fuel it
// succeeds natively.
func TestNativeOuterBudget(t *testing.T) {
	ctx := context.Background()
	const n = 5000
	in := syncer.OuterStepInput{Dtype: machine.F32, N: n, Weights: syncer.EncodeF32(make([]float32, n)), Aggregate: syncer.EncodeF32(make([]float32, n)),
		LR: 0.7, Beta: 0.9, Nesterov: true}
	ref := testEngine(t)
	in.Rule, _ = ref.ResolveOuter(ctx)
	full, err := ref.OuterStep(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, fuel := range []uint64{full.Fuel, full.Fuel - 1} {
		for _, wasmOuter := range []bool{false, true} {
			e, err := NewEngine(ctx, Config{Fuel: fuel, WasmOuter: wasmOuter})
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.OuterStep(ctx, in)
			_ = e.Close(ctx)
			if fuel == full.Fuel {
				if err != nil || got.Fuel != full.Fuel || !bytes.Equal(got.Weights, full.Weights) {
					t.Fatalf("budget = fuel (wasm %v): %v", wasmOuter, err)
				}
				continue
			}
			wantFailure(t, err, CodeOutOfFuel, "out of fuel")
		}
	}
}

func firstDiff(a, b []byte, size int) string {
	for i := 0; i+size <= len(a) && i+size <= len(b); i += size {
		if !bytes.Equal(a[i:i+size], b[i:i+size]) {
			return fmt.Sprintf("first difference at value %d: %x vs %x", i/size, a[i:i+size], b[i:i+size])
		}
	}
	return "equal"
}

// TestFMA32Fast: the hardware-FMA fma32 is syncer.FMA32 (itself checked
// against exact arithmetic in package syncer) on random, special and
// midpoint-hitting operands.
func TestFMA32Fast(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	check := func(a, b, c float32) {
		got, want := fma32(a, b, c), syncer.FMA32(a, b, c)
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("fma32(%g, %g, %g) = %g (%#x), FMA32 %g (%#x)", a, b, c, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
	for _, a := range specialF32 {
		for _, b := range specialF32 {
			for _, c := range specialF32 {
				check(a, b, c)
			}
		}
	}
	n := 2_000_000
	if testing.Short() {
		n = 200_000
	}
	for i := 0; i < n; i++ {
		a, b := adversarial(r, 2)[0], float32(r.NormFloat64())
		var c float32
		switch i % 4 {
		case 0:
			c = adversarial(r, 1)[0]
		case 1: // a product whose f64 sum with c lands on an f32 midpoint
			p := float64(a) * float64(b)
			m := float64(float32(p))
			half := math.Abs(float64(math.Nextafter32(float32(m), float32(math.Inf(1))))-m) / 2
			c = float32(m + half - p)
		case 2:
			c = -float32(float64(a) * float64(b))
		default:
			c = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(60)-30)))
		}
		check(a, b, c)
		check(math.Float32frombits(r.Uint32()), math.Float32frombits(r.Uint32()), math.Float32frombits(r.Uint32()))
	}
}
