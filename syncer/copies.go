package syncer

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"slices"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// The copy rule (docs/protocol/copies.md): among the inputs of one round
// and fragment that passed every per-input check, an input whose decoded
// values point the same way as another's (cosine similarity at least the
// spec's threshold) is a copy. The one recorded in a strictly earlier block
// is the original and is paid; the later one is rejected and names it
// (CopyOf), and the chain slashes it. Two such inputs recorded in the same
// block (the proposer orders a block, so "first" there is the proposer's
// choice) both name each other: neither is paid, neither slashed.
//
// Everything here is integer arithmetic on the values' bits: every
// validator computes the same verdicts on any machine.

// quantBits is the resolution of the quantized values: |q| ≤ 2^20.
const quantBits = 20

// simChunk is the number of values per chunk of similar's early exit; it
// divides dotChunk.
const simChunk = 1 << 12

// quantized is one input's values as integers relative to its own largest
// magnitude (copies.md §2). It is built lazily: quantizeLazy reads the
// values once for their largest magnitude and, per chunk of simChunk
// values, bounds of the chunk's sum of squares; the exact integers are
// computed chunk by chunk as similar's early exit reaches them (upto), and
// all of them, with the exact norm, only when a pair needs the full dot
// (full). An input kept for a later round's stale rule (quantCache) holds a
// prefix of its integers and no source.
type quantized struct {
	n    int
	zero bool     // every integer is 0: the input copies nothing
	q    []int32  // the exact integers of the first len(q) values
	sq   []int64  // Σ q² of each chunk of q (each < 2^53)
	norm *big.Int // Σ q², exact, once q holds all n values
	// hi[c] and lo[c] bound Σ_{k ≥ c·simChunk} q[k]², c = 0 … chunks
	// (hi[chunks] = lo[chunks] = 0): from the float64 sums of the values'
	// squares while lazy, then the float64 roundings of the exact sums
	// (within a relative 2^-52: similar's margin covers that).
	hi, lo []float64
	// The source of the integers not computed yet (nil: none).
	src   []byte
	bf16  bool
	scale float64
}

// quantize is quantizeLazy with every integer and the exact norm computed.
func quantize(vals []byte, dtype machine.Dtype, n int) (quantized, bool) {
	q, ok := quantizeLazy(vals, dtype, n)
	if ok {
		q.full()
	}
	return q, ok
}

