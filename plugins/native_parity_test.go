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
