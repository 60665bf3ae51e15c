package syncer

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// The reference implementations of copies.md §2, as the copy rule computed
// them before the fast paths (issue 21): quantize in integers, one per
// element, and the full exact dot. The fast quantize and similar must give
// the same integers and verdicts for every input.

// f32Bits returns value k of vals (F32 or BF16, little-endian) as float32
// bits.
func f32Bits(vals []byte, dtype machine.Dtype, k int) uint32 {
	if dtype == machine.BF16 {
		return uint32(binary.LittleEndian.Uint16(vals[2*k:])) << 16
	}
	return binary.LittleEndian.Uint32(vals[4*k:])
}

func quantizeRef(vals []byte, dtype machine.Dtype, n int) ([]int32, *big.Int, bool) {
	maxExp := uint32(0)
	for k := 0; k < n; k++ {
		e := f32Bits(vals, dtype, k) >> 23 & 0xff
		if e == 0xff {
			return nil, nil, false
		}
		maxExp = max(maxExp, e)
	}
	maxExp = max(maxExp, 1)
	q := make([]int32, n)
	for k := 0; k < n; k++ {
		b := f32Bits(vals, dtype, k)
		e, m := b>>23&0xff, uint64(b&0x7fffff)
		if e == 0 {
			e = 1
		} else {
			m |= 1 << 23
		}
		x := roundShift(m, uint(maxExp-e)+24-quantBits)
		if b>>31 != 0 {
			x = -x
		}
		q[k] = int32(x)
	}
	return q, dotRef(q, q), true
}

// dotRef is main's exact dot before the fast paths: one int64 accumulator
// per 2^22 products (each ≤ 2^40), added as big integers.
func dotRef(a, b []int32) *big.Int {
	total := new(big.Int)
	for lo := 0; lo < len(a); lo += 1 << 22 {
		var acc int64
		for k := lo; k < min(lo+1<<22, len(a)); k++ {
			acc += int64(a[k]) * int64(b[k])
		}
		total.Add(total, big.NewInt(acc))
	}
	return total
}

func similarRef(a, b []int32, ppm int64) bool {
	na, nb := dotRef(a, a), dotRef(b, b)
	if na.Sign() == 0 || nb.Sign() == 0 || ppm > wire.CopyRuleOff-1 {
		return false
	}
	d := dotRef(a, b)
	if d.Sign() <= 0 {
		return false
	}
	lhs := new(big.Int).Mul(d, d)
	lhs.Mul(lhs, big.NewInt(1_000_000_000_000))
	rhs := new(big.Int).Mul(big.NewInt(ppm), big.NewInt(ppm))
	rhs.Mul(rhs, na).Mul(rhs, nb)
	return lhs.Cmp(rhs) >= 0
}

func bitsLE(b []uint32) []byte {
	out := make([]byte, 4*len(b))
	for i, x := range b {
		binary.LittleEndian.PutUint32(out[4*i:], x)
	}
	return out
}

func checkQuantize(t testing.TB, vals []byte, dtype machine.Dtype, n int) {
	t.Helper()
	wq, wn, wok := quantizeRef(vals, dtype, n)
	got, ok := quantize(vals, dtype, n)
	if ok != wok {
		t.Fatalf("%v n=%d: ok %v, reference %v", dtype, n, ok, wok)
	}
	if !ok {
		return
	}
	if !slices.Equal(got.q, wq) {
		for k := range wq {
			if got.q[k] != wq[k] {
				t.Fatalf("%v n=%d: q[%d] = %d, reference %d (bits %#08x)", dtype, n, k, got.q[k], wq[k], f32Bits(vals, dtype, k))
			}
		}
	}
	if got.norm.Cmp(wn) != 0 {
		t.Fatalf("%v n=%d: norm %s, reference %s", dtype, n, got.norm, wn)
	}
	chunks := (n + simChunk - 1) / simChunk
	if got.n != n || len(got.hi) != chunks+1 || got.hi[chunks] != 0 || got.zero != (wn.Sign() == 0) {
		t.Fatalf("n %d, %d suffix sums, zero %v", got.n, len(got.hi), got.zero)
	}
	if f, _ := wn.Float64(); got.hi[0] != f || got.lo[0] != f {
		t.Fatalf("hi[0] = %g, norm %g", got.hi[0], f)
	}
	// The lazy form's bounds hold the exact suffix sums of squares.
	lazy, _ := quantizeLazy(vals, dtype, n)
	if lazy.zero != got.zero || len(lazy.hi) != chunks+1 || len(lazy.lo) != chunks+1 {
		t.Fatalf("lazy: zero %v, %d/%d bounds", lazy.zero, len(lazy.hi), len(lazy.lo))
	}
	suffix := new(big.Int)
	for c := chunks - 1; c >= 0; c-- {
		suffix.Add(suffix, dotRef(wq[c*simChunk:min((c+1)*simChunk, n)], wq[c*simChunk:min((c+1)*simChunk, n)]))
		exact := new(big.Float).SetInt(suffix)
		if big.NewFloat(lazy.lo[c]).Cmp(exact) > 0 || big.NewFloat(lazy.hi[c]).Cmp(exact) < 0 {
			t.Fatalf("chunk %d: bounds [%g, %g] miss the exact %s", c, lazy.lo[c], lazy.hi[c], suffix)
		}
	}
	if !lazy.upto(min(n, 2*simChunk)) || !slices.Equal(lazy.q, wq[:min(n, 2*simChunk)]) {
		t.Fatal("lazy: the first integers differ")
	}
	lazy.full()
	if !slices.Equal(lazy.q, wq) || lazy.norm.Cmp(wn) != 0 || lazy.src != nil {
		t.Fatal("lazy: the integers, once all computed, differ")
	}
}

