package syncer

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/bits"

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
// magnitude, with the exact sum of their squares and, per chunk of
// simChunk values, the sum of the squares from that chunk on (for
// similar's early exit). An input kept for a later round's stale rule
// (quantCache) holds only a prefix of q: n is the full length.
type quantized struct {
	q    []int32
	n    int
	norm *big.Int // Σ q² (zero: the input is all zero and copies nothing)
	// rest[c] is Σ_{k ≥ c·simChunk} q[k]² rounded to a float64 (each from
	// the exact 128-bit integer, so within a relative 2^-52 of it), for
	// c = 0 … ⌈len(q)/simChunk⌉; rest[0] is the norm's.
	rest []float64
}

// quantize maps each value v to round_half_even(v · 2^(19 − E)), where
// 2^E ≤ max|v| < 2^(E+1) (E from the largest value's biased exponent, so
// subnormals count with exponent field 1): |q| ≤ 2^20. ok is false when a
// value is not finite (the finite verifier rejects those before).
//
// This is copies.md §2's integer definition (m / 2^(maxExp − e + 4) rounded
// half to even; the reference is quantizeRef in copies_ref_test.go) computed
// in float64: with 1 ≤ maxExp ≤ 254 the scale 2^(146 − maxExp) is a normal
// float64, and v · scale is exact (v has at most 24 significant bits and
// |v · scale| lies in [2^-257, 2^20], far inside float64's normal range),
// so math.RoundToEven of it is the exact integer rounding. Go never sets
// flush-to-zero, so float32 subnormals widen exactly.
func quantize(vals []byte, dtype machine.Dtype, n int) (quantized, bool) {
	if dtype == machine.BF16 {
		return quantizeBF16(vals[:2*n], n)
	}
	return quantizeF32(vals[:4*n], n)
}

// quantizeF32 is quantize for F32 values: a pass for the largest magnitude
// on the raw bits, then one that scales, rounds and sums the squares.
func quantizeF32(vals []byte, n int) (quantized, bool) {
	var maxAbs uint32
	for k := 0; k < n; k++ {
		maxAbs = max(maxAbs, binary.LittleEndian.Uint32(vals[4*k:])&0x7fffffff)
	}
	if maxAbs >= 0x7f800000 {
		return quantized{}, false
	}
	scale := quantScale(maxAbs)
	out := quantized{q: make([]int32, n), n: n}
	sums := make([]int64, (n+simChunk-1)/simChunk)
	for c := range sums {
		lo, hi := c*simChunk, min((c+1)*simChunk, n)
		q, v := out.q[lo:hi], vals[4*lo:4*hi]
		var s int64
		for k := range q {
			x := int32(math.RoundToEven(float64(math.Float32frombits(binary.LittleEndian.Uint32(v[4*k:]))) * scale))
			q[k] = x
			s += int64(x) * int64(x)
		}
		sums[c] = s
	}
	out.setNorms(sums)
	return out, true
}

// quantizeBF16 is quantize for BF16 values (widened to their f32 bits).
func quantizeBF16(vals []byte, n int) (quantized, bool) {
	var maxAbs uint32
	for k := 0; k < n; k++ {
		maxAbs = max(maxAbs, uint32(binary.LittleEndian.Uint16(vals[2*k:])&0x7fff)<<16)
	}
	if maxAbs >= 0x7f800000 {
		return quantized{}, false
	}
	scale := quantScale(maxAbs)
	out := quantized{q: make([]int32, n), n: n}
	sums := make([]int64, (n+simChunk-1)/simChunk)
	for c := range sums {
		lo, hi := c*simChunk, min((c+1)*simChunk, n)
		q, v := out.q[lo:hi], vals[2*lo:2*hi]
		var s int64
		for k := range q {
			x := int32(math.RoundToEven(float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(v[2*k:]))<<16)) * scale))
			q[k] = x
			s += int64(x) * int64(x)
		}
		sums[c] = s
	}
	out.setNorms(sums)
	return out, true
}

// quantScale is 2^(146 − max(E, 1)) for the largest magnitude's bits
// maxAbs (E its exponent field, ≤ 254): v · quantScale = v · 2^(19 − (E −
// 127)), subnormals counting with exponent field 1.
func quantScale(maxAbs uint32) float64 {
	e := max(maxAbs>>23, 1)
	return math.Float64frombits(uint64(1023+146-e) << 52)
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
	out.setNorms(sums)
	return out
}

// setNorms sets the norm and the suffix sums from each chunk's sum of
// squares (each < 2^53: simChunk values of at most 2^40), adding exactly in
// 128 bits.
func (x *quantized) setNorms(sums []int64) {
	x.rest = make([]float64, len(sums)+1)
	var hi, lo uint64
	for c := len(sums) - 1; c >= 0; c-- {
		var carry uint64
		lo, carry = bits.Add64(lo, uint64(sums[c]), 0)
		hi += carry
		x.rest[c] = float64(hi)*0x1p64 + float64(lo)
	}
	x.norm = new(big.Int).SetUint64(hi)
	x.norm.Lsh(x.norm, 64).Or(x.norm, new(big.Int).SetUint64(lo))
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

// simMargin is the early exit's safety margin, relative to √(A·B): far
// above the float64 rounding of its bound (a few 2^-53 relative, see
// similarity), so an exit is a proof.
const simMargin = 1e-9

// similarity is how similar compared a and b: sim, the verdict; decided is
// false only when b holds a prefix of its values (quantCache) and the
// early exit could not decide within it. exact says cosine is the exact
// cosine (rounded to a float64); else the pair left early and cosine is an
// upper bound of it.
type similarity struct {
	sim, decided, exact bool
	cosine              float64
}

// similar says whether cos(a, b) ≥ ppm / 10^6, exactly:
// dot > 0 and dot² · 10^12 ≥ ppm² · Σa² · Σb².
func similar(a, b *quantized, ppm int64) bool {
	return compareQuantized(a, b, ppm).sim
}

// compareQuantized is similar with an exact early exit: the dot is summed
// chunk by chunk, and after each chunk Cauchy–Schwarz bounds what is left:
// dot ≤ prefix + √(A_rest · B_rest). When that bound is below
// (ppm/10^6 − simMargin) · √(A · B) — computed in float64, whose rounding
// errors are below 2^-48 · √(A · B) since |prefix|, √(A_rest · B_rest) ≤
// √(A · B) — the pair is certainly not similar (dot ≤ 0, or dot² < t²AB).
// Otherwise the full dot decides with the exact test above. One of a, b
// may hold only a prefix of its values (a multiple of simChunk of them).
func compareQuantized(a, b *quantized, ppm int64) similarity {
	if a.norm.Sign() == 0 || b.norm.Sign() == 0 || ppm > wire.CopyRuleOff-1 {
		return similarity{decided: true, exact: true}
	}
	n := a.n
	avail := min(len(a.q), len(b.q))
	ab := math.Sqrt(a.rest[0] * b.rest[0])
	t := math.Abs(float64(ppm)) / 1e6
	limit := (t - simMargin) * ab
	total := new(big.Int)
	var totalF float64
	var acc int64
	for lo := 0; lo+simChunk <= avail || (lo < avail && avail == n); lo += simChunk {
		hi := min(lo+simChunk, n)
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
		if bound := totalF + float64(acc) + math.Sqrt(a.rest[c]*b.rest[c]); bound < limit {
			return similarity{decided: true, cosine: bound / ab}
		}
	}
	if avail < n {
		return similarity{}
	}
	d := total.Add(total, big.NewInt(acc))
	df, _ := d.Float64()
	out := similarity{decided: true, exact: true, cosine: df / ab}
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
