package plugins

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
)

// TestNativeMeanMatchesWasm: the native Mean gives the Wasm module's
// aggregate (NaN canonicalised, as every aggregate's), selection, scores
// and fuel, for many K and sizes (every remainder mod 16 and mod 4), on
// adversarial values and inputs that sum −0, whole and chunked (a small
// page limit); and it does run.
func TestNativeMeanMatchesWasm(t *testing.T) {
	ctx := context.Background()
	engine := func(cfg Config) *Engine { return newEngine(t, cfg) }
	pairs := []struct {
		native, wasm *Engine
		ks, sizes    []int
	}{
		{testEngine(t), engine(Config{WasmMean: true}), []int{1, 2, 3, 6, 16}, []int{1, 2, 3, 4, 5, 7, 8, 12, 15, 16, 17, 19, 33, 1023, 1024, 1025, 4099, 70001}},
		{engine(Config{MemoryPages: 64}), engine(Config{MemoryPages: 64, WasmMean: true}), []int{6}, []int{300007}},
	}
	if testing.Short() {
		pairs[0].sizes = pairs[0].sizes[:14]
	}
	r := rand.New(rand.NewPCG(7, 8))
	ran := nativeMeans.Load()
	negZero := float32(math.Copysign(0, -1))
	for _, pr := range pairs {
		rule, err := pr.native.ResolveRule(ctx, "Mean", nil, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range pr.ks {
			for _, n := range pr.sizes {
				in := syncer.AggregateInput{Rule: rule, Dtype: machine.F32, N: n, Inputs: make([][]byte, k)}
				for i := range in.Inputs {
					v := adversarial(r, n)
					if n > 3 {
						v[0], v[1] = negZero, 0 // −0 alone, and −0 beside +0
						v[2] = float32(math.MaxFloat32)
					}
					if i == 0 && n > 3 {
						v[1] = negZero
					}
					in.Inputs[i] = syncer.EncodeF32(v)
				}
				want, err := pr.wasm.Aggregate(ctx, in)
				if err != nil {
					t.Fatal(err)
				}
				got, err := pr.native.Aggregate(ctx, in)
				if err != nil {
					t.Fatal(err)
				}
				if l, ok := pr.native.nativeMean(ctx, mustPlugin(t, pr.native, rule), machine.F32, k); !ok || !l.measured {
					t.Fatalf("K=%d: the native Mean's fuel line was not found", k)
				}
				if !bytes.Equal(got.Aggregate, want.Aggregate) || got.Fuel != want.Fuel || !reflect.DeepEqual(got.Selected, want.Selected) ||
					!reflect.DeepEqual(got.Scores, want.Scores) {
					t.Fatalf("K=%d n=%d: native differs: fuel %d, Wasm %d; selected %v, %v; aggregate %s", k, n, got.Fuel, want.Fuel,
						got.Selected, want.Selected, firstDiff(got.Aggregate, want.Aggregate, 4))
				}
			}
		}
	}
	if nativeMeans.Load() == ran {
		t.Fatal("the native Mean never ran")
	}
}

// TestNativeMeanBudget: with a budget one short of the aggregation's fuel
// the module runs and fails as it always did; with exactly the fuel it
// succeeds natively.
func TestNativeMeanBudget(t *testing.T) {
	nativeBudget(t, "Mean", 5003, 4, 10, &nativeMeans, func(fuel uint64, wasm bool) Config { return Config{Fuel: fuel, WasmMean: wasm} })
}

// nativeBudget checks a native rule against the budget: with exactly the
// module's fuel for k adversarial inputs of n values it runs natively (or
// in the module when cfg forces the Wasm) with the module's bytes and fuel;
// one fuel short, both fail out of fuel as the module does. ran counts the
// rule's native runs.
func nativeBudget(t *testing.T, ruleRef string, n, k int, seed uint64, ran *atomic.Int64, cfg func(fuel uint64, wasm bool) Config) {
	t.Helper()
	ctx := context.Background()
	ref := testEngine(t)
	rule, err := ref.ResolveRule(ctx, ruleRef, nil, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, seed))
	in := syncer.AggregateInput{Rule: rule, Dtype: machine.F32, N: n}
	for range k {
		in.Inputs = append(in.Inputs, syncer.EncodeF32(adversarial(r, n)))
	}
	full, err := ref.Aggregate(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, fuel := range []uint64{full.Fuel, full.Fuel - 1} {
		for _, wasm := range []bool{false, true} {
			e, err := NewEngine(ctx, cfg(fuel, wasm))
			if err != nil {
				t.Fatal(err)
			}
			before := ran.Load()
			got, err := e.Aggregate(ctx, in)
			native := ran.Load() > before
			_ = e.Close(ctx)
			if fuel == full.Fuel {
				if err != nil || got.Fuel != full.Fuel || !bytes.Equal(got.Aggregate, full.Aggregate) || native == wasm {
					t.Fatalf("%s, budget = fuel (wasm %v, native ran %v): %v", ruleRef, wasm, native, err)
				}
				continue
			}
			wantFailure(t, err, CodeOutOfFuel, "out of fuel")
		}
	}
}

// TestFinalizeMappedInputs: a finalize whose inputs, weights and momentum
// are stored files (as a node's blob store holds them) gives the same
// result, byte for byte and fuel for fuel, with the native Mean and outer
// step reading the mapped files in place as with the Wasm's, in process and
// in a worker: both element types, with and without momentum, values at
// offsets of every alignment.
func TestFinalizeMappedInputs(t *testing.T) {
	ctx := context.Background()
	const n, k = 70001, 6
	r := rand.New(rand.NewPCG(11, 12))
	dir := t.TempDir()
	files := 0
	write := func(pre int, b []byte) string {
		files++
		p := filepath.Join(dir, fmt.Sprintf("f%d", files))
		if err := os.WriteFile(p, append(make([]byte, pre), b...), 0o444); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ref := testEngine(t)
	rule, err := ref.ResolveRule(ctx, "Mean", nil, k, k)
	if err != nil {
		t.Fatal(err)
	}
	outer, _ := ref.ResolveOuter(ctx)
	wasm, err := NewEngine(ctx, Config{WasmMean: true, WasmOuter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer wasm.Close(ctx)
	for _, d := range []machine.Dtype{machine.F32, machine.BF16} {
		for _, has := range []bool{true, false} {
			es := int64(d.Size())
			in := syncer.FinalizeInput{Rule: rule, Outer: outer, Dtype: d, N: n, Quorum: k, LR: 0.7, Beta: 0.9, Nesterov: true}
			for i := range k {
				// the values start at a different offset in every file,
				// one not a multiple of 4 without momentum (the Wasm Mean
				// then reads them)
				pre := 8 + 4*i
				if !has && i == 0 {
					pre = 10
				}
				p := write(pre, syncer.EncodeValues(d, adversarial(r, n)))
				in.Inputs = append(in.Inputs, syncer.FileValues(p, syncer.ByteRange{Off: int64(pre), Len: es * n}))
			}
			wPre := 2 * (files % 3) // weights at an offset of 0, 2 or 4
			in.Weights = syncer.FileValues(write(wPre, syncer.EncodeValues(d, adversarial(r, n))), syncer.ByteRange{Off: int64(wPre), Len: es * n})
			if has {
				m := syncer.FileValues(write(0, syncer.EncodeF32(adversarial(r, n))), syncer.ByteRange{Len: 4 * n})
				in.Momentum = &m
			}
			want, err := wasm.Finalize(ctx, in)
			if err != nil || want.Status != "aggregated" {
				t.Fatalf("%v %+v", err, want.Status)
			}
			for name, e := range map[string]*Engine{"in process": ref, "worker": sharedWorkerEngine(t)} {
				ran, stepped := nativeMeans.Load(), nativeSteps.Load()
				got, err := e.Finalize(ctx, in)
				if err != nil {
					t.Fatal(err)
				}
				if got.AggregateHash != want.AggregateHash || got.Fuel != want.Fuel || !bytes.Equal(got.Weights, want.Weights) ||
					!bytes.Equal(got.Momentum, want.Momentum) || !reflect.DeepEqual(got.Selected, want.Selected) {
					t.Fatalf("%s %s momentum %v: finalize differs from the Wasm's: fuel %d vs %d; weights %s", name, d, has, got.Fuel, want.Fuel,
						firstDiff(got.Weights, want.Weights, d.Size()))
				}
				if name == "in process" && (d == machine.F32 && has && nativeMeans.Load() == ran || nativeSteps.Load() == stepped) {
					t.Fatalf("%s %s: the native Mean or outer step did not run on the mapped files", name, d)
				}
			}
		}
	}
}

func mustPlugin(t *testing.T, e *Engine, ref syncer.RuleRef) *plugin {
	t.Helper()
	p, err := e.pluginFor(context.Background(), ref, KindAggregate)
	if err != nil {
		t.Fatal(err)
	}
	e.release(p)
	return p
}
