package plugins_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
)

// TestSortUnrolledMatchesPrevious: TrimmedMean and CoordinateMedian keep
// one copy of their sort loop per K from 3 to 16 (plugins/builtin/src/
// sortbased.h) so the sorted vectors stay in Wasm locals. The modules before
// that change are kept in testdata/sort-v1; for every K from 1 to 20 (the
// unrolled copies and the generic loop on both sides of them), N with and
// without a tail of 1-3 coordinates, several trim levels, and inputs full of
// the values whose order is delicate (NaN with payloads, ±0, ±Inf,
// subnormals, ties), both must give the same bytes.
func TestSortUnrolledMatchesPrevious(t *testing.T) {
	ctx := context.Background()
	e, err := plugins.NewEngine(ctx, plugins.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	old := map[string]string{}
	for name, file := range map[string]string{"TrimmedMean": "trimmedmean.wasm", "CoordinateMedian": "coordinatemedian.wasm"} {
		raw, err := os.ReadFile("testdata/sort-v1/" + file)
		if err != nil {
			t.Fatal(err)
		}
		info, err := e.Publish(ctx, raw)
		if err != nil {
			t.Fatalf("publish the previous %s: %v", name, err)
		}
		old[name] = "sha256:" + info.Hash.String()
	}
	special := []float32{float32(math.NaN()), math.Float32frombits(0x7fc00001), math.Float32frombits(0xffc00000),
		float32(math.Copysign(0, -1)), 0, float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(1), math.Float32frombits(0x80000001), 1, -1, 1}
	r := rand.New(rand.NewPCG(3, 5))
	value := func() float32 {
		if r.IntN(4) == 0 {
			return special[r.IntN(len(special))]
		}
		return float32(r.NormFloat64())
	}
	type rule struct{ name, params string }
	rules := []rule{{"CoordinateMedian", ""}, {"TrimmedMean", "{alpha_bps=0}"}, {"TrimmedMean", "{alpha_bps=1000}"},
		{"TrimmedMean", "{alpha_bps=2000}"}, {"TrimmedMean", "{alpha_bps=3333}"}, {"TrimmedMean", "{alpha_bps=4999}"}}
	compared := 0
	for k := 1; k <= 20; k++ {
		for _, n := range []int{64, 67} {
			inputs := make([][]byte, k)
			for i := range inputs {
				b := make([]byte, 4*n)
				for j := 0; j < n; j++ {
					binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(value()))
				}
				inputs[i] = b
			}
			for _, ru := range rules {
				name := fmt.Sprintf("%s%s/K=%d/N=%d", ru.name, ru.params, k, n)
				newRef, err := e.ResolveRule(ctx, ru.name+ru.params, nil, k, k)
				if err != nil {
					continue // a trim that leaves no values: refused by both (checked below)
				}
				oldRef, err := e.ResolveRule(ctx, old[ru.name]+ru.params, nil, k, k)
				if err != nil {
					t.Fatalf("%s: the previous module refuses what the new one takes: %v", name, err)
				}
				a, err := e.Aggregate(ctx, syncer.AggregateInput{Rule: newRef, Dtype: machine.F32, N: n, Inputs: inputs})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				b, err := e.Aggregate(ctx, syncer.AggregateInput{Rule: oldRef, Dtype: machine.F32, N: n, Inputs: inputs})
				if err != nil {
					t.Fatalf("%s (previous): %v", name, err)
				}
				if !bytes.Equal(a.Aggregate, b.Aggregate) {
					t.Errorf("%s: the unrolled module's aggregate differs from the previous one's", name)
				}
				compared++
			}
		}
	}
	if compared < 200 {
		t.Fatalf("only %d cases compared", compared)
	}
}
