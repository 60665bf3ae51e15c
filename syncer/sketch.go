package syncer

import (
	"encoding/binary"
	"math/bits"
)

// The input sketch (docs/protocol/copies.md §7): a seeded count sketch of an
// input's quantized values (copies.go's quantize), kept in the commit, so the
// stale rule can compare an input with the same trainer's inputs of every
// earlier round of the run without keeping their payloads. A replay of a
// stored gradient has exactly the values, so exactly the sketch, of the
// original; honest inputs of different rounds point elsewhere (cosine
// 0.2–0.9 in the free-rider benchmark) and their sketches do too.

// sketchMix is SplitMix64's output function: a fixed bijection of 64-bit
// words that spreads consecutive inputs over all bits.
func sketchMix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// sketchOf is the count sketch of q with dim buckets (a power of two) under
// seed (wire.SketchSeed): for each index k, h = sketchMix(seed +
// k·0x9e3779b97f4a7c15) (mod 2^64); value q[k] is added to bucket h mod dim
// when the top bit of h is 0 and subtracted when it is 1, in int64 (|q| <
// 2^20, so exact below 2^43 values per bucket). The buckets are then shifted
// right by s = max(0, bitlen(max |bucket|) − 14), rounded half to even on
// the magnitude, into int16 values (|v| ≤ 2^14), written big-endian: 2·dim
// bytes.
func sketchOf(q []int32, seed uint64, dim int) []byte {
	acc := make([]int64, dim)
	mask := uint64(dim - 1)
	for k, v := range q {
		h := sketchMix(seed + uint64(k)*0x9e3779b97f4a7c15)
		if h>>63 == 0 {
			acc[h&mask] += int64(v)
		} else {
			acc[h&mask] -= int64(v)
		}
	}
	var m uint64
	for _, a := range acc {
		m = max(m, absU64(a))
	}
	s := max(0, bits.Len64(m)-14)
	out := make([]byte, 2*dim)
	for b, a := range acc {
		v := roundShift(absU64(a), uint(s))
		if a < 0 {
			v = -v
		}
		binary.BigEndian.PutUint16(out[2*b:], uint16(int16(v)))
	}
	return out
}

func absU64(a int64) uint64 {
	if a < 0 {
		return uint64(-a)
	}
	return uint64(a)
}

// sketchValues reads a sketch's int16 values as a quantized vector, for
// similar (copies.go): the copy rule's exact integer cosine and threshold.
// ok is false for a sketch of the wrong length.
func sketchValues(sk []byte, dim int) (quantized, bool) {
	if len(sk) != 2*dim {
		return quantized{}, false
	}
	q := make([]int32, dim)
	for b := range q {
		q[b] = int32(int16(binary.BigEndian.Uint16(sk[2*b:])))
	}
	return newQuantized(q), true
}
