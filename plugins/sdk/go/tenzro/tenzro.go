//go:build wasip1

// Package tenzro is the Go SDK for Tenzro Train rule plugins (ABI v1, see
// plugins/ABI.md). A plugin is a `package main` built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rule.wasm .
//
// that calls SetAggregate, SetVerify or SetOuterStep from an init function;
// `tenzro plugin build` runs that command and attaches manifest.json. The SDK
// exports the ABI entry points with //go:wasmexport. Go plugins are
// convenient but several times slower than C with SIMD (DESIGN §5).
package tenzro

import (
	"math"
	"unsafe"
)

// Dtype codes of the ABI.
const (
	F32  = 0
	BF16 = 1
)

// Error codes of the ABI (ABI.md §5).
const (
	ErrParams    = 1
	ErrTooFew    = 2
	ErrDtype     = 3
	ErrNoMem     = 4
	ErrNonFinite = 5
)

// Error is a rule error: Code goes back to the host, Text becomes the reason.
type Error struct {
	Code int32
	Text string
}

func (e *Error) Error() string { return e.Text }

// AggregateArgs is one aggregation call. Inputs are f32 (bf16 inputs are
// converted by the SDK); Out, Selected and Scores are written by the rule.
type AggregateArgs struct {
	K, N     int
	Inputs   [][]float32
	Params   []float64
	Out      []float32
	Selected []bool
	Scores   []float64
}

// VerifyArgs is one verification call; Round is empty for per-submission
// verifiers.
type VerifyArgs struct {
	N      int
	Input  []float32
	Round  [][]float32
	Params []float64
}

// OuterArgs is one outer-step call (f32 weights only in this SDK).
type OuterArgs struct {
	Weights, Momentum, Grad []float32
	HasMomentum, Nesterov   bool
	LR, Beta                float32
}

var (
	aggregateFn func(*AggregateArgs) error
	verifyFn    func(*VerifyArgs) (accept bool, reason uint32, err error)
	outerFn     func(*OuterArgs) error
	pinned      [][]byte
	errText     []byte
)

// SetAggregate registers the aggregation rule.
func SetAggregate(f func(*AggregateArgs) error) { aggregateFn = f }

// SetVerify registers the verifier.
func SetVerify(f func(*VerifyArgs) (bool, uint32, error)) { verifyFn = f }

// SetOuterStep registers the outer step.
func SetOuterStep(f func(*OuterArgs) error) { outerFn = f }

//go:wasmexport tenzro_abi_version
func abiVersion() int32 { return 1 }

// alloc keeps every block alive for the life of the instance (one call).
//
//go:wasmexport tenzro_alloc
func alloc(size uint32) uint32 {
	b := make([]byte, uint64(size)+16)
	pinned = append(pinned, b)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return uint32((p + 15) &^ 15)
}

//go:wasmexport tenzro_error_text
func errorText() uint32 {
	if len(errText) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(errText))))
}

func fail(err error) int32 {
	code := int32(100)
	if e, ok := err.(*Error); ok {
		code = e.Code
	}
	errText = append([]byte(err.Error()), 0)
	return code
}

// ptr turns a guest address into a pointer. Addresses come from alloc, so
// they point into live Go allocations.
func ptr(p uint32) unsafe.Pointer { return unsafe.Add(unsafe.Pointer(nil), uintptr(p)) }

func f32s(p uint32, n int, dtype uint32) []float32 {
	if dtype == F32 {
		return unsafe.Slice((*float32)(ptr(p)), n)
	}
	h := unsafe.Slice((*uint16)(ptr(p)), n)
	out := make([]float32, n)
	for i, v := range h {
		out[i] = math.Float32frombits(uint32(v) << 16)
	}
	return out
}

//go:wasmexport tenzro_aggregate
func aggregate(dtype, k, n, inputs, params, nparams, out, selected, scores uint32) int32 {
	if aggregateFn == nil {
		return fail(&Error{Code: 100, Text: "no aggregation rule registered"})
	}
	if dtype > BF16 {
		return fail(&Error{Code: ErrDtype, Text: "unknown dtype"})
	}
	es := uint32(4)
	if dtype == BF16 {
		es = 2
	}
	a := &AggregateArgs{K: int(k), N: int(n), Out: unsafe.Slice((*float32)(ptr(out)), n), Scores: unsafe.Slice((*float64)(ptr(scores)), k)}
	for i := uint32(0); i < k; i++ {
		a.Inputs = append(a.Inputs, f32s(inputs+i*n*es, int(n), dtype))
	}
	if nparams > 0 {
		a.Params = unsafe.Slice((*float64)(ptr(params)), nparams)
	}
	a.Selected = make([]bool, k)
	if err := aggregateFn(a); err != nil {
		return fail(err)
	}
	sel := unsafe.Slice((*byte)(ptr(selected)), k)
	for i, s := range a.Selected {
		sel[i] = 0
		if s {
			sel[i] = 1
		}
	}
	return 0
}

//go:wasmexport tenzro_verify
func verify(dtype, n, input, k, round, params, nparams, verdict uint32) int32 {
	if verifyFn == nil {
		return fail(&Error{Code: 100, Text: "no verifier registered"})
	}
	es := uint32(4)
	if dtype == BF16 {
		es = 2
	}
	a := &VerifyArgs{N: int(n), Input: f32s(input, int(n), dtype)}
	for i := uint32(0); i < k; i++ {
		a.Round = append(a.Round, f32s(round+i*n*es, int(n), dtype))
	}
	if nparams > 0 {
		a.Params = unsafe.Slice((*float64)(ptr(params)), nparams)
	}
	ok, reason, err := verifyFn(a)
	if err != nil {
		return fail(err)
	}
	v := unsafe.Slice((*uint32)(ptr(verdict)), 2)
	v[0], v[1] = 0, reason
	if ok {
		v[0], v[1] = 1, 0
	}
	return 0
}

//go:wasmexport tenzro_outer_step
func outerStep(dtype, n, weights, momentum, hasMomentum, grad uint32, lr, beta float32, nesterov uint32) int32 {
	if outerFn == nil {
		return fail(&Error{Code: 100, Text: "no outer step registered"})
	}
	if dtype != F32 {
		return fail(&Error{Code: ErrDtype, Text: "the Go SDK's outer step takes F32 weights"})
	}
	a := &OuterArgs{
		Weights:     unsafe.Slice((*float32)(ptr(weights)), n),
		Momentum:    unsafe.Slice((*float32)(ptr(momentum)), n),
		Grad:        unsafe.Slice((*float32)(ptr(grad)), n),
		HasMomentum: hasMomentum != 0, Nesterov: nesterov != 0, LR: lr, Beta: beta,
	}
	if err := outerFn(a); err != nil {
		return fail(err)
	}
	return 0
}