// quantizeLazy maps each value v to round_half_even(v · 2^(19 − E)), where
// 2^E ≤ max|v| < 2^(E+1) (E from the largest value's biased exponent, so
// subnormals count with exponent field 1): |q| ≤ 2^20. ok is false when a
// value is not finite (the finite verifier rejects those before). The
// result reads vals until its integers are all computed (full).
//
// This is copies.md §2's integer definition (m / 2^(maxExp − e + 4) rounded
// half to even; the reference is quantizeRef in copies_ref_test.go) computed
// in float64: with 1 ≤ maxExp ≤ 254 the scale 2^(146 − maxExp) is a normal
// float64, and v · scale is exact (v has at most 24 significant bits and
// |v · scale| lies in [2^-257, 2^20], far inside float64's normal range),
// so math.RoundToEven of it is the exact integer rounding. Go never sets
// flush-to-zero, so float32 subnormals widen exactly.
func quantizeLazy(vals []byte, dtype machine.Dtype, n int) (quantized, bool) {
	chunks := (n + simChunk - 1) / simChunk
	sums := make([]float64, chunks) // Σ v² per chunk, float64
	var maxAbs uint32
	bf16 := dtype == machine.BF16
	if bf16 {
		vals = vals[:2*n]
		for c := range sums {
			v := vals[2*c*simChunk : 2*min((c+1)*simChunk, n)]
			var s0, s1 float64
			k := 0
			for ; k+4 <= len(v); k += 4 {
				b0 := uint32(binary.LittleEndian.Uint16(v[k:])&0x7fff) << 16
				b1 := uint32(binary.LittleEndian.Uint16(v[k+2:])&0x7fff) << 16
				maxAbs = max(maxAbs, b0, b1)
				x0, x1 := float64(math.Float32frombits(b0)), float64(math.Float32frombits(b1))
				s0 += x0 * x0
				s1 += x1 * x1
			}
			for ; k < len(v); k += 2 {
				b := uint32(binary.LittleEndian.Uint16(v[k:])&0x7fff) << 16
				maxAbs = max(maxAbs, b)
				x := float64(math.Float32frombits(b))
				s0 += x * x
			}
			sums[c] = s0 + s1
		}
	} else {
		vals = vals[:4*n]
		for c := range sums {
			v := vals[4*c*simChunk : 4*min((c+1)*simChunk, n)]
			var s0, s1, s2, s3 float64
			k := 0
			for ; k+16 <= len(v); k += 16 {
				b0 := binary.LittleEndian.Uint32(v[k:]) & 0x7fffffff
				b1 := binary.LittleEndian.Uint32(v[k+4:]) & 0x7fffffff
				b2 := binary.LittleEndian.Uint32(v[k+8:]) & 0x7fffffff
				b3 := binary.LittleEndian.Uint32(v[k+12:]) & 0x7fffffff
				maxAbs = max(maxAbs, b0, b1, b2, b3)
				x0, x1 := float64(math.Float32frombits(b0)), float64(math.Float32frombits(b1))
				x2, x3 := float64(math.Float32frombits(b2)), float64(math.Float32frombits(b3))
				s0 += x0 * x0
				s1 += x1 * x1
				s2 += x2 * x2
				s3 += x3 * x3
			}
			for ; k < len(v); k += 4 {
				b := binary.LittleEndian.Uint32(v[k:]) & 0x7fffffff
				maxAbs = max(maxAbs, b)
				x := float64(math.Float32frombits(b))
				s0 += x * x
			}
			sums[c] = (s0 + s1) + (s2 + s3)
		}
	}
	if maxAbs >= 0x7f800000 {
		return quantized{}, false
	}
	scale := math.Float64frombits(uint64(1023+146-max(maxAbs>>23, 1)) << 52) // 2^(146 − max(E, 1))
	out := quantized{n: n, src: vals, bf16: bf16, scale: scale,
		zero: math.RoundToEven(float64(math.Float32frombits(maxAbs))*scale) == 0,
		hi:   make([]float64, chunks+1), lo: make([]float64, chunks+1)}
	if n == 0 || out.zero {
		out.src = nil
		out.q, out.norm = make([]int32, n), new(big.Int)
		out.sq = make([]int64, chunks)
		clear(out.hi)
		return out, true
	}
	// Per chunk of L values, x = v·scale (exact) and q = round(x), so
	// ‖q‖ lies within ‖x‖ ± ½√L (|q − x| ≤ ½ each); ‖x‖² = scale²·Σv², and
	// the float64 sum of L squares is within a relative (L+2)·2^-53 < γ of
	// it. The suffix sums of the bounds are widened by their own rounding.
	const gamma = 1e-11
	s2 := scale * scale
	var hs, ls float64
	for c := chunks - 1; c >= 0; c-- {
		l := float64(min((c+1)*simChunk, n) - c*simChunk)
		x := math.Sqrt(sums[c] * s2)
		h := (x*(1+gamma) + 0.5*math.Sqrt(l)) * (1 + gamma)
		lw := max(0, x*(1-gamma)-0.5*math.Sqrt(l)*(1+gamma)) * (1 - gamma)
		hs += h * h
		ls += lw * lw
		out.hi[c] = hs * (1 + float64(chunks-c+4)*0x1p-50)
		out.lo[c] = ls * (1 - float64(chunks-c+4)*0x1p-50)
	}
	return out, true
}

// upto computes the exact integers of the first k values (k a multiple of
// simChunk, or n); false when they are not there and no source is left (a
// kept prefix).
func (x *quantized) upto(k int) bool {
	if len(x.q) >= k {
		return true
	}
	if x.src == nil {
		return false
	}
	if x.q == nil {
		x.q = make([]int32, 0, min(x.n, 64*simChunk))
	}
	for len(x.q) < k {
		lo := len(x.q)
		hi := min(lo+simChunk, x.n)
		x.q = slices.Grow(x.q, hi-lo)[:hi]
		q := x.q[lo:hi]
		var s int64
		if x.bf16 {
			v := x.src[2*lo : 2*hi]
			for i := range q {
				y := int32(math.RoundToEven(float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(v[2*i:]))<<16)) * x.scale))
				q[i] = y
				s += int64(y) * int64(y)
			}
		} else {
			v := x.src[4*lo : 4*hi]
			for i := range q {
				y := int32(math.RoundToEven(float64(math.Float32frombits(binary.LittleEndian.Uint32(v[4*i:]))) * x.scale))
				q[i] = y
				s += int64(y) * int64(y)
			}
		}
		x.sq = append(x.sq, s)
	}
	return true
}

// full computes every integer and the exact norm, and sets hi and lo to
// the exact suffix sums (rounded to float64); the source is let go.
func (x *quantized) full() {
	if x.norm != nil || !x.upto(x.n) {
		return // done; or a kept prefix, which compareQuantized never completes
	}
	x.src = nil
	x.setNorms(x.sq)
}