// TestQuantizeMatchesReference: the float64 quantize gives the reference's
// integers and norm on the edge cases: ±0, all zero, subnormals (alone and
// beside normals), exact halves and half ± 1 ulp at every shift the largest
// exponents 1, 127 and 254 allow, the largest finite values, and BF16.
func TestQuantizeMatchesReference(t *testing.T) {
	cases := map[string][]uint32{
		"all zero":  {0, 0, 0},
		"±0":        {0x80000000, 0, 0x80000000},
		"one":       {0x3f800000},
		"subnormal": {1, 0x80000001, 0x7fffff, 0x807fffff, 0x400000, 0x400001, 0x3fffff, 0xc00000 >> 1, 3, 5, 0x80000002},
		"max float": {0x7f7fffff, 0xff7fffff, 0x7f000000, 1, 0x00800000, 0x80000001},
		"inf":       {0x3f800000, 0x7f800000},
		"-inf":      {0xff800000},
		"nan":       {0x7fc00000, 0},
		"nan bits":  {0x7f800001},
	}
	for _, maxE := range []uint32{1, 2, 100, 127, 200, 253, 254} {
		vals := []uint32{maxE<<23 | 0x7fffff} // sets the max exponent
		for e := uint32(0); e <= maxE; e++ {
			ee := max(e, 1)
			s := maxE - ee + 4 // the reference's shift
			for _, m := range []uint32{0, 1, 0x7fffff, 0x400000, 0x2aaaaa} {
				vals = append(vals, e<<23|m, 1<<31|e<<23|m)
			}
			if s < 24 {
				for _, k := range []uint32{0, 1, 2, 3} { // exact halves, odd and even quotients
					full := uint32(1)<<23 | k<<s | 1<<(s-1)
					if e == 0 {
						full = k<<s | 1<<(s-1)
					}
					m := full & 0x7fffff
					vals = append(vals, e<<23|m, 1<<31|e<<23|m, e<<23|(m+1)&0x7fffff, e<<23|(m-1)&0x7fffff)
				}
			}
		}
		cases[fmt.Sprintf("halves at max exponent %d", maxE)] = vals
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			checkQuantize(t, bitsLE(v), machine.F32, len(v))
			bf := make([]byte, 2*len(v))
			for i, x := range v {
				binary.LittleEndian.PutUint16(bf[2*i:], uint16(x>>16))
			}
			checkQuantize(t, bf, machine.BF16, len(v))
		})
	}
	// Long random vectors of every scale, crossing chunk boundaries.
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{simChunk - 1, simChunk, 3*simChunk + 17} {
		for _, scale := range []float64{1e-42, 1e-30, 1, 1e30, 3e38} {
			v := make([]uint32, n)
			for i := range v {
				v[i] = math.Float32bits(float32(scale * r.NormFloat64() / 4))
			}
			checkQuantize(t, bitsLE(v), machine.F32, n)
		}
		v := make([]uint32, n) // raw random bits, all finite
		for i := range v {
			v[i] = r.Uint32() &^ (1 << 30)
		}
		checkQuantize(t, bitsLE(v), machine.F32, n)
	}
}

