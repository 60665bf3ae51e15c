package plugins

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
)

var (
	sharedOnce sync.Once
	sharedEng  *Engine
	sharedErr  error
)

// testEngine is shared by the tests of this package (compiling the
// built-ins once keeps the tests fast).
func testEngine(t testing.TB) *Engine {
	t.Helper()
	sharedOnce.Do(func() {
		sharedEng, sharedErr = NewEngine(context.Background(), Config{Fuel: 20_000_000_000})
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedEng
}

// newEngine is an engine of its own with cfg, closed when the test ends.
func newEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	ctx := context.Background()
	e, err := NewEngine(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	return e
}

func f32s(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[i*4:], math.Float32bits(x))
	}
	return b
}

func toF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[i*4:]))
	}
	return out
}

func randInputs(r *rand.Rand, k, n int, scale float64) [][]float32 {
	out := make([][]float32, k)
	for i := range out {
		out[i] = make([]float32, n)
		for j := range out[i] {
			out[i][j] = float32(r.NormFloat64() * scale)
		}
	}
	return out
}

func asBytes(in [][]float32) [][]byte {
	out := make([][]byte, len(in))
	for i, v := range in {
		out[i] = f32s(v...)
	}
	return out
}

func mustResolve(t testing.TB, e *Engine, ref string, k int) syncer.RuleRef {
	t.Helper()
	rr, err := e.ResolveRule(context.Background(), ref, nil, k, 0)
	if err != nil {
		t.Fatalf("resolve %s: %v", ref, err)
	}
	return rr
}

func aggregate(t testing.TB, e *Engine, rr syncer.RuleRef, in [][]float32) syncer.AggregateOutput {
	t.Helper()
	out, err := e.Aggregate(context.Background(), syncer.AggregateInput{Rule: rr, Dtype: machine.F32, N: len(in[0]), Inputs: asBytes(in)})
	if err != nil {
		t.Fatalf("aggregate %s: %v", rr.Name, err)
	}
	return out
}

func newRand() *rand.Rand { return rand.New(rand.NewPCG(11, 12)) }

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