// newQuantized is q with its norms (sketchValues; tests).
func newQuantized(q []int32) quantized {
	out := quantized{q: q, n: len(q)}
	sums := make([]int64, (len(q)+simChunk-1)/simChunk)
	for c := range sums {
		var s int64
		for _, x := range q[c*simChunk : min((c+1)*simChunk, len(q))] {
			s += int64(x) * int64(x)
		}
		sums[c] = s
	}
	out.sq = sums
	out.setNorms(sums)
	return out
}

// setNorms sets the exact norm and the suffix sums from each chunk's sum of
// squares (each < 2^53: simChunk values of at most 2^40), adding exactly in
// 128 bits.
func (x *quantized) setNorms(sums []int64) {
	x.hi = make([]float64, len(sums)+1)
	var hi, lo uint64
	for c := len(sums) - 1; c >= 0; c-- {
		var carry uint64
		lo, carry = bits.Add64(lo, uint64(sums[c]), 0)
		hi += carry
		x.hi[c] = float64(hi)*0x1p64 + float64(lo)
	}
	x.lo = x.hi
	x.norm = new(big.Int).SetUint64(hi)
	x.norm.Lsh(x.norm, 64).Or(x.norm, new(big.Int).SetUint64(lo))
	x.zero = x.norm.Sign() == 0
}

// roundShift is m / 2^s rounded half to even.
func roundShift(m uint64, s uint) int64 {
	if s >= 64 {
		return 0
	}
	q, rem := m>>s, m&(1<<s-1)
	half := uint64(1) << s >> 1
	if rem > half || (rem == half && s > 0 && q&1 == 1) {
		q++
	}
	return int64(q)
}

// dotChunk bounds a run of products summed in an int64: each |product| ≤
// 2^40, so 2^22 of them stay below 2^62.
const dotChunk = 1 << 22

// dot is Σ a[k]·b[k], exact: int64 sums over chunks, added as big integers.
func dot(a, b []int32) *big.Int {
	total := new(big.Int)
	for lo := 0; lo < len(a); lo += dotChunk {
		hi := min(lo+dotChunk, len(a))
		total.Add(total, big.NewInt(dot64(a[lo:hi], b[lo:hi])))
	}
	return total
}

// dot64 is Σ a[k]·b[k] in an int64 (len(a) ≤ dotChunk), in four
// accumulators (integer sums: the order does not change the result).
func dot64(a, b []int32) int64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 int64
	k := 0
	for ; k+4 <= len(a); k += 4 {
		s0 += int64(a[k]) * int64(b[k])
		s1 += int64(a[k+1]) * int64(b[k+1])
		s2 += int64(a[k+2]) * int64(b[k+2])
		s3 += int64(a[k+3]) * int64(b[k+3])
	}
	for ; k < len(a); k++ {
		s0 += int64(a[k]) * int64(b[k])
	}
	return s0 + s1 + s2 + s3
}

// simMargin is the early exit's safety margin, relative to √(A_hi·B_hi):
// far above the float64 rounding of its bound (a few 2^-53 relative, see
// compareQuantized), so an exit is a proof.
const simMargin = 1e-9

// similarity is how compareQuantized compared a and b: sim, the verdict;
// decided is false only when one holds a prefix of its integers
// (quantCache) and the early exit could not decide within it. exact says
// cosine is the exact cosine (rounded to a float64); else the pair left
// early and cosine is an upper bound of it.
type similarity struct {
	sim, decided, exact bool
	cosine              float64
}

// similar says whether cos(a, b) ≥ ppm / 10^6, exactly:
// dot > 0 and dot² · 10^12 ≥ ppm² · Σa² · Σb².
func similar(a, b *quantized, ppm int64) bool {
	return compareQuantized(a, b, ppm).sim
}