func FuzzQuantize(f *testing.F) {
	f.Add(bitsLE([]uint32{0x3f800000, 1, 0x80000001, 0x7f7fffff}))
	f.Add(bitsLE([]uint32{0x00c00000, 0x00400000, 0x00000003}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkQuantize(t, data, machine.F32, len(data)/4)
		checkQuantize(t, data, machine.BF16, len(data)/2)
	})
}

// simCase compares the fast similar (both argument orders, and with either
// side cut to a prefix as the cache keeps it) with the reference.
func simCase(t testing.TB, name string, a, b []int32, ppm int64) (exited bool) {
	t.Helper()
	want := similarRef(a, b, ppm)
	qa, qb := newQuantized(a), newQuantized(b)
	for _, p := range [][2]*quantized{{&qa, &qb}, {&qb, &qa}} {
		got := compareQuantized(p[0], p[1], ppm)
		if !got.decided || got.sim != want {
			t.Fatalf("%s: similar %+v, reference %v", name, got, want)
		}
		exited = exited || !got.exact
	}
	for _, cut := range []int{simChunk, 2 * simChunk} {
		if cut >= len(b) {
			continue
		}
		pb := quantized{n: qb.n, zero: qb.zero, q: qb.q[:cut], sq: qb.sq[:cut/simChunk], hi: qb.hi[:cut/simChunk+1], lo: qb.lo[:cut/simChunk+1]}
		for _, p := range [][2]*quantized{{&qa, &pb}, {&pb, &qa}} {
			if got := compareQuantized(p[0], p[1], ppm); got.decided && got.sim != want {
				t.Fatalf("%s: prefix %d: similar %+v, reference %v", name, cut, got, want)
			}
		}
	}
	return exited
}

func randQ(r *rand.Rand, n int, scale float64) []int32 {
	q := make([]int32, n)
	for i := range q {
		q[i] = int32(max(-1<<20, min(1<<20, math.Round(scale*r.NormFloat64()))))
	}
	return q
}

// TestSimilarEarlyExit: the early exit never changes a verdict, over
// random, near-copy (cosines swept across the threshold), negatively
// correlated, zero and adversarial vectors (equal suffixes after different
// prefixes; the mass at the end), and it does exit on honest-like pairs.
func TestSimilarEarlyExit(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n = 6*simChunk + 123
	ppm := int64(wire.DefaultCopyMinCosinePpm)
	base := randQ(r, n, 1e5)
	noise := randQ(r, n, 1e5)
	mix := func(a []int32, wa float64, b []int32, wb float64) []int32 {
		out := make([]int32, len(a))
		for i := range out {
			out[i] = int32(max(-1<<20, min(1<<20, math.Round(wa*float64(a[i])+wb*float64(b[i])))))
		}
		return out
	}
	exits := 0
	count := func(e bool) {
		if e {
			exits++
		}
	}
	count(simCase(t, "random", base, noise, ppm))
	count(simCase(t, "identical", base, base, ppm))
	count(simCase(t, "negated", base, mix(base, -1, noise, 0), ppm))
	count(simCase(t, "negatively correlated", base, mix(base, -1, noise, 0.3), ppm))
	count(simCase(t, "zeros", base, make([]int32, n), ppm))
	count(simCase(t, "cosine 0.9", base, mix(base, 1, noise, 0.4843), ppm))
	// Cosines swept across the threshold: cos = 1/√(1+w²) for base+w·noise
	// (near enough), threshold at w ≈ 0.01414.
	crossed := map[bool]bool{}
	for i := 0; i <= 200; i++ {
		w := 0.0138 + float64(i)*0.000004
		b := mix(base, 1, noise, w)
		count(simCase(t, fmt.Sprintf("w=%g", w), base, b, ppm))
		crossed[similarRef(base, b, ppm)] = true
	}
	if !crossed[true] || !crossed[false] {
		t.Fatalf("the sweep did not cross the threshold: %v", crossed)
	}
	// Equal suffixes, different prefixes: the first chunks point apart (or
	// against each other), the rest is identical and carries the mass.
	for _, pw := range []float64{-1, 0, 0.3, 1e-3, 1e-2} {
		a, b := slices.Clone(base), slices.Clone(base)
		for k := 0; k < 2*simChunk; k++ {
			a[k] = int32(float64(a[k]) * pw)
			b[k] = int32(float64(noise[k]) * pw)
		}
		count(simCase(t, fmt.Sprintf("equal suffix, prefix ×%g", pw), a, b, ppm))
	}
	// The mass at the end: small values first, then large ones.
	for _, tail := range []int{1, simChunk, n / 2} {
		a, b := mix(base, 1e-4, noise, 0), mix(noise, 1e-4, base, 0)
		copy(a[n-tail:], base[n-tail:])
		copy(b[n-tail:], base[n-tail:])
		count(simCase(t, fmt.Sprintf("mass in the last %d", tail), a, b, ppm))
	}
	// Every allowed threshold on a pair just around it.
	for _, p := range []int64{500000, 900000, 999000, 999999, 1000000, wire.CopyRuleOff} {
		count(simCase(t, fmt.Sprintf("ppm %d", p), base, mix(base, 1, noise, 0.0141), p))
	}
	if exits == 0 {
		t.Fatal("the early exit never ran")
	}
	// A pair across int64 flushes (more than dotChunk values).
	if !testing.Short() {
		big1 := randQ(r, dotChunk+3*simChunk+5, 1<<19)
		simCase(t, "beyond dotChunk: copy", big1, mix(big1, 1, big1, 1e-3), ppm)
		simCase(t, "beyond dotChunk: other", big1, randQ(r, len(big1), 1<<19), ppm)
	}
}

