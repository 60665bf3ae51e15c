package plugins

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// Float64 reference implementations written from the papers' definitions,
// independent of the C sources.

func refMean(x [][]float64) []float64 {
	n := len(x[0])
	out := make([]float64, n)
	for c := 0; c < n; c++ {
		for i := range x {
			out[c] += x[i][c]
		}
		out[c] /= float64(len(x))
	}
	return out
}

func column(x [][]float64, c int) []float64 {
	v := make([]float64, len(x))
	for i := range x {
		v[i] = x[i][c]
	}
	sort.Float64s(v)
	return v
}

func refTrimmed(x [][]float64, alphaBps int) []float64 {
	k := len(x)
	t := alphaBps * k / 10000
	out := make([]float64, len(x[0]))
	for c := range out {
		v := column(x, c)[t : k-t]
		for _, y := range v {
			out[c] += y
		}
		out[c] /= float64(len(v))
	}
	return out
}

func refMedian(x [][]float64) []float64 {
	out := make([]float64, len(x[0]))
	for c := range out {
		v := column(x, c)
		if len(v)%2 == 1 {
			out[c] = v[len(v)/2]
		} else {
			out[c] = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
	}
	return out
}

func sqdist(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += (a[i] - b[i]) * (a[i] - b[i])
	}
	return s
}

func refKrumScores(x [][]float64, members []int, f int) map[int]float64 {
	nb := max(1, len(members)-f-2)
	out := map[int]float64{}
	for _, i := range members {
		var d []float64
		for _, j := range members {
			if j != i {
				d = append(d, sqdist(x[i], x[j]))
			}
		}
		sort.Float64s(d)
		s := 0.0
		for _, v := range d[:min(nb, len(d))] {
			s += v
		}
		out[i] = s
	}
	return out
}

func argminScore(s map[int]float64, members []int) int {
	best := members[0]
	for _, i := range members {
		if s[i] < s[best] || (s[i] == s[best] && i < best) {
			best = i
		}
	}
	return best
}

func allIdx(k int) []int {
	m := make([]int, k)
	for i := range m {
		m[i] = i
	}
	return m
}

func refKrum(x [][]float64, f int) []float64 {
	s := refKrumScores(x, allIdx(len(x)), f)
	return append([]float64(nil), x[argminScore(s, allIdx(len(x)))]...)
}

func refMultiKrum(x [][]float64, f, m int) []float64 {
	s := refKrumScores(x, allIdx(len(x)), f)
	idx := allIdx(len(x))
	sort.SliceStable(idx, func(a, b int) bool { return s[idx[a]] < s[idx[b]] })
	return refMean(pick(x, idx[:m]))
}

func pick(x [][]float64, idx []int) [][]float64 {
	var out [][]float64
	for _, i := range idx {
		out = append(out, x[i])
	}
	return out
}

func refBulyan(x [][]float64, f int) []float64 {
	rem := allIdx(len(x))
	theta := len(x) - 2*f
	var sel []int
	for len(sel) < theta {
		s := refKrumScores(x, rem, f)
		b := argminScore(s, rem)
		sel = append(sel, b)
		var nr []int
		for _, i := range rem {
			if i != b {
				nr = append(nr, i)
			}
		}
		rem = nr
	}
	beta := theta - 2*f
	xs := pick(x, sel)
	out := make([]float64, len(x[0]))
	for c := range out {
		v := column(xs, c)
		med := v[len(v)/2]
		if len(v)%2 == 0 {
			med = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		sort.SliceStable(v, func(a, b int) bool { return math.Abs(v[a]-med) < math.Abs(v[b]-med) })
		for _, y := range v[:beta] {
			out[c] += y
		}
		out[c] /= float64(beta)
	}
	return out
}

func refGeoMedian(x [][]float64, iters int, nu float64) []float64 {
	z := refMean(x)
	for it := 0; it < iters; it++ {
		w := make([]float64, len(x))
		ws := 0.0
		for i := range x {
			w[i] = 1 / math.Max(nu, math.Sqrt(sqdist(x[i], z)))
			ws += w[i]
		}
		nz := make([]float64, len(z))
		for c := range nz {
			for i := range x {
				nz[c] += w[i] * x[i][c]
			}
			nz[c] /= ws
		}
		z = nz
	}
	return z
}

func refCC(x [][]float64, tau float64, iters int) []float64 {
	v := make([]float64, len(x[0]))
	for it := 0; it < iters; it++ {
		nv := append([]float64(nil), v...)
		for i := range x {
			r := math.Sqrt(sqdist(x[i], v))
			c := 1.0
			if r > tau {
				c = tau / r
			}
			for j := range nv {
				nv[j] += c * (x[i][j] - v[j]) / float64(len(x))
			}
		}
		v = nv
	}
	return v
}

// TestAgainstFloat64Reference: every rule agrees with its float64
// reference on random inputs within a relative tolerance of 1e-6 of the
// input scale (f32 output rounding is 6e-8; the rest is f64 summation order
// and, for Weiszfeld, the f32 iterate).
func TestAgainstFloat64Reference(t *testing.T) {
	e := testEngine(t)
	r := rand.New(rand.NewPCG(1, 2))
	const n = 1003 // not a multiple of 4: exercises the tails
	tests := []struct {
		ref string
		k   int
		fn  func(x [][]float64) []float64
		tol float64
	}{
		{"Mean", 6, refMean, 1e-6},
		{"TrimmedMean{alpha_bps=2000}", 10, func(x [][]float64) []float64 { return refTrimmed(x, 2000) }, 1e-6},
		{"CoordinateMedian", 6, refMedian, 1e-6},
		{"CoordinateMedian", 7, refMedian, 1e-6},
		{"Krum{f=1}", 7, func(x [][]float64) []float64 { return refKrum(x, 1) }, 1e-6},
		{"MultiKrum{f=2,m=4}", 9, func(x [][]float64) []float64 { return refMultiKrum(x, 2, 4) }, 1e-6},
		{"Bulyan{f=1}", 7, func(x [][]float64) []float64 { return refBulyan(x, 1) }, 1e-6},
		{"Bulyan{f=2}", 12, func(x [][]float64) []float64 { return refBulyan(x, 2) }, 1e-6},
		{"GeometricMedian{iterations=6}", 6, func(x [][]float64) []float64 { return refGeoMedian(x, 6, 1e-6) }, 1e-5},
		{"CenteredClipping{tau=5,iterations=3}", 6, func(x [][]float64) []float64 { return refCC(x, 5, 3) }, 1e-5},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/K=%d", tc.ref, tc.k), func(t *testing.T) {
			in := randInputs(r, tc.k, n, 1)
			// one outlier far away
			for j := range in[tc.k-1] {
				in[tc.k-1][j] += 50
			}
			x := make([][]float64, tc.k)
			for i := range in {
				x[i] = make([]float64, n)
				for j := range in[i] {
					x[i][j] = float64(in[i][j])
				}
			}
			want := tc.fn(x)
			got := toF32(aggregate(t, e, mustResolve(t, e, tc.ref, tc.k), in).Aggregate)
			worst := 0.0
			for c := range want {
				d := math.Abs(float64(got[c])-want[c]) / math.Max(1, math.Abs(want[c]))
				worst = math.Max(worst, d)
			}
			if worst > tc.tol {
				t.Fatalf("max relative error %.3g > %.3g", worst, tc.tol)
			}
		})
	}
}
