package syncer

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// NativeEngine is the built-in Go implementation of the Engine seam: Mean
// aggregation, a finiteness verifier and the Nesterov outer step. The Wasm
// plugin host replaces it in production; it stays for nodes started with
// --engine native and as a reference in tests.
type NativeEngine struct{}

// NewNativeEngine returns the native engine.
func NewNativeEngine() *NativeEngine { return &NativeEngine{} }

// Profile implements Engine.
func (*NativeEngine) Profile() EngineProfile {
	return EngineProfile{Engine: "native-go/v1", Hash: wire.SHA256([]byte(machine.NativeEngineID)), Details: json.RawMessage(`{}`)}
}

// ResolveRule implements Engine: only Mean is native.
func (*NativeEngine) ResolveRule(_ context.Context, ref string, params json.RawMessage, k, m int) (RuleRef, error) {
	name := strings.TrimSpace(ref)
	if name == "" {
		name = "Mean"
	}
	if name != "Mean" && name != "Mean{}" {
		return RuleRef{}, machine.Errf(machine.KindInvalid, "aggregation %q is not available in the native engine (only Mean); start the node with the wasm engine", ref)
	}
	if len(params) > 0 && string(params) != "{}" && string(params) != "null" {
		return RuleRef{}, machine.Errf(machine.KindInvalid, "aggregation Mean takes no parameters, got %s", params)
	}
	return RuleRef{Name: "Mean", Hash: machine.NativeHash("Mean"), Params: json.RawMessage(`{}`)}, nil
}

// ResolveVerifier implements Engine: only Finite is native.
func (*NativeEngine) ResolveVerifier(_ context.Context, ref string) (RuleRef, error) {
	if ref != "Finite" {
		return RuleRef{}, machine.Errf(machine.KindInvalid, "verifier %q is not available in the native engine (only Finite)", ref)
	}
	return RuleRef{Name: "Finite", Hash: machine.NativeHash("Finite"), Params: json.RawMessage(`{}`)}, nil
}

// ResolveOuter implements Engine.
func (*NativeEngine) ResolveOuter(context.Context) (RuleRef, error) {
	return RuleRef{Name: "Nesterov", Hash: machine.NativeHash("Nesterov"), Params: json.RawMessage(`{}`)}, nil
}

// Aggregate implements Engine (Mean).
func (*NativeEngine) Aggregate(ctx context.Context, in AggregateInput) (AggregateOutput, error) {
	if in.Rule.Name != "Mean" {
		return AggregateOutput{}, fmt.Errorf("native engine: rule %q", in.Rule.Name)
	}
	k := len(in.Inputs)
	if k == 0 {
		return AggregateOutput{}, &RuleFailure{Rule: "Mean", Code: 1, Reason: "no inputs"}
	}
	vals := make([][]float32, k)
	for i, b := range in.Inputs {
		v, err := DecodeValues(in.Dtype, b, in.N)
		if err != nil {
			return AggregateOutput{}, fmt.Errorf("native mean input %d: %w", i, err)
		}
		vals[i] = v
	}
	// Same arithmetic as the Wasm built-in (plugins/builtin/src/mean.c): a
	// float64 sum in canonical input order, one float64 division, one
	// rounding to float32. plugins' TestNativeEngineMatchesPlugins proves it.
	out := make([]float32, in.N)
	kf := float64(k)
	for j := 0; j < in.N; j++ {
		if j&0xfffff == 0 && ctx.Err() != nil {
			return AggregateOutput{}, ctx.Err()
		}
		var s float64
		for i := 0; i < k; i++ {
			s += float64(vals[i][j])
		}
		out[j] = float32(s / kf)
	}
	sel := make([]bool, k)
	for i := range sel {
		sel[i] = true
	}
	return AggregateOutput{Aggregate: EncodeF32(out), Selected: sel}, nil
}

// Verify implements Engine (Finite).
func (*NativeEngine) Verify(_ context.Context, in VerifyInput) (VerifyOutput, error) {
	return finiteScan(in.Dtype, in.N, in.Input)
}

// finiteReason is the Finite verifier's reason text, the same whichever
// engine runs it (plugins' verifyReason, code 1).
const finiteReason = "contains NaN or infinite values"