// fuzzRuns turns fuzz data into two vectors of runs: the first and second
// halves of data's 4-byte words, each word through conv and repeated
// 1 + 16·run times; from word shared on, b's words are a's (a shared tail).
// Empty when data holds no pair of words.
func fuzzRuns[T any](data []byte, run, shared uint8, conv func(uint32) T) (a, b []T) {
	m := len(data) / 8
	rl := 1 + int(run)*16
	a, b = make([]T, m*rl), make([]T, m*rl)
	for i := 0; i < m; i++ {
		x := conv(binary.LittleEndian.Uint32(data[4*i:]))
		y := conv(binary.LittleEndian.Uint32(data[4*(m+i):]))
		if i >= int(shared) {
			y = x
		}
		for k := 0; k < rl; k++ {
			a[i*rl+k], b[i*rl+k] = x, y
		}
	}
	return a, b
}

// FuzzSimilar: random-structured pairs (runs of the fuzzed integers, so the
// vectors span several chunks), the fast similar against the reference.
func FuzzSimilar(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 1, 0, 0, 0}, uint8(70), uint32(999900), uint8(0))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, uint8(200), uint32(500000), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, run uint8, ppm uint32, shared uint8) {
		a, b := fuzzRuns(data, run, shared, func(w uint32) int32 { return int32(w) >> 11 }) // |x| ≤ 2^20
		if len(a) == 0 {
			return
		}
		simCase(t, "fuzz", a, b, 500000+int64(ppm%500002))
	})
}

// cosine is cos(a, b) as a float64, for test messages.
func cosine(a, b *quantized) float64 {
	if a.norm.Sign() == 0 || b.norm.Sign() == 0 {
		return 0
	}
	d, _ := new(big.Float).SetInt(dotRef(a.q, b.q)).Float64()
	na, _ := new(big.Float).SetInt(a.norm).Float64()
	nb, _ := new(big.Float).SetInt(b.norm).Float64()
	return d / (math.Sqrt(na) * math.Sqrt(nb))
}

// BenchmarkCopyRuleParts (go test ./syncer -run X -bench CopyRuleParts):
// the fast quantize and similar beside the references, N = 8.65M f32.
func BenchmarkCopyRuleParts(b *testing.B) {
	const n = 8_650_000
	a, o := f32le(gauss(1, n, 0.01)), f32le(gauss(2, n, 0.01))
	qa, _ := quantize(a, machine.F32, n)
	qo, _ := quantize(o, machine.F32, n)
	b.Run("quantize/ref", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			quantizeRef(a, machine.F32, n)
		}
	})
	b.Run("quantize/fast", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			quantize(a, machine.F32, n)
		}
	})
	b.Run("quantize/lazy", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			quantizeLazy(a, machine.F32, n)
		}
	})
	b.Run("lazy-pair-honest", func(b *testing.B) { // what the copy rule does per honest pair
		for i := 0; i < b.N; i++ {
			x, _ := quantizeLazy(a, machine.F32, n)
			y, _ := quantizeLazy(o, machine.F32, n)
			if similar(&x, &y, wire.DefaultCopyMinCosinePpm) {
				b.Fatal("similar")
			}
		}
	})
	b.Run("similar/full-dot", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			dot(qa.q, qo.q)
		}
	})
	b.Run("similar/early-exit", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			similar(&qa, &qo, wire.DefaultCopyMinCosinePpm)
		}
	})
	b.Run("similar/copy", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			similar(&qa, &qa, wire.DefaultCopyMinCosinePpm)
		}
	})
}

