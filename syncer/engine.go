package syncer

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tenzro/train/wire"
)

// Dtype names the element type of fragment weights and payloads, as spelled
// in safetensors headers.
type Dtype string

// Element types the protocol accepts.
const (
	F32  Dtype = "F32"
	BF16 Dtype = "BF16"
)

// Size is the width of one element in bytes.
func (d Dtype) Size() int {
	switch d {
	case F32:
		return 4
	case BF16:
		return 2
	}
	return 0
}

// RuleRef is a resolved reference to a rule (wire.RuleRef): which code runs
// (by hash) and with which canonical parameters.
type RuleRef = wire.RuleRef

// AggregateInput is one fragment's aggregation call.
type AggregateInput struct {
	Rule  RuleRef
	Dtype Dtype
	// N is the number of values per input.
	N int
	// Inputs holds K little-endian buffers of N values each, in canonical
	// trainer order (trainer DIDs sorted bytewise).
	Inputs [][]byte
}

// AggregateOutput is the result of aggregation.
type AggregateOutput struct {
	// Aggregate holds N little-endian float32 values.
	Aggregate []byte
	// Selected says, per input, whether the rule used it.
	Selected []bool
	// Scores is optional per-input scores (e.g. Krum scores); may be nil.
	Scores []float64
	// Fuel is the deterministic cost charged.
	Fuel uint64
}

// VerifyInput is one verifier call on one input. For round-level verifiers
// Round holds every accepted input of the fragment (Input is one of them).
type VerifyInput struct {
	Verifier RuleRef
	Dtype    Dtype
	N        int
	Input    []byte
	Round    [][]byte
}

// VerifyOutput is a verifier's verdict.
type VerifyOutput struct {
	Accept bool
	Code   uint32
	Reason string
	Fuel   uint64
}

// OuterStepInput applies the outer optimizer to one fragment. The step has
// PyTorch SGD(momentum, nesterov, dampening=0, weight_decay=0) semantics on
// the pseudo-gradient g = Aggregate:
//
//	buf = g                      (first step, Momentum == nil)
//	buf = momentum*buf + g       (later steps)
//	d   = g + momentum*buf       (nesterov) or buf (otherwise)
//	w   = w - lr*d
type OuterStepInput struct {
	Rule     RuleRef
	Dtype    Dtype
	N        int
	Weights  []byte // N values of Dtype
	Momentum []byte // N float32 values; nil before the first step
	// Aggregate holds N float32 values.
	Aggregate []byte
	LR        float32
	Beta      float32 // momentum factor
	Nesterov  bool
}

// OuterStepOutput is the new state of the fragment.
type OuterStepOutput struct {
	Weights  []byte // N values of Dtype
	Momentum []byte // N float32 values
	Fuel     uint64
}

// EngineProfile describes the implementation that ran, for the receipt.
type EngineProfile struct {
	// Engine names the runtime, e.g. "native-go/v1" or "wazero/v1.12.0".
	Engine string `json:"engine"`
	// Hash commits to everything about the runtime that can change results
	// (its identity, memory page limit, fuel cost table).
	Hash wire.Hash `json:"hash"`
	// Details holds runtime-specific facts (page limit, fuel table hash, …).
	Details json.RawMessage `json:"details,omitempty"`
}

// Engine is the seam through which the round engine runs everything that
// changes model state: verification, aggregation and the outer step. The
// Wasm plugin host implements it; NewNativeEngine is the built-in Go
// implementation of Mean, finiteness and Nesterov.
//
// Deterministic failures of a rule (out of fuel, a rule refusing its input)
// are returned as *RuleFailure so that the round engine can record them in
// the transcript; any other error is an infrastructure error and the round is
// not committed.
type Engine interface {
	// ResolveRule turns a spec's aggregation reference ("Mean",
	// "TrimmedMean{alpha_bps=2500}", "sha256:…") and optional JSON params into
	// a RuleRef. k and m are the run's quorum and trainer count so that rules
	// with a minimum K (Krum needs K ≥ 2f+3) can refuse at posting.
	ResolveRule(ctx context.Context, ref string, params json.RawMessage, k, m int) (RuleRef, error)
	// ResolveVerifier does the same for a verifier reference.
	ResolveVerifier(ctx context.Context, ref string) (RuleRef, error)
	// ResolveOuter returns the outer-step implementation.
	ResolveOuter(ctx context.Context) (RuleRef, error)

	Aggregate(ctx context.Context, in AggregateInput) (AggregateOutput, error)
	Verify(ctx context.Context, in VerifyInput) (VerifyOutput, error)
	OuterStep(ctx context.Context, in OuterStepInput) (OuterStepOutput, error)

	Profile() EngineProfile
}

// RuleFailure is a deterministic, recordable failure of a rule.
type RuleFailure struct {
	Rule   string
	Code   uint32
	Reason string
}

func (e *RuleFailure) Error() string {
	return fmt.Sprintf("rule %s failed (code %d): %s", e.Rule, e.Code, e.Reason)
}
