package syncer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// TestSketchGolden pins the input sketch's bytes (copies.md §7): any change
// of the hash mixer, the bucket and sign rule or the int16 reduction is a
// consensus change and must show here.
func TestSketchGolden(t *testing.T) {
	q, _ := quantize(f32le(gauss(1, 1000, 0.01)), machine.F32, 1000)
	sk := sketchOf(q.q, 42, 64)
	sum := sha256.Sum256(sk)
	if got := hex.EncodeToString(sum[:]); got != "147a17edd166782a542d44202f087120c16b3f76cd93f743fb5d60432a48b292" {
		t.Fatalf("sketch sha256 %s, first values % x", got, sk[:8])
	}
	if len(sk) != 128 {
		t.Fatalf("%d bytes", len(sk))
	}
	// Every value fits the int16 reduction's bound 2^14, and the largest
	// bucket uses it (the shift keeps 14 bits of the largest magnitude).
	v, ok := sketchValues(sk, 64)
	if !ok {
		t.Fatal("sketchValues refused a sketch of the right length")
	}
	top := int32(0)
	for _, x := range v.q {
		top = max(top, x, -x)
	}
	if top > 1<<14 || top < 1<<13 {
		t.Fatalf("largest |value| %d, want in [2^13, 2^14]", top)
	}
	if _, ok := sketchValues(sk[:126], 64); ok {
		t.Fatal("sketchValues took a short sketch")
	}
}

// TestSketchSimilar: the sketch keeps the copy rule's verdicts where they
// are far from the threshold — exact and near-exact replays are similar,
// other trainers' directions (cosine 0.9 and below) are not — at every
// allowed dimension; near the threshold (1% rms noise, cosine ≈ 0.99995)
// it may go either way, like a perturbed copy.
func TestSketchSimilar(t *testing.T) {
	const n = 20000
	base := gauss(1, n, 0.01)
	mix := func(w float32, seed uint64) []float32 {
		o := gauss(seed, n, 0.01)
		out := make([]float32, n)
		for i := range out {
			out[i] = base[i] + w*o[i]
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
	cases := []struct {
		name string
		v    []float32
		want bool
	}{
		{"byte copy", base, true},
		{"× 1.0001", scaled(1.0001), true},
		{"× 2", scaled(2), true},
		{"+ 1e-4·rms noise", mix(1e-4, 3), true},
		{"+ 3% rms noise", mix(0.03, 3), false},
		{"another trainer", gauss(2, n, 0.01), false},
		{"negated", scaled(-1), false},
		{"zeros", make([]float32, n), false},
	}
	// Honest-like neighbours: cosine 0.9 with base (w = 0.4843), 40 draws.
	for s := uint64(10); s < 50; s++ {
		cases = append(cases, struct {
			name string
			v    []float32
			want bool
		}{fmt.Sprintf("cosine 0.9, draw %d", s), mix(0.4843, s), false})
	}
	for _, dim := range []int{wire.MinSketchDim, 256, wire.MaxSketchDim} {
		a, _ := quantize(f32le(base), machine.F32, n)
		sa, _ := sketchValues(sketchOf(a.q, 7, dim), dim)
		for _, tc := range cases {
			b, _ := quantize(f32le(tc.v), machine.F32, n)
			sb, _ := sketchValues(sketchOf(b.q, 7, dim), dim)
			if got := similar(&sa, &sb, wire.DefaultCopyMinCosinePpm); got != tc.want {
				t.Errorf("dim %d, %s: similar = %v (sketch cosine %.6f, values %.6f), want %v", dim, tc.name, got, cosine(&sa, &sb), cosine(&a, &b), tc.want)
			}
		}
	}
}

// BenchmarkSketch: the sketch's cost per input beside the copy rule's own
// quantization of the same values (copies.md §7 "What is stored").
func BenchmarkSketch(b *testing.B) {
	for _, n := range []int{1 << 20, 10 << 20} {
		vals := f32le(gauss(1, n, 0.01))
		q, _ := quantize(vals, machine.F32, n)
		b.Run(fmt.Sprintf("quantize/N=%d", n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for i := 0; i < b.N; i++ {
				quantize(vals, machine.F32, n)
			}
		})
		b.Run(fmt.Sprintf("sketch256/N=%d", n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for i := 0; i < b.N; i++ {
				sketchOf(q.q, 7, 256)
			}
		})
	}
}
