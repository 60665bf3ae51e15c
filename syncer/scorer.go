package syncer

import (
	"context"
	"encoding/json"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// Scorer is implemented by engines that run score plugins (plugin ABI v3,
// kind "score"; docs/protocol/scoring.md). Like Decoder it is part of the
// engine seam: a scored run needs an engine that implements it, and is
// refused at posting otherwise. A deterministic failure of the evaluator
// (out of fuel, a model it does not take) is a *RuleFailure.
type Scorer interface {
	// ResolveScorer turns a spec's evaluator ("TimesFMScore", "sha256:…")
	// and canonical JSON parameters into a RuleRef, defaults filled.
	ResolveScorer(ctx context.Context, ref string, params json.RawMessage) (RuleRef, error)
	Score(ctx context.Context, in ScoreInput) (ScoreOutput, error)
}

// ScoreInput is one evaluator call: the loss of the model on Batches batches
// of windows before and after one submitted gradient of one fragment is
// applied to the start weights (plugins/ABI.md §4.2).
type ScoreInput struct {
	// Evaluator is a resolved score plugin (ResolveScorer).
	Evaluator RuleRef
	// Dtype is the model's element type (every fragment shares it).
	Dtype machine.Dtype
	// Tensors is the whole model in canonical order: every fragment's
	// tensors, fragment after fragment (the tensors sorted by name, as
	// machine.SplitFragments lays them out).
	Tensors []wire.TensorInfo
	// Weights are the start weights of the round: the values of the
	// fragments in order (one Values per fragment, e.g. the data
	// section of each fragment's weights blob, WeightsFileValues — a file
	// is always named with its byte ranges), which together span every
	// tensor of Tensors.
	Weights []Values
	// FragFirst and FragCount are the scored fragment's tensors within
	// Tensors.
	FragFirst, FragCount int
	// Gradient holds the submission's decoded values for that fragment
	// (little-endian, Dtype), in the fragment's tensor order.
	Gradient []byte
	// The outer step's parameters: the gradient is applied as the outer
	// step's first step (empty momentum buffer): d = fma(g, Beta, g) when
	// Nesterov, else g; w = fma(d, -LR, w).
	LR, Beta float32
	Nesterov bool
	// Windows holds Batches × BatchSize windows of WindowLen little-endian
	// f32 series values each (raw, unnormalized), batch after batch.
	Windows                       []byte
	Batches, BatchSize, WindowLen int
	// Fuel is the call's fuel budget: the spec's scoring.fuel; 0 = the
	// engine's per-call budget. Its wall-clock backstop scales with it.
	Fuel uint64
}

// ScoreOutput is the loss per batch before and after the step, and the fuel
// the call used.
type ScoreOutput struct {
	Before, After []float64
	Fuel          uint64
}