// compareQuantized is similar with an exact early exit. The dot is summed
// chunk by chunk, and after each chunk Cauchy–Schwarz bounds what is left:
// dot ≤ prefix + √(A_rest · B_rest) ≤ prefix + √(hi_a · hi_b). When that is
// below t·√(lo_a(0) · lo_b(0)) − simMargin·√(hi_a(0) · hi_b(0)), t =
// ppm/10^6 — computed in float64, whose rounding errors are below
// 2^-48 · √(hi_a(0) · hi_b(0)) since |prefix|, √(A_rest · B_rest) ≤ √(A · B)
// — then dot < t·√(A · B): the pair is certainly not similar (dot ≤ 0, or
// dot² < t²AB). Otherwise the full dot decides with the exact test above.
// Either side may hold only a prefix of its integers (a multiple of
// simChunk); the result is then undecided when the prefix was not enough.
func compareQuantized(a, b *quantized, ppm int64) similarity {
	if a.zero || b.zero || ppm > wire.CopyRuleOff-1 {
		return similarity{decided: true, exact: true}
	}
	n := a.n
	t := math.Abs(float64(ppm)) / 1e6
	lower := math.Sqrt(a.lo[0] * b.lo[0])
	limit := t*lower - simMargin*math.Sqrt(a.hi[0]*b.hi[0])
	total := new(big.Int)
	var totalF float64
	var acc int64
	for lo := 0; lo < n; lo += simChunk {
		hi := min(lo+simChunk, n)
		if !a.upto(hi) || !b.upto(hi) {
			return similarity{}
		}
		acc += dot64(a.q[lo:hi], b.q[lo:hi])
		if hi%dotChunk == 0 {
			total.Add(total, big.NewInt(acc))
			acc = 0
			totalF, _ = total.Float64()
		}
		if hi == n {
			break
		}
		c := hi / simChunk
		if bound := totalF + float64(acc) + math.Sqrt(a.hi[c]*b.hi[c]); bound < limit {
			return similarity{decided: true, cosine: bound / lower}
		}
	}
	a.full()
	b.full()
	d := total.Add(total, big.NewInt(acc))
	df, _ := d.Float64()
	out := similarity{decided: true, exact: true, cosine: df / math.Sqrt(a.hi[0]*b.hi[0])}
	if d.Sign() <= 0 {
		return out
	}
	lhs := new(big.Int).Mul(d, d)
	lhs.Mul(lhs, big.NewInt(1_000_000_000_000))
	rhs := new(big.Int).Mul(big.NewInt(ppm), big.NewInt(ppm))
	rhs.Mul(rhs, a.norm).Mul(rhs, b.norm)
	out.sim = lhs.Cmp(rhs) >= 0
	return out
}

// markCopies applies the copy rule to one fragment's inputs (commit order)
// whose values are values[j] (nil for an input already rejected): heights
// gives each input's record block. Each copy gets Rejected and CopyOf; an
// input is compared with every other kept one, and names the earliest
// (lowest height, then commit order) input it is similar to — in an
// earlier block, or in its own block when that one was first in commit
// order too (then they name each other).
func markCopies(inputs []wire.CommitInput, values [][]byte, heights []int64, dtype machine.Dtype, n int, ppm int64) {
	if ppm >= wire.CopyRuleOff {
		return
	}
	qs := make([]*quantized, len(inputs))
	for j, v := range values {
		if v == nil || inputs[j].Rejected != "" {
			continue
		}
		if q, ok := quantize(v, dtype, n); ok {
			qs[j] = &q
		}
	}
	markCopiesQ(inputs, qs, heights, ppm)
}

// markCopiesQ is markCopies over the inputs' quantized values (nil: not
// compared: rejected before, or not finite).
func markCopiesQ(inputs []wire.CommitInput, qs []*quantized, heights []int64, ppm int64) {
	if ppm >= wire.CopyRuleOff {
		return
	}
	// Similarity is symmetric: each unordered pair is computed once.
	sim := make(map[[2]int]bool)
	similarPair := func(j, k int) bool {
		key := [2]int{min(j, k), max(j, k)}
		v, ok := sim[key]
		if !ok {
			v = similar(qs[key[0]], qs[key[1]], ppm)
			sim[key] = v
		}
		return v
	}
	copyOf := make([]int, len(inputs))
	for j := range copyOf {
		copyOf[j] = -1
	}
	for j := range inputs {
		if qs[j] == nil {
			continue
		}
		for k := range inputs {
			if k == j || qs[k] == nil || heights[k] > heights[j] {
				continue
			}
			if c := copyOf[j]; c >= 0 && (heights[c] < heights[k] || (heights[c] == heights[k] && c < k)) {
				continue // already names an earlier one
			}
			if similarPair(j, k) {
				copyOf[j] = k
			}
		}
	}
	for j, k := range copyOf {
		if k < 0 {
			continue
		}
		in := &inputs[j]
		in.CopyOf = inputs[k].TrainerDID
		if heights[k] < heights[j] {
			in.Rejected = fmt.Sprintf("copy of %s's input (recorded at height %d, this one at %d)", inputs[k].TrainerDID, heights[k], heights[j])
		} else {
			in.Rejected = fmt.Sprintf("copy of %s's input recorded in the same block (%d): neither is paid", inputs[k].TrainerDID, heights[j])
		}
	}
}
