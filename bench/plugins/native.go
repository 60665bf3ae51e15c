package plugins

import (
	"math"
	"sort"
)

// Native Go loops with the same arithmetic as the built-ins (f64
// accumulation, sorted sums), the baseline of the benchmarks.

// NativeMean is the coordinate-wise mean.
func NativeMean(x [][]float32, out []float32) {
	k := float64(len(x))
	for c := range out {
		s := 0.0
		for i := range x {
			s += float64(x[i][c])
		}
		out[c] = float32(s / k)
	}
}

func sortSmall(v []float32) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

// NativeTrimmedMean drops floor(alpha·K) values at each end.
func NativeTrimmedMean(x [][]float32, alphaBps int, out []float32) {
	k := len(x)
	t := alphaBps * k / 10000
	v := make([]float32, k)
	for c := range out {
		for i := range x {
			v[i] = x[i][c]
		}
		sortSmall(v)
		s := 0.0
		for _, y := range v[t : k-t] {
			s += float64(y)
		}
		out[c] = float32(s / float64(k-2*t))
	}
}

// NativeMedian is the coordinate-wise median.
func NativeMedian(x [][]float32, out []float32) {
	k := len(x)
	v := make([]float32, k)
	for c := range out {
		for i := range x {
			v[i] = x[i][c]
		}
		sortSmall(v)
		if k%2 == 1 {
			out[c] = v[k/2]
		} else {
			out[c] = float32((float64(v[k/2-1]) + float64(v[k/2])) * 0.5)
		}
	}
}

func pairDists(x [][]float32) [][]float64 {
	k := len(x)
	d := make([][]float64, k)
	for i := range d {
		d[i] = make([]float64, k)
	}
	for i := 0; i < k; i++ {
		for j := i + 1; j < k; j++ {
			a, b := x[i], x[j]
			s := 0.0
			for c := range a {
				t := float64(a[c]) - float64(b[c])
				s += t * t
			}
			d[i][j], d[j][i] = s, s
		}
	}
	return d
}

func krumScores(d [][]float64, members []int, f int) []float64 {
	nb := max(1, len(members)-f-2)
	sc := make([]float64, len(d))
	for _, i := range members {
		var v []float64
		for _, j := range members {
			if j != i {
				v = append(v, d[i][j])
			}
		}
		sort.Float64s(v)
		for _, y := range v[:min(nb, len(v))] {
			sc[i] += y
		}
	}
	return sc
}

// NativeKrum copies the input with the lowest Krum score.
func NativeKrum(x [][]float32, f int, out []float32) {
	all := make([]int, len(x))
	for i := range all {
		all[i] = i
	}
	sc := krumScores(pairDists(x), all, f)
	best := 0
	for i := range sc {
		if sc[i] < sc[best] {
			best = i
		}
	}
	copy(out, x[best])
}

// NativeMultiKrum averages the m lowest-scored inputs.
func NativeMultiKrum(x [][]float32, f, m int, out []float32) {
	all := make([]int, len(x))
	for i := range all {
		all[i] = i
	}
	sc := krumScores(pairDists(x), all, f)
	sort.SliceStable(all, func(a, b int) bool { return sc[all[a]] < sc[all[b]] })
	sel := make([][]float32, m)
	for q := 0; q < m; q++ {
		sel[q] = x[all[q]]
	}
	NativeMean(sel, out)
}

// NativeBulyan: repeated Krum selection, then the beta values nearest the
// median per coordinate.
func NativeBulyan(x [][]float32, f int, out []float32) {
	d := pairDists(x)
	rem := make([]int, len(x))
	for i := range rem {
		rem[i] = i
	}
	theta := len(x) - 2*f
	var sel [][]float32
	for len(sel) < theta {
		sc := krumScores(d, rem, f)
		b := rem[0]
		for _, i := range rem {
			if sc[i] < sc[b] {
				b = i
			}
		}
		sel = append(sel, x[b])
		var nr []int
		for _, i := range rem {
			if i != b {
				nr = append(nr, i)
			}
		}
		rem = nr
	}
	beta := theta - 2*f
	v := make([]float32, theta)
	for c := range out {
		for q := range sel {
			v[q] = sel[q][c]
		}
		sortSmall(v)
		med := float64(v[theta/2])
		if theta%2 == 0 {
			med = (float64(v[theta/2-1]) + float64(v[theta/2])) * 0.5
		}
		lo, hi := theta/2, theta/2
		for hi-lo < beta {
			switch {
			case lo == 0:
				hi++
			case hi == theta:
				lo--
			case med-float64(v[lo-1]) <= float64(v[hi])-med:
				lo--
			default:
				hi++
			}
		}
		s := 0.0
		for _, y := range v[lo:hi] {
			s += float64(y)
		}
		out[c] = float32(s / float64(beta))
	}
}

func weighted(x [][]float32, w []float64, out []float32) {
	ws := 0.0
	for _, y := range w {
		ws += y
	}
	for c := range out {
		s := 0.0
		for i := range x {
			s += w[i] * float64(x[i][c])
		}
		out[c] = float32(s / ws)
	}
}

func dist(a, z []float32) float64 {
	s := 0.0
	for c := range a {
		t := float64(a[c]) - float64(z[c])
		s += t * t
	}
	return math.Sqrt(s)
}

// NativeGeoMedian runs smoothed Weiszfeld iterations from the mean.
func NativeGeoMedian(x [][]float32, iters int, nu float64, out []float32) {
	w := make([]float64, len(x))
	for i := range w {
		w[i] = 1
	}
	weighted(x, w, out)
	for it := 0; it < iters; it++ {
		for i := range x {
			w[i] = 1 / math.Max(nu, dist(x[i], out))
		}
		weighted(x, w, out)
	}
}

// NativeCC is centered clipping from 0.
func NativeCC(x [][]float32, tau float64, iters int, out []float32) {
	clear(out)
	cf := make([]float64, len(x))
	k := float64(len(x))
	for it := 0; it < iters; it++ {
		for i := range x {
			r := dist(x[i], out)
			cf[i] = 1
			if r > tau {
				cf[i] = tau / r
			}
		}
		for c := range out {
			z := float64(out[c])
			s := 0.0
			for i := range x {
				s += cf[i] * (float64(x[i][c]) - z)
			}
			out[c] = float32(z + s/k)
		}
	}
}
