package plugins

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
)

// TestMergeExchangeSorts: the native networks sort every 0-1 input (so
// every input: the 0-1 principle) for K from 2 to 16, with the module's
// compare-exchange counts (sortnet.h).
func TestMergeExchangeSorts(t *testing.T) {
	counts := map[int]int{2: 1, 3: 3, 4: 5, 5: 9, 6: 12, 7: 16, 8: 19, 9: 26, 10: 31, 16: 63}
	for k := 2; k <= 16; k++ {
		net := sortNets[k]
		if c, ok := counts[k]; ok && len(net) != c {
			t.Fatalf("K=%d: %d compare-exchanges, sortnet.h has %d", k, len(net), c)
		}
		v := make([]int, k)
		for m := 0; m < 1<<k; m++ {
			for i := range v {
				v[i] = m >> i & 1
			}
			for _, p := range net {
				if v[p[0]] > v[p[1]] {
					v[p[0]], v[p[1]] = v[p[1]], v[p[0]]
				}
			}
			if !slices.IsSorted(v) {
				t.Fatalf("K=%d: input %b not sorted: %v", k, m, v)
			}
		}
	}
}

// trimmedInputs returns k inputs of n values in one of several patterns
// chosen to break a data-dependent path: random bit patterns and specials,
// all NaN, ±0 only, ±Inf and NaN, subnormals, all equal, ties, sorted and
// reversed across inputs, and huge values whose f64 sum depends on order.
func trimmedInputs(r *rand.Rand, pattern, k, n int) [][]float32 {
	negZero := float32(math.Copysign(0, -1))
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	negNaN := math.Float32frombits(0xffc00001)
	in := make([][]float32, k)
	for i := range in {
		in[i] = make([]float32, n)
	}
	for c := range n {
		for i := range k {
			var v float32
			switch pattern {
			case 0:
				v = adversarial(r, 1)[0]
			case 1:
				v = []float32{nan, negNaN, math.Float32frombits(0x7f800001)}[r.IntN(3)]
			case 2:
				v = []float32{0, negZero}[r.IntN(2)]
			case 3:
				v = []float32{inf, -inf, nan, negZero, 1}[r.IntN(5)]
			case 4:
				v = math.Float32frombits(r.Uint32()&0x807fffff | 1)
			case 5:
				v = 1.5
			case 6:
				v = float32(r.IntN(3) - 1)
			case 7:
				v = float32(i) - 3.25
			case 8:
				v = float32(k-i) * 1e-3
			default:
				v = float32(r.NormFloat64()) * []float32{3e38, 1, 1e-30, 1e-45}[r.IntN(4)]
			}
			in[i][c] = v
		}
	}
	return in
}

