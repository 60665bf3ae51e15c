package syncer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

func f32le(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func gauss(seed uint64, n int, scale float32) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	v := make([]float32, n)
	for i := range v {
		v[i] = scale * float32(r.NormFloat64())
	}
	return v
}

func TestQuantize(t *testing.T) {
	sub := math.Float32frombits(1) // the smallest subnormal
	q, ok := quantize(f32le([]float32{1, -0.5, 0.25, 1.9999999, sub, 0, 3e-7}), machine.F32, 7)
	if !ok {
		t.Fatal("finite values refused")
	}
	// max exponent is 1's: q = v · 2^19, half to even.
	want := []int32{1 << 19, -(1 << 18), 1 << 17, 0, 0, 0, 0}
	want[3] = int32(math.RoundToEven(1.9999999 * (1 << 19)))
	for k := range want {
		if q.q[k] != want[k] {
			t.Errorf("q[%d] = %d, want %d", k, q.q[k], want[k])
		}
	}
	if _, ok := quantize(f32le([]float32{1, float32(math.Inf(1))}), machine.F32, 2); ok {
		t.Error("an infinite value was quantized")
	}
	if _, ok := quantize(f32le([]float32{float32(math.NaN())}), machine.F32, 1); ok {
		t.Error("NaN was quantized")
	}
	// machine.BF16 values quantize as their f32 widening.
	bf := safetensors.FromF32AsBF16("x", []int64{3}, []float32{1, -0.5, 0.25}).Data
	qb, _ := quantize(bf, machine.BF16, 3)
	if qb.q[0] != 1<<19 || qb.q[1] != -(1<<18) || qb.q[2] != 1<<17 {
		t.Errorf("machine.BF16: %v", qb.q)
	}
}

// TestQuantizeGolden pins the quantized integers and norm of a fixed
// Gaussian vector: the copy rule's arithmetic gives these bytes on every
// machine (it uses no floating-point operation).
func TestQuantizeGolden(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 7))
	v := make([]float32, 4096)
	for i := range v { // exact: a 24-bit integer times a power of two
		v[i] = float32(int32(r.Uint32()>>8)-1<<23) * (1.0 / (1 << 30))
	}
	q, _ := quantize(f32le(v), machine.F32, len(v))
	h := sha256.New()
	for _, x := range q.q {
		_ = binary.Write(h, binary.LittleEndian, x)
	}
	h.Write([]byte(q.norm.String()))
	const want = "e212f16025e6d9a3e6e2485eadc6cf17fb890c4038daa3b2eee798d1f35dc81a"
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Fatalf("quantized hash %s, want %s", got, want)
	}
}

func TestSimilar(t *testing.T) {
	const n = 20000
	base := gauss(1, n, 0.01)
	other := gauss(2, n, 0.01)
	noisy := func(rel float32) []float32 {
		e := gauss(3, n, 0.01*rel)
		out := make([]float32, n)
		for i := range out {
			out[i] = base[i] + e[i]
		}
		return out
	}
	scaled := func(s float32) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = base[i] * s
		}
		return out
	}
	mixed := func(w float32) []float32 { // mostly base, some of another trainer's direction
		out := make([]float32, n)
		for i := range out {
			out[i] = base[i] + w*other[i]
		}
		return out
	}
	for _, tc := range []struct {
		name string
		v    []float32
		want bool
	}{
		{"byte copy", base, true},
		{"× 1.0001", scaled(1.0001), true},
		{"× 2 (a scaled copy)", scaled(2), true},
		{"+ 1e-4·rms noise", noisy(1e-4), true},
		{"+ 1% rms noise", noisy(0.01), true},
		{"+ 3% rms noise", noisy(0.03), false},
		{"another trainer", other, false},
		{"half another trainer's", mixed(0.5), false},
		{"negated", scaled(-1), false},
		{"zeros", make([]float32, n), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := quantize(f32le(base), machine.F32, n)
			b, _ := quantize(f32le(tc.v), machine.F32, n)
			if got := similar(&a, &b, wire.DefaultCopyMinCosinePpm); got != tc.want {
				t.Fatalf("similar = %v, want %v", got, tc.want)
			}
			if got := similar(&b, &a, wire.DefaultCopyMinCosinePpm); got != tc.want {
				t.Fatalf("similar is not symmetric")
			}
			if similar(&a, &b, wire.CopyRuleOff) {
				t.Fatal("the rule is off at min_cosine_ppm 1000001")
			}
		})
	}
}

func TestMarkCopies(t *testing.T) {
	const n = 1000
	a, b, c := gauss(1, n, 0.01), gauss(2, n, 0.01), gauss(3, n, 0.01)
	near := func(v []float32) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = v[i] * 1.0001
		}
		return out
	}
	type in struct {
		did    string
		v      []float32
		height int64
		rej    string
	}
	for _, tc := range []struct {
		name   string
		inputs []in
		want   []string // copy_of per input
	}{
		{"no copies", []in{{"A", a, 1, ""}, {"B", b, 1, ""}, {"C", c, 2, ""}}, []string{"", "", ""}},
		{"later copy names the earlier record", []in{{"A", near(a), 5, ""}, {"B", b, 3, ""}, {"C", a, 4, ""}}, []string{"C", "", ""}},
		{"two copies of one original", []in{{"A", a, 1, ""}, {"B", near(a), 2, ""}, {"C", a, 3, ""}}, []string{"", "A", "A"}},
		{"same block: both name each other", []in{{"A", a, 2, ""}, {"B", near(a), 2, ""}, {"C", c, 2, ""}}, []string{"B", "A", ""}},
		{"an already rejected input is no original", []in{{"A", a, 1, "verifier: no"}, {"B", a, 2, ""}}, []string{"", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inputs := make([]wire.CommitInput, len(tc.inputs))
			values := make([][]byte, len(tc.inputs))
			heights := make([]int64, len(tc.inputs))
			for j, x := range tc.inputs {
				inputs[j] = wire.CommitInput{TrainerDID: x.did, Rejected: x.rej}
				if x.rej == "" {
					values[j] = f32le(x.v)
				}
				heights[j] = x.height
			}
			markCopies(inputs, values, heights, machine.F32, n, wire.DefaultCopyMinCosinePpm)
			for j, w := range tc.want {
				if inputs[j].CopyOf != w {
					t.Fatalf("input %s: copy_of %q, want %q", inputs[j].TrainerDID, inputs[j].CopyOf, w)
				}
				if w != "" && !strings.HasPrefix(inputs[j].Rejected, "copy of "+w) {
					t.Fatalf("input %s: rejected %q", inputs[j].TrainerDID, inputs[j].Rejected)
				}
			}
		})
	}
}