// lazyCase compares compareQuantized on the lazy forms of two f32 vectors
// (and on a kept prefix of the second) with the reference on their
// integers.
func lazyCase(t testing.TB, name string, a, b []byte, n int, ppm int64) (exited bool) {
	t.Helper()
	ra, _, oka := quantizeRef(a, machine.F32, n)
	rb, _, okb := quantizeRef(b, machine.F32, n)
	if !oka || !okb {
		return false
	}
	want := similarRef(ra, rb, ppm)
	for _, order := range []bool{false, true} {
		la, _ := quantizeLazy(a, machine.F32, n)
		lb, _ := quantizeLazy(b, machine.F32, n)
		x, y := &la, &lb
		if order {
			x, y = y, x
		}
		got := compareQuantized(x, y, ppm)
		if !got.decided || got.sim != want {
			t.Fatalf("%s: lazy similar %+v, reference %v", name, got, want)
		}
		exited = exited || !got.exact
	}
	la, _ := quantizeLazy(a, machine.F32, n)
	lb, _ := quantizeLazy(b, machine.F32, n)
	if got := compareQuantized(&la, prefixOf(&lb), ppm); got.decided && got.sim != want {
		t.Fatalf("%s: on a kept prefix %+v, reference %v", name, got, want)
	}
	return exited
}

// TestSimilarLazy: the lazy forms (bounds from the values' float64 squares,
// integers computed as the early exit reaches them) give the reference's
// verdicts: honest-like, near copies swept across the threshold, scaled
// and negated copies, tiny and huge magnitudes, subnormals, and values
// whose mass sits in the last chunk.
func TestSimilarLazy(t *testing.T) {
	const n = 5*simChunk + 77
	ppm := int64(wire.DefaultCopyMinCosinePpm)
	base, other := gauss(1, n, 0.01), gauss(2, n, 0.01)
	mix := func(w float32, scale float32) []byte {
		out := make([]float32, n)
		for i := range out {
			out[i] = scale * (base[i] + w*other[i])
		}
		return f32le(out)
	}
	exits := 0
	check := func(name string, a, b []byte) {
		if lazyCase(t, name, a, b, n, ppm) {
			exits++
		}
	}
	check("honest", f32le(base), f32le(other))
	check("copy", f32le(base), f32le(base))
	check("× 2", f32le(base), mix(0, 2))
	check("negated", f32le(base), mix(0, -1))
	check("cosine 0.9", f32le(base), mix(0.4843, 1))
	check("tiny", mix(0, 1e-40), mix(0.4843, 1e-40)) // subnormals
	check("huge", mix(0, 1e36), mix(0.01, 1e36))
	crossed := map[bool]bool{}
	ra, _, _ := quantizeRef(f32le(base), machine.F32, n)
	for i := 0; i <= 200; i++ {
		b := mix(0.0138+float32(i)*0.000004, 1)
		check(fmt.Sprintf("sweep %d", i), f32le(base), b)
		rb, _, _ := quantizeRef(b, machine.F32, n)
		crossed[similarRef(ra, rb, ppm)] = true
	}
	if !crossed[true] || !crossed[false] {
		t.Fatalf("the sweep did not cross the threshold: %v", crossed)
	}
	tail := func(v []float32) []byte {
		out := make([]float32, n)
		for i := range out {
			out[i] = v[i] * 1e-6
		}
		copy(out[n-simChunk:], base[n-simChunk:])
		return f32le(out)
	}
	check("mass in the last chunk", tail(base), tail(other))
	if exits == 0 {
		t.Fatal("the early exit never ran on lazy forms")
	}
}

// FuzzSimilarLazy: two f32 vectors of runs of fuzzed bit patterns (finite
// ones), the lazy similar against the reference.
func FuzzSimilarLazy(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 64}, uint8(70), uint32(999900), uint8(1))
	f.Add([]byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 128, 0, 0, 0, 128, 63}, uint8(255), uint32(500000), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, run uint8, ppm uint32, shared uint8) {
		a, b := fuzzRuns(data, run, shared, func(w uint32) uint32 { return w &^ (1 << 30) }) // finite
		if len(a) == 0 {
			return
		}
		lazyCase(t, "fuzz", bitsLE(a), bitsLE(b), len(a), 500000+int64(ppm%500002))
	})
}
