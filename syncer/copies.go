package syncer

import (
	"encoding/binary"
	"fmt"
	"math/big"

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

// quantBits is the resolution of the quantized values: |q| < 2^20.
const quantBits = 20

// quantized is one input's values as integers relative to its own largest
// magnitude, with the exact sum of their squares.
type quantized struct {
	q    []int32
	norm *big.Int // Σ q² (zero: the input is all zero and copies nothing)
}

// f32Bits returns value k of vals (F32 or BF16, little-endian) as float32
// bits.
func f32Bits(vals []byte, dtype machine.Dtype, k int) uint32 {
	if dtype == machine.BF16 {
		return uint32(binary.LittleEndian.Uint16(vals[2*k:])) << 16
	}
	return binary.LittleEndian.Uint32(vals[4*k:])
}

// quantize maps each value v to round_half_even(v · 2^(19 − E)), where
// 2^E ≤ max|v| < 2^(E+1) (E from the largest value's biased exponent, so
// subnormals count with exponent field 1): |q| < 2^20. ok is false when a
// value is not finite (the finite verifier rejects those before).
func quantize(vals []byte, dtype machine.Dtype, n int) (quantized, bool) {
	maxExp := uint32(0)
	for k := 0; k < n; k++ {
		e := f32Bits(vals, dtype, k) >> 23 & 0xff
		if e == 0xff {
			return quantized{}, false
		}
		maxExp = max(maxExp, e)
	}
	maxExp = max(maxExp, 1)
	out := quantized{q: make([]int32, n)}
	for k := 0; k < n; k++ {
		b := f32Bits(vals, dtype, k)
		e, m := b>>23&0xff, uint64(b&0x7fffff)
		if e == 0 {
			e = 1
		} else {
			m |= 1 << 23
		}
		// v = m · 2^(e−150); q = v · 2^(19 − (maxExp − 127)) = m · 2^(e − maxExp − 4)
		q := roundShift(m, uint(maxExp-e)+24-quantBits)
		if b>>31 != 0 {
			q = -q
		}
		out.q[k] = int32(q)
	}
	out.norm = dot(out.q, out.q)
	return out, true
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

// dotChunk bounds a run of products summed in an int64: each |product| <
// 2^40, so 2^22 of them stay below 2^62.
const dotChunk = 1 << 22

// dot is Σ a[k]·b[k], exact: int64 sums over chunks, added as big integers.
func dot(a, b []int32) *big.Int {
	total := new(big.Int)
	for lo := 0; lo < len(a); lo += dotChunk {
		hi := min(lo+dotChunk, len(a))
		var acc int64
		for k, x := range a[lo:hi] {
			acc += int64(x) * int64(b[lo+k])
		}
		total.Add(total, big.NewInt(acc))
	}
	return total
}

// similar says whether cos(a, b) ≥ ppm / 10^6, exactly:
// dot > 0 and dot² · 10^12 ≥ ppm² · Σa² · Σb².
func similar(a, b *quantized, ppm int64) bool {
	if a.norm.Sign() == 0 || b.norm.Sign() == 0 || ppm > wire.CopyRuleOff-1 {
		return false
	}
	d := dot(a.q, b.q)
	if d.Sign() <= 0 {
		return false
	}
	lhs := new(big.Int).Mul(d, d)
	lhs.Mul(lhs, big.NewInt(1_000_000_000_000))
	rhs := new(big.Int).Mul(big.NewInt(ppm), big.NewInt(ppm))
	rhs.Mul(rhs, a.norm).Mul(rhs, b.norm)
	return lhs.Cmp(rhs) >= 0
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