// finiteScan is the Finite rule (a value is not finite when its exponent
// bits are all ones) over n values of dtype in b. It reads the bits in
// place, so checking a mapped payload allocates and copies nothing.
func finiteScan(d machine.Dtype, n int, b []byte) (VerifyOutput, error) {
	if d.Size() == 0 {
		return VerifyOutput{}, fmt.Errorf("dtype %q unsupported", d)
	}
	if len(b) != n*d.Size() {
		return VerifyOutput{}, fmt.Errorf("%d bytes for %d %s values, want %d", len(b), n, d, n*d.Size())
	}
	bad := false
	switch d {
	case machine.F32:
		for i := 0; i < n && !bad; i++ {
			bad = binary.LittleEndian.Uint32(b[4*i:])&0x7f800000 == 0x7f800000
		}
	case machine.BF16:
		for i := 0; i < n && !bad; i++ {
			bad = binary.LittleEndian.Uint16(b[2*i:])&0x7f80 == 0x7f80
		}
	default:
		return VerifyOutput{}, fmt.Errorf("dtype %q unsupported", d)
	}
	if bad {
		return VerifyOutput{Accept: false, Code: 1, Reason: finiteReason}, nil
	}
	return VerifyOutput{Accept: true}, nil
}

// OuterStep implements Engine with PyTorch SGD(nesterov=True) semantics in
// float32, reproducing the rounding of PyTorch's CPU kernels: the momentum
// update rounds twice (mul, then add) and the two alpha-adds are fused
// multiply-adds.
func (*NativeEngine) OuterStep(_ context.Context, in OuterStepInput) (OuterStepOutput, error) {
	w, err := DecodeValues(in.Dtype, in.Weights, in.N)
	if err != nil {
		return OuterStepOutput{}, fmt.Errorf("outer step weights: %w", err)
	}
	g, err := DecodeValues(machine.F32, in.Aggregate, in.N)
	if err != nil {
		return OuterStepOutput{}, fmt.Errorf("outer step aggregate: %w", err)
	}
	var buf []float32
	if in.Momentum != nil {
		if buf, err = DecodeValues(machine.F32, in.Momentum, in.N); err != nil {
			return OuterStepOutput{}, fmt.Errorf("outer step momentum: %w", err)
		}
	}
	NesterovStep(w, buf, g, in.LR, in.Beta, in.Nesterov, buf == nil)
	if buf == nil {
		buf = g // first step: buf = g (already applied inside)
	}
	return OuterStepOutput{Weights: EncodeValues(in.Dtype, w), Momentum: EncodeF32(buf)}, nil
}

// NesterovStep updates w (and buf, unless first) in place. On the first step
// buf is nil and g doubles as the new momentum buffer.
func NesterovStep(w, buf, g []float32, lr, beta float32, nesterov, first bool) {
	negLR := -lr
	for j := range w {
		var b float32
		if first {
			b = g[j]
		} else {
			b = float32(buf[j]*beta) + g[j]
			buf[j] = b
		}
		d := b
		if nesterov {
			d = FMA32(b, beta, g[j])
		}
		w[j] = FMA32(d, negLR, w[j])
	}
}

// FMA32 returns a*b+c rounded once to float32. The float64 product of two
// float32 values is exact; the float64 sum is rounded to odd (using the
// exact TwoSum error) so that the final conversion to float32 cannot double
// round.
func FMA32(a, b, c float32) float32 {
	p := float64(float64(a) * float64(b))
	cc := float64(c)
	s := float64(p + cc)
	bb := float64(s - p)
	e := float64(float64(p-float64(s-bb)) + float64(cc-bb))
	if e != 0 && !math.IsInf(s, 0) {
		bits := math.Float64bits(s)
		if bits&1 == 0 {
			if (e > 0) == (s > 0) {
				bits++
			} else {
				bits--
			}
			s = math.Float64frombits(bits)
		}
	}
	return float32(s)
}

// DecodeValues converts n little-endian values of dtype to float32.
func DecodeValues(dt machine.Dtype, b []byte, n int) ([]float32, error) {
	if dt.Size() == 0 {
		return nil, fmt.Errorf("dtype %q unsupported", dt)
	}
	if len(b) != n*dt.Size() {
		return nil, fmt.Errorf("%d bytes for %d %s values, want %d", len(b), n, dt, n*dt.Size())
	}
	out := make([]float32, n)
	switch dt {
	case machine.F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case machine.BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	}
	return out, nil
}

// EncodeValues converts float32 values to dtype (bf16 rounds to nearest even).
func EncodeValues(dt machine.Dtype, v []float32) []byte {
	if dt == machine.BF16 {
		out := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(out[2*i:], F32ToBF16(x))
		}
		return out
	}
	return EncodeF32(v)
}

// EncodeF32 encodes float32 values little-endian.
func EncodeF32(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

// F32ToBF16 rounds to nearest even; NaN stays NaN. It is
// safetensors.F32ToBF16, the one rounding the node, the CLI and the outer
// step share.
func F32ToBF16(x float32) uint16 { return safetensors.F32ToBF16(x) }