// TestNativeTrimmedMatchesWasm: the native TrimmedMean gives the Wasm
// module's aggregate (NaN canonicalised), selection, scores and fuel for
// every K with a sorting network (3..16), several alpha (t from 0 to its
// most), sizes of every remainder mod 4 and 16, and adversarial values
// (fuel included: the module's fuel does not depend on the values), whole
// and chunked; and it does run.
func TestNativeTrimmedMatchesWasm(t *testing.T) {
	ctx := context.Background()
	engine := func(cfg Config) *Engine { return newEngine(t, cfg) }
	pairs := []struct {
		native, wasm *Engine
		ks, sizes    []int
		alphas       []string
	}{
		{testEngine(t), engine(Config{WasmTrimmedMean: true}), []int{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
			[]int{1, 2, 3, 4, 5, 7, 12, 17, 18, 19, 1025}, []string{"", "0", "1000", "2000", "2500", "3333", "4999"}},
		{engine(Config{MemoryPages: 64}), engine(Config{MemoryPages: 64, WasmTrimmedMean: true}), []int{6, 16}, []int{90007}, []string{"2000"}},
	}
	r := rand.New(rand.NewPCG(21, 2))
	ran := nativeTrims.Load()
	vector := haveCxAVX2
	defer func() { haveCxAVX2 = vector }()
	for run := range 2 {
		// the vector kernels where the CPU has them, then the Go ones
		haveCxAVX2 = vector && run == 0
		for _, pr := range pairs {
			testTrimmed(ctx, t, r, pr.native, pr.wasm, pr.ks, pr.sizes, pr.alphas)
		}
	}
	if nativeTrims.Load() == ran {
		t.Fatal("the native TrimmedMean never ran")
	}
}

// testTrimmed compares native with wasm (WasmTrimmedMean) on every K, size,
// alpha and pattern.
func testTrimmed(ctx context.Context, t *testing.T, r *rand.Rand, native, wasm *Engine, ks, sizes []int, alphas []string) {
	t.Helper()
	for _, alpha := range alphas {
		ref := "TrimmedMean"
		if alpha != "" {
			ref = fmt.Sprintf("TrimmedMean{alpha_bps=%s}", alpha)
		}
		for _, k := range ks {
			rule, err := native.ResolveRule(ctx, ref, nil, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range sizes {
				var fuel uint64
				params, err := paramVector(mustPlugin(t, native, rule).manifest, rule.Params)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, ok := native.nativeTrimmed(ctx, mustPlugin(t, native, rule), machine.F32, k, params); !ok {
					t.Fatalf("%s K=%d: the native TrimmedMean's fuel line was not found", ref, k)
				}
				for pattern := range 10 {
					in := syncer.AggregateInput{Rule: rule, Dtype: machine.F32, N: n}
					for _, v := range trimmedInputs(r, pattern, k, n) {
						in.Inputs = append(in.Inputs, syncer.EncodeF32(v))
					}
					want, werr := wasm.Aggregate(ctx, in)
					got, gerr := native.Aggregate(ctx, in)
					if werr != nil || gerr != nil {
						if werr == nil || gerr == nil || werr.Error() != gerr.Error() {
							t.Fatalf("%s K=%d n=%d: errors differ: native %v, Wasm %v", ref, k, n, gerr, werr)
						}
						continue
					}
					if pattern == 0 {
						fuel = want.Fuel
					} else if want.Fuel != fuel {
						t.Fatalf("%s K=%d n=%d pattern %d: the module's fuel %d depends on the values (random: %d)", ref, k, n, pattern, want.Fuel, fuel)
					}
					if !bytes.Equal(got.Aggregate, want.Aggregate) || got.Fuel != want.Fuel || !reflect.DeepEqual(got.Selected, want.Selected) ||
						!reflect.DeepEqual(got.Scores, want.Scores) {
						t.Fatalf("%s K=%d n=%d pattern %d: native differs: fuel %d, Wasm %d; selected %v, %v; aggregate %s", ref, k, n, pattern,
							got.Fuel, want.Fuel, got.Selected, want.Selected, firstDiff(got.Aggregate, want.Aggregate, 4))
					}
				}
			}
		}
	}
}

// TestCompareExchange: the vector compare-exchange (AVX2 where the CPU has
// it) and the Go one give every pair's signed min and max, extremes
// included.
func TestCompareExchange(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{8, 16, 64, 512} {
		a, b := make([]int32, n), make([]int32, n)
		for j := range a {
			a[j], b[j] = int32(r.Uint32()), int32(r.Uint32())
			if j%5 == 0 {
				a[j] = []int32{math.MinInt32, math.MaxInt32, -1, 0, b[j]}[r.IntN(5)]
			}
		}
		a1, b1 := slices.Clone(a), slices.Clone(b)
		a2, b2 := slices.Clone(a), slices.Clone(b)
		compareExchange(a1, b1)
		compareExchangeGo(a2, b2)
		for j := range a {
			lo, hi := min(a[j], b[j]), max(a[j], b[j])
			if a1[j] != lo || b1[j] != hi || a2[j] != lo || b2[j] != hi {
				t.Fatalf("n=%d j=%d: (%d, %d) gave (%d, %d) and Go (%d, %d)", n, j, a[j], b[j], a1[j], b1[j], a2[j], b2[j])
			}
		}
	}
}

// TestNativeTrimmedBudget: with a budget one short of the aggregation's
// fuel the module runs and fails as it always did; with exactly the fuel it
// succeeds natively.
func TestNativeTrimmedBudget(t *testing.T) {
	nativeBudget(t, "TrimmedMean{alpha_bps=3000}", 5003, 7, 11, &nativeTrims, func(fuel uint64, wasm bool) Config {
		return Config{Fuel: fuel, WasmTrimmedMean: wasm}
	})
}
