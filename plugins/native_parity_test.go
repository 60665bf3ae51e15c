package plugins_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
)

// TestNativeEngineMatchesPlugins proves the native engine (the fallback
// behind --engine native) bit-identical to the Wasm built-ins for the outer
// step and Mean, so the two can only differ in the hashes they record.
func TestNativeEngineMatchesPlugins(t *testing.T) {
	ctx := context.Background()
	pe, err := plugins.NewEngine(ctx, plugins.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer pe.Close(ctx)
	ne := syncer.NewNativeEngine()
	r := rand.New(rand.NewPCG(7, 11))
	const n, k = 4099, 6
	vals := func(scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * scale)
		}
		return v
	}
	inputs := make([][]byte, k)
	for i := range inputs {
		inputs[i] = syncer.EncodeF32(vals(1e-2))
	}
	prule, err := pe.ResolveRule(ctx, "Mean", nil, k, 8)
	if err != nil {
		t.Fatal(err)
	}
	nrule, _ := ne.ResolveRule(ctx, "Mean", nil, k, 8)
	pa, err := pe.Aggregate(ctx, syncer.AggregateInput{Rule: prule, Dtype: machine.F32, N: n, Inputs: inputs})
	if err != nil {
		t.Fatal(err)
	}
	na, err := ne.Aggregate(ctx, syncer.AggregateInput{Rule: nrule, Dtype: machine.F32, N: n, Inputs: inputs})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pa.Aggregate, na.Aggregate) {
		t.Errorf("Mean: native and Wasm aggregates differ")
	}
	pouter, _ := pe.ResolveOuter(ctx)
	nouter, _ := ne.ResolveOuter(ctx)
	for _, dt := range []machine.Dtype{machine.F32, machine.BF16} {
		w := syncer.EncodeValues(dt, vals(1))
		var pm, nm []byte
		pw, nw := w, w
		for step := 0; step < 4; step++ {
			g := syncer.EncodeF32(vals(1e-2))
			ps, err := pe.OuterStep(ctx, syncer.OuterStepInput{Rule: pouter, Dtype: dt, N: n, Weights: pw, Momentum: pm, Aggregate: g, LR: 0.7, Beta: 0.9, Nesterov: true})
			if err != nil {
				t.Fatal(err)
			}
			ns, err := ne.OuterStep(ctx, syncer.OuterStepInput{Rule: nouter, Dtype: dt, N: n, Weights: nw, Momentum: nm, Aggregate: g, LR: 0.7, Beta: 0.9, Nesterov: true})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ps.Weights, ns.Weights) || !bytes.Equal(ps.Momentum, ns.Momentum) {
				t.Fatalf("%s step %d: native and Wasm outer steps differ", dt, step)
			}
			pw, pm, nw, nm = ps.Weights, ps.Momentum, ns.Weights, ns.Momentum
		}
	}
}

// TestNativeFiniteMatchesPlugin: the node runs the mandatory Finite rule
// in-process on the mapped payload (syncer's finiteScan, behind
// NativeEngine.Verify) instead of its Wasm module, so the two must give the
// same verdict, code and reason for every input: finite values, each
// non-finite class (±Inf, quiet and signalling NaN, a NaN payload) at the
// first, a middle, the SIMD tail's and the last position, F32 and BF16.
func TestNativeFiniteMatchesPlugin(t *testing.T) {
	ctx := context.Background()
	pe, err := plugins.NewEngine(ctx, plugins.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer pe.Close(ctx)
	ne := syncer.NewNativeEngine()
	pref, err := pe.ResolveVerifier(ctx, machine.FiniteVerifier)
	if err != nil {
		t.Fatal(err)
	}
	nref, _ := ne.ResolveVerifier(ctx, machine.FiniteVerifier)
	r := rand.New(rand.NewPCG(3, 5))
	const n = 1027 // not a multiple of 4: the Wasm module's scalar tail runs
	bits32 := []uint32{0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffffffff, 0x7f7fffff /* max finite */}
	bits16 := []uint16{0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff, 0x7f7f /* max finite */}
	for _, dt := range []machine.Dtype{machine.F32, machine.BF16} {
		for _, pos := range []int{-1, 0, n / 2, n - 3, n - 1} {
			for c := range bits32 {
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(r.NormFloat64())
				}
				b := syncer.EncodeValues(dt, v)
				if pos >= 0 {
					if dt == machine.F32 {
						b[4*pos], b[4*pos+1], b[4*pos+2], b[4*pos+3] = byte(bits32[c]), byte(bits32[c]>>8), byte(bits32[c]>>16), byte(bits32[c]>>24)
					} else {
						b[2*pos], b[2*pos+1] = byte(bits16[c]), byte(bits16[c]>>8)
					}
				}
				po, err := pe.Verify(ctx, syncer.VerifyInput{Verifier: pref, Dtype: dt, N: n, Input: b})
				if err != nil {
					t.Fatal(err)
				}
				no, err := ne.Verify(ctx, syncer.VerifyInput{Verifier: nref, Dtype: dt, N: n, Input: b})
				if err != nil {
					t.Fatal(err)
				}
				if po.Accept != no.Accept || po.Code != no.Code || po.Reason != no.Reason {
					t.Fatalf("%s, value %d set to class %d: Wasm %+v, in-process %+v", dt, pos, c, po, no)
				}
				if want := pos < 0 || c == len(bits32)-1; po.Accept != want {
					t.Fatalf("%s, value %d set to class %d: accept %v, want %v", dt, pos, c, po.Accept, want)
				}
			}
		}
	}
}
