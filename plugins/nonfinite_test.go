package plugins

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestNonFiniteIndependentOfPosition: for every built-in aggregation rule,
// an input holding NaN, +Inf or -Inf (in some coordinates) gives the same
// answer wherever it sits among the inputs (the others keep their order).
// Rank-based rules (CoordinateMedian, TrimmedMean, Krum, MultiKrum,
// Bulyan) give the same bytes; the arithmetic ones (Mean, GeometricMedian,
// CenteredClipping) sum in input order, so their finite coordinates may
// round differently, and the test requires the same non-finite coordinates
// with the same (canonical) bits. What each rule does is in ABI.md §11.
func TestNonFiniteIndependentOfPosition(t *testing.T) {
	e := testEngine(t)
	const k, n = 7, 64
	base := randInputs(newRand(), k-1, n, 1)
	bads := map[string]float32{"NaN": float32(math.NaN()), "+Inf": float32(math.Inf(1)), "-Inf": float32(math.Inf(-1))}
	rules := []struct {
		ref   string
		exact bool
	}{
		{"CoordinateMedian", true},
		{"TrimmedMean{alpha_bps=2000}", true},
		{"Krum{f=1}", true},
		{"MultiKrum{f=1,m=3}", true},
		{"Bulyan{f=1}", true},
		{"Mean", false},
		{"GeometricMedian", false},
		{"CenteredClipping{tau=2,iterations=2}", false},
	}
	for _, rule := range rules {
		for name, bad := range bads {
			t.Run(fmt.Sprintf("%s/%s", rule.ref, name), func(t *testing.T) {
				rr := mustResolve(t, e, rule.ref, k)
				odd := make([]float32, n)
				for j := range odd {
					odd[j] = float32(j%5) - 2
					if j%3 == 0 {
						odd[j] = bad
					}
				}
				var first []byte
				var firstSel []bool
				for pos := 0; pos < k; pos++ {
					in := append(append(append([][]float32{}, base[:pos]...), odd), base[pos:]...)
					out := aggregate(t, e, rr, in)
					sel := append(append(append([]bool{}, out.Selected[:pos]...), out.Selected[pos+1:]...), out.Selected[pos])
					if pos == 0 {
						first, firstSel = out.Aggregate, sel
						for _, v := range toF32(out.Aggregate) {
							if v != v && math.Float32bits(v) != canonNaN32 {
								t.Fatalf("NaN not canonical: %#x", math.Float32bits(v))
							}
						}
						continue
					}
					if rule.exact {
						if !bytes.Equal(out.Aggregate, first) || !equalBools(sel, firstSel) {
							t.Fatalf("position %d changes the answer", pos)
						}
						continue
					}
					a, b := toF32(first), toF32(out.Aggregate)
					for j := range a {
						fa, fb := !math.IsNaN(float64(a[j])) && !math.IsInf(float64(a[j]), 0), !math.IsNaN(float64(b[j])) && !math.IsInf(float64(b[j]), 0)
						if fa != fb || (!fa && math.Float32bits(a[j]) != math.Float32bits(b[j])) {
							t.Fatalf("position %d: coordinate %d is %v, at position 0 %v", pos, j, b[j], a[j])
						}
					}
				}
			})
		}
	}
}

// TestCanonicalNaNWordwise: the word-at-a-time canonicalisation rewrites
// exactly the NaNs, at every position and length, in both element types.
func TestCanonicalNaNWordwise(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	specials32 := []uint32{0x7f800000, 0xff800000, 0x7f800001, 0xffc00001, 0x7fc00000, 0x7fffffff, 0x7f7fffff, 0, 0x80000000}
	specials16 := []uint16{0x7f80, 0xff80, 0x7f81, 0xffc1, 0x7fc0, 0x7fff, 0x7f7f, 0, 0x8000}
	for n := 0; n < 40; n++ {
		for trial := 0; trial < 20; trial++ {
			b32, b16 := make([]byte, 4*n), make([]byte, 2*n)
			for i := 0; i < n; i++ {
				v32, v16 := r.Uint32(), uint16(r.Uint32())
				if r.IntN(3) == 0 {
					v32, v16 = specials32[r.IntN(len(specials32))], specials16[r.IntN(len(specials16))]
				}
				binary.LittleEndian.PutUint32(b32[4*i:], v32)
				binary.LittleEndian.PutUint16(b16[2*i:], v16)
			}
			w32, w16 := bytes.Clone(b32), bytes.Clone(b16)
			canonicalF32Slow(w32)
			canonicalBF16Slow(w16)
			// at every alignment of the first value
			off := trial % 8
			g32, g16 := make([]byte, off+len(b32)), make([]byte, off+len(b16))
			copy(g32[off:], b32)
			copy(g16[off:], b16)
			canonicalF32(g32[off:])
			canonicalBF16(g16[off:])
			if !bytes.Equal(g32[off:], w32) || !bytes.Equal(g16[off:], w16) {
				t.Fatalf("n=%d offset %d: word-wise canonicalisation differs", n, off)
			}
		}
	}
}
