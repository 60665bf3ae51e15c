package plugins

import (
	"context"
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
)

// Non-finite values (ABI.md §11). Wasm leaves the bits of a NaN result
// unspecified (a runtime may propagate an operand's payload or produce its
// own), so the host rewrites every NaN a rule or the outer step returns to
// one canonical quiet NaN: outputs, and so receipts, never depend on NaN
// payloads, on the runtime, or on which input carried the NaN.

const (
	canonNaN32 = 0x7fc00000
	canonNaN16 = 0x7fc0 // bf16
	canonNaN64 = 0x7ff8000000000000
)

// Aggregate implements syncer.Engine: the rule's aggregate, with NaN
// canonicalised.
func (e *Engine) Aggregate(ctx context.Context, in syncer.AggregateInput) (syncer.AggregateOutput, error) {
	out, err := e.aggregate(ctx, in)
	if err == nil && e.pool == nil { // a worker's answer is canonical already
		canonicalF32(out.Aggregate)
		for i, s := range out.Scores {
			if s != s {
				out.Scores[i] = math.Float64frombits(canonNaN64)
			}
		}
	}
	return out, err
}

// OuterStep implements syncer.Engine: the new weights and momentum, with
// NaN canonicalised.
func (e *Engine) OuterStep(ctx context.Context, in syncer.OuterStepInput) (syncer.OuterStepOutput, error) {
	out, err := e.outerStep(ctx, in)
	if err == nil && e.pool == nil {
		if in.Dtype == machine.BF16 {
			canonicalBF16(out.Weights)
		} else {
			canonicalF32(out.Weights)
		}
		canonicalF32(out.Momentum)
	}
	return out, err
}

func canonicalF32(b []byte) {
	n := len(b) / 4
	if n == 0 {
		return
	}
	// Eight bytes at a time: a NaN has all exponent bits set, which almost
	// no value of a model has; only such pairs are looked at closely.
	head, words, tail := aligned64(b[:4*n], 4)
	canonicalF32Slow(head)
	for i, v := range words {
		if v&0x7f800000_00000000 == 0x7f800000_00000000 || v&0x7f800000 == 0x7f800000 {
			canonicalF32Slow(b[len(head)+8*i : len(head)+8*i+8])
		}
	}
	canonicalF32Slow(tail)
}

// aligned64 splits b into a head, the 8-byte words from the first 8-byte
// aligned address whose offset from b is a multiple of unit (b's bytes in
// place), and the tail.
func aligned64(b []byte, unit int) (head []byte, words []uint64, tail []byte) {
	if len(b) < 16 {
		return b, nil, nil
	}
	skip := int(-uintptr(unsafe.Pointer(&b[0])) & 7)
	if skip%unit != 0 { // the words would straddle values
		return b, nil, nil
	}
	n := (len(b) - skip) / 8
	words = unsafe.Slice((*uint64)(unsafe.Pointer(&b[skip])), n)
	return b[:skip], words, b[skip+8*n:]
}

func canonicalF32Slow(b []byte) {
	for i := 0; i+4 <= len(b); i += 4 {
		// exponent all ones and a non-zero mantissa: |v| > +Inf as an
		// unsigned integer.
		if v := binary.LittleEndian.Uint32(b[i:]); v&0x7fffffff > 0x7f800000 && v != canonNaN32 {
			binary.LittleEndian.PutUint32(b[i:], canonNaN32)
		}
	}
}

func canonicalBF16(b []byte) {
	n := len(b) / 2
	if n == 0 {
		return
	}
	const exps = 0x7f80_7f80_7f80_7f80
	head, words, tail := aligned64(b[:2*n], 2)
	canonicalBF16Slow(head)
	for i, v := range words {
		// a lane whose exponent bits are all set
		x := v&exps ^ exps
		if x&0x7f80 == 0 || x&0x7f80_0000 == 0 || x&0x7f80_0000_0000 == 0 || x&0x7f80_0000_0000_0000 == 0 {
			canonicalBF16Slow(b[len(head)+8*i : len(head)+8*i+8])
		}
	}
	canonicalBF16Slow(tail)
}

func canonicalBF16Slow(b []byte) {
	for i := 0; i+2 <= len(b); i += 2 {
		v := binary.LittleEndian.Uint16(b[i:])
		if v&0x7f80 == 0x7f80 && v&0x007f != 0 && v != canonNaN16 {
			binary.LittleEndian.PutUint16(b[i:], canonNaN16)
		}
	}
}
