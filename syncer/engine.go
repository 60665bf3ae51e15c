package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// RuleRef is a resolved reference to a rule (wire.RuleRef): which code runs
// (by hash) and with which canonical parameters.
type RuleRef = wire.RuleRef

// AggregateInput is one fragment's aggregation call.
type AggregateInput struct {
	Rule  RuleRef
	Dtype machine.Dtype
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
	// Hash, when set by a FinalizeSteps' Aggregate, is the aggregate's
	// ContentHash, computed by the steps themselves: a finalize that runs
	// the aggregate and the outer step in one sweep never holds the whole
	// aggregate (Aggregate is then nil, and Outer gets nil).
	Hash *wire.Hash
}

// VerifyInput is one verifier call on one input. For round-level verifiers
// Round holds every accepted input of the fragment (Input is one of them).
type VerifyInput struct {
	Verifier RuleRef
	Dtype    machine.Dtype
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
	Dtype    machine.Dtype
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
	// Finalize runs one fragment's round-level verifiers, aggregation and
	// outer step as one call, on inputs read in place from stored content,
	// with the results RunFinalize defines for those three steps.
	Finalize(ctx context.Context, in FinalizeInput) (FinalizeOutput, error)

	Profile() EngineProfile
}

// ErrLocal marks an engine error as a failure of this node's plugin host
// (a worker that died, was killed or could not start; an engine that does
// not run a plugin kind): never an input's fault, never recorded — the
// syncer abstains and tries again. Errors are classified by type, never by
// their text, which can quote what a trainer sent.
var ErrLocal = errors.New("a local failure of the plugin host")

// RuleFailure is a deterministic, recordable failure of a rule.
type RuleFailure struct {
	Rule   string
	Code   uint32
	Reason string
}

func (e *RuleFailure) Error() string {
	return fmt.Sprintf("rule %s failed (code %d): %s", e.Rule, e.Code, e.Reason)
}

// ByteRange is the bytes [Off, Off+Len) of stored content.
type ByteRange struct {
	Off int64 `json:"off"`
	Len int64 `json:"len"`
}

// Values is a fragment's N values held in stored content and read in
// place: R reads them, and the concatenation of Ranges, in order, is the N
// values (a safetensors payload's tensor data in the fragment's tensor
// order: TensorValues). Path, when set, names the file R reads (a blob file,
// never written again): an engine that runs plugins in another process opens
// it there, so the values go from the page cache straight into the plugin's
// memory without passing through the node. R may be nil when Path is set.
type Values struct {
	R      io.ReaderAt
	Path   string
	Ranges []ByteRange
}

// BytesValues is values held in memory (a decoded payload, tests).
func BytesValues(b []byte) Values {
	return Values{R: memReader(b), Ranges: []ByteRange{{Off: 0, Len: int64(len(b))}}}
}

// memReader reads bytes held in memory (a mapped blob, a decoded payload);
// Values.inPlace returns them without a copy.
type memReader []byte

func (m memReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m)) {
		return 0, fmt.Errorf("read at %d of %d bytes", off, len(m))
	}
	n := copy(p, m[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// inPlace returns the values (want bytes) without copying them, when they
// are held in memory in one run of bytes (ok false: use Bytes).
func (v Values) inPlace(want int64) ([]byte, bool) {
	m, ok := v.R.(memReader)
	if !ok || len(v.Ranges) == 0 || v.Len() != want {
		return nil, false
	}
	lo, end := v.Ranges[0].Off, v.Ranges[0].Off
	for _, g := range v.Ranges {
		if g.Off != end || g.Len < 0 {
			return nil, false
		}
		end += g.Len
	}
	if lo < 0 || end > int64(len(m)) {
		return nil, false
	}
	return m[lo:end], true
}

// InPlace returns the values without copying them when they are bytes
// held in memory (a mapped blob, a decoded payload) in one run: an engine
// then reads them where they are.
func (v Values) InPlace() ([]byte, bool) { return v.inPlace(v.Len()) }

// FileValues is the values of the file at path, Ranges of it (none: the
// whole file); R is left for the engine to open.
func FileValues(path string, ranges ...ByteRange) Values {
	return Values{Path: path, Ranges: ranges}
}

// Len is the number of bytes the values span.
func (v Values) Len() int64 {
	var n int64
	for _, r := range v.Ranges {
		n += r.Len
	}
	return n
}

// Bytes reads the values into memory (want bytes exactly).
func (v Values) Bytes(want int64) ([]byte, error) {
	if v.Len() != want {
		return nil, fmt.Errorf("values span %d bytes, want %d", v.Len(), want)
	}
	r := v.R
	if r == nil {
		if v.Path == "" {
			return nil, errors.New("values without a reader or a path")
		}
		f, err := os.Open(v.Path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	out := make([]byte, want)
	var at int64
	for _, g := range v.Ranges {
		if _, err := r.ReadAt(out[at:at+g.Len], g.Off); err != nil {
			return nil, fmt.Errorf("values at %d: %w", g.Off, err)
		}
		at += g.Len
	}
	return out, nil
}

// TensorValues locates a fragment's values in a stored safetensors file of
// size bytes (a payload, or the fragment's weights) without reading its data:
// it parses the header through r and checks, as the round engine does, that
// the file holds exactly the fragment's tensors (names, dtype, shapes); the
// ranges follow the fragment's tensor order.
func TensorValues(r io.ReaderAt, size int64, path string, tensors []wire.TensorInfo) (Values, error) {
	at, err := safetensorsHeader(r, size)
	if err != nil {
		return Values{}, err
	}
	if len(at) != len(tensors) {
		return Values{}, fmt.Errorf("%d tensors, the fragment has %d", len(at), len(tensors))
	}
	v := Values{R: r, Path: path, Ranges: make([]ByteRange, 0, len(tensors))}
	for _, want := range tensors {
		t, ok := at[want.Name]
		if !ok {
			return Values{}, fmt.Errorf("tensor %q is missing", want.Name)
		}
		if t.Dtype != want.Dtype {
			return Values{}, fmt.Errorf("tensor %q has dtype %s, the fragment's is %s", want.Name, t.Dtype, want.Dtype)
		}
		if !machine.EqualShape(t.Shape, want.Shape) {
			return Values{}, fmt.Errorf("tensor %q has shape %v, the fragment's is %v", want.Name, t.Shape, want.Shape)
		}
		v.Ranges = append(v.Ranges, ByteRange{Off: t.Offset, Len: t.Len})
	}
	return v, nil
}

// FinalizeInput is one fragment's finalize: round-level verification,
// aggregation and the outer step, on values read in place.
type FinalizeInput struct {
	// Rule is the aggregation rule, Outer the outer step.
	Rule  RuleRef
	Outer RuleRef
	// Verifiers are the run's verifiers: the round-level ones run here, in
	// this order, on every input against all of them (the others judged
	// each submission when it arrived).
	Verifiers []RuleRef
	Dtype     machine.Dtype
	N         int
	// Quorum is K: with fewer inputs left after round-level verification
	// the fragment has no quorum.
	Quorum int
	// Inputs hold N values of Dtype each, in canonical trainer order.
	Inputs []Values
	// Weights hold the N current weights (Dtype); Momentum N f32, nil
	// before the first step.
	Weights  Values
	Momentum *Values
	LR       float32
	Beta     float32
	Nesterov bool
	// AggregateOnly stops after the aggregation (the rule author's tool,
	// tenzro plugin run): the outer step does not run, Weights and
	// Momentum are not read, and the aggregate (N f32) takes the new
	// weights' place in Write and FinalizeOutput.Weights (momentum nil).
	AggregateOnly bool
	// Write, when set, receives the new weights (N values of Dtype) and
	// momentum (N f32) when the step succeeds, as views valid only during
	// the call, so that they are written once, where the caller keeps them
	// (hashing as it writes); its error is returned. known is nil, or the
	// two blobs' hashes when the engine computed them with the state (see
	// WeightsHeader): then the caller need not read the bytes to hash them.
	// When Write is nil, FinalizeOutput.Weights and .Momentum hold copies.
	Write func(weights, momentum []byte, known *StateHashes) error
	// Hold, when set, may be called instead of Write by an engine that
	// computed known (see WeightsHeader) and produced the new state in
	// memory it can give away (a plugin worker's arena): weightsBlob is
	// the whole weights blob, WeightsHeader followed by the new weights,
	// contiguous; momentum the new momentum. Both are the callee's, and
	// must not change, until it calls release, which it must call exactly
	// once whatever Hold returns (a store holding them as pending blobs
	// calls it once their durable writes end). Its error is returned.
	Hold func(weightsBlob, momentum []byte, known StateHashes, release func()) error
	// WeightsHeader, when set, is the bytes that precede the new weights
	// in their blob, which is exactly WeightsHeader followed by the N new
	// values (FragmentHeader): an engine that computes the new state in
	// blocks may hash both blobs as it goes and give Write their hashes.
	// An engine is free to ignore it (known nil).
	WeightsHeader []byte
}

// StateHashes are the content hashes of a finalize's new state, computed
// by the engine as it produced it: Weights of FinalizeInput.WeightsHeader
// followed by the new weights, Momentum of the new momentum. Each equals
// wire.ContentHash of those bytes exactly.
type StateHashes struct {
	Weights, Momentum wire.Hash
}

// FinalizeOutput is what finalizing a fragment decided: the fields of its
// wire.FragmentCommit that the plugins determine.
type FinalizeOutput struct {
	// Status is wire.FragAggregated, wire.FragNoQuorum or
	// wire.FragRuleFailed, with Reason for the last two (the aggregation
	// rule's or the outer step's *RuleFailure text).
	Status string
	Reason string
	// Rejected holds, per input, why a round-level verifier rejected it
	// ("Verifier: reason"), "" when kept; Selected whether the rule used it.
	Rejected []string
	Selected []bool
	// Kept is the number of inputs left after round-level verification.
	Kept int
	// AggregateHash is the content hash of the aggregate (N f32), set once
	// aggregation succeeded (also when the outer step then failed).
	AggregateHash wire.Hash
	// Weights and Momentum are the new state when Status is
	// wire.FragAggregated and FinalizeInput.Write is nil.
	Weights  []byte
	Momentum []byte
	// Fuel is the fuel of the round-level verifiers, the aggregation and the
	// outer step, counted as the round engine counts them: a step that fails
	// adds nothing.
	Fuel uint64
}

// FinalizeSteps are an engine's three finalize steps on the values of one
// FinalizeInput, placed however the engine places them (mapped into a
// plugin's memory, read into the heap). RunFinalize is the one order in
// which they run and the one set of rules (what is kept, quorum, fuel,
// reasons) that every engine's Finalize follows: the syncer's commit,
// validators' re-execution, replay and `tenzro plugin run` all reach it.
type FinalizeSteps interface {
	// Verify runs round-level verifier v on each input ks names (indices
	// into FinalizeInput.Inputs), each judged against all the inputs.
	Verify(ctx context.Context, v RuleRef, ks []int) ([]VerifyOutput, error)
	// Aggregate runs the rule on the kept inputs (ascending indices): the
	// aggregate is N f32, NaN canonicalised, valid until the finalize ends.
	Aggregate(ctx context.Context, kept []int) (AggregateOutput, error)
	// Outer applies the outer step with the aggregate; the engine keeps the
	// new state (NaN canonicalised) for the caller. It returns the fuel.
	Outer(ctx context.Context, aggregate []byte) (uint64, error)
}

// RunFinalize finalizes a fragment through s: each round-level verifier,
// in order, on the inputs no earlier one rejected; no quorum when fewer
// than in.Quorum are left; the aggregation; the outer step, while the
// aggregate is hashed. A rule's *RuleFailure in the aggregation or the
// outer step is recorded (FragRuleFailed; the failing step adds no fuel);
// any other error, a round-level verifier's RuleFailure included, is a
// local failure and the caller records nothing. The new state stays with
// the engine's steps.
func RunFinalize(ctx context.Context, in FinalizeInput, s FinalizeSteps) (FinalizeOutput, error) {
	out := FinalizeOutput{Rejected: make([]string, len(in.Inputs)), Selected: make([]bool, len(in.Inputs))}
	for _, v := range in.Verifiers {
		if !v.RoundLevel {
			continue
		}
		var ks []int
		for k, why := range out.Rejected {
			if why == "" {
				ks = append(ks, k)
			}
		}
		if len(ks) == 0 {
			break
		}
		vo, err := s.Verify(ctx, v, ks)
		if err != nil {
			return out, fmt.Errorf("round verifier %s: %w", v.Name, err)
		}
		if len(vo) != len(ks) {
			return out, fmt.Errorf("round verifier %s: %d verdicts for %d inputs", v.Name, len(vo), len(ks))
		}
		for j, k := range ks {
			out.Fuel += vo[j].Fuel
			if !vo[j].Accept {
				out.Rejected[k] = fmt.Sprintf("%s: %s", v.Name, vo[j].Reason)
			}
		}
	}
	var kept []int
	for k, why := range out.Rejected {
		if why == "" {
			kept = append(kept, k)
		}
	}
	out.Kept = len(kept)
	if len(kept) < in.Quorum {
		out.Status = wire.FragNoQuorum
		out.Reason = NoQuorumReason(len(kept), in.Quorum)
		return out, nil
	}
	agg, err := s.Aggregate(ctx, kept)
	var rf *RuleFailure
	if errors.As(err, &rf) {
		out.Status, out.Reason = wire.FragRuleFailed, rf.Error()
		return out, nil
	} else if err != nil {
		return out, fmt.Errorf("aggregate: %w", err)
	}
	out.Fuel += agg.Fuel
	for j, k := range kept {
		out.Selected[k] = j < len(agg.Selected) && agg.Selected[j]
	}
	if in.AggregateOnly {
		out.AggregateHash = wire.ContentHash(agg.Aggregate)
		out.Status = wire.FragAggregated
		return out, nil
	}
	// The aggregate is hashed while the outer step runs (the step reads it,
	// never writes it).
	hashed := make(chan wire.Hash, 1)
	if agg.Hash != nil {
		hashed <- *agg.Hash
	} else {
		go func() { hashed <- wire.ContentHash(agg.Aggregate) }()
	}
	fuel, err := s.Outer(ctx, agg.Aggregate)
	out.AggregateHash = <-hashed
	if errors.As(err, &rf) {
		out.Status, out.Reason = wire.FragRuleFailed, rf.Error()
		return out, nil
	} else if err != nil {
		return out, fmt.Errorf("outer step: %w", err)
	}
	out.Fuel += fuel
	out.Status = wire.FragAggregated
	return out, nil
}

// FinalizeInMemory is RunFinalize through eng's separate Verify, Aggregate
// and OuterStep calls on values read into the heap: the native engine's
// Finalize, and the reference the plugin host's mapped placement is tested
// against.
func FinalizeInMemory(ctx context.Context, eng Engine, in FinalizeInput) (FinalizeOutput, error) {
	es := int64(in.Dtype.Size())
	if es == 0 || in.N <= 0 {
		return FinalizeOutput{}, fmt.Errorf("finalize: dtype %q, N=%d", in.Dtype, in.N)
	}
	s := &memorySteps{eng: eng, in: in, span: int64(in.N) * es, inputs: make([][]byte, len(in.Inputs))}
	for k, v := range in.Inputs {
		b, err := v.Bytes(s.span)
		if err != nil {
			return FinalizeOutput{}, fmt.Errorf("finalize: input %d: %w", k, err)
		}
		s.inputs[k] = b
	}
	out, err := RunFinalize(ctx, in, s)
	if err != nil || out.Status != wire.FragAggregated {
		return out, err
	}
	if in.AggregateOnly {
		s.step = OuterStepOutput{Weights: s.agg}
	}
	if in.Write != nil {
		return out, in.Write(s.step.Weights, s.step.Momentum, nil)
	}
	out.Weights, out.Momentum = s.step.Weights, s.step.Momentum
	return out, nil
}

// memorySteps are FinalizeSteps over values in the heap.
type memorySteps struct {
	eng    Engine
	in     FinalizeInput
	span   int64
	inputs [][]byte
	agg    []byte
	step   OuterStepOutput
}

func (s *memorySteps) Verify(ctx context.Context, v RuleRef, ks []int) ([]VerifyOutput, error) {
	out := make([]VerifyOutput, len(ks))
	for j, k := range ks {
		vo, err := s.eng.Verify(ctx, VerifyInput{Verifier: v, Dtype: s.in.Dtype, N: s.in.N, Input: s.inputs[k], Round: s.inputs})
		if err != nil {
			return nil, err
		}
		out[j] = vo
	}
	return out, nil
}

func (s *memorySteps) Aggregate(ctx context.Context, kept []int) (AggregateOutput, error) {
	in := make([][]byte, len(kept))
	for j, k := range kept {
		in[j] = s.inputs[k]
	}
	out, err := s.eng.Aggregate(ctx, AggregateInput{Rule: s.in.Rule, Dtype: s.in.Dtype, N: s.in.N, Inputs: in})
	s.agg = out.Aggregate
	return out, err
}

func (s *memorySteps) Outer(ctx context.Context, aggregate []byte) (uint64, error) {
	weights, err := s.in.Weights.Bytes(s.span)
	if err != nil {
		return 0, fmt.Errorf("finalize: weights: %w", err)
	}
	var mom []byte
	if s.in.Momentum != nil {
		if mom, err = s.in.Momentum.Bytes(int64(s.in.N) * 4); err != nil {
			return 0, fmt.Errorf("finalize: momentum: %w", err)
		}
	}
	s.step, err = s.eng.OuterStep(ctx, OuterStepInput{Rule: s.in.Outer, Dtype: s.in.Dtype, N: s.in.N, Weights: weights, Momentum: mom,
		Aggregate: aggregate, LR: s.in.LR, Beta: s.in.Beta, Nesterov: s.in.Nesterov})
	return s.step.Fuel, err
}

// NoQuorumReason is the transcript's reason for a fragment left with fewer
// than K inputs after verification (the syncer's re-checks of each payload
// and the round-level verifiers).
func NoQuorumReason(kept, quorum int) string {
	return fmt.Sprintf("%d of K=%d inputs left after verification", kept, quorum)
}

// Finalize implements Engine in memory (FinalizeInMemory).
func (e *NativeEngine) Finalize(ctx context.Context, in FinalizeInput) (FinalizeOutput, error) {
	return FinalizeInMemory(ctx, e, in)
}

func safetensorsHeader(r io.ReaderAt, size int64) (map[string]safetensors.TensorAt, error) {
	ts, _, err := safetensors.ParseHeaderAt(r, size, safetensors.DefaultLimits)
	if err != nil {
		return nil, err
	}
	m := make(map[string]safetensors.TensorAt, len(ts))
	for _, t := range ts {
		m[t.Name] = t
	}
	return m, nil
}

// WriteFragment writes a fragment's weights file — the canonical
// safetensors encoding of values (N values of the fragment's dtype, in its
// tensor order) whose content hash is the fragment's weights hash — to w
// without assembling it in memory: the bytes are encodeFragment's. It returns
// the bytes written.
func WriteFragment(w io.Writer, tensors []wire.TensorInfo, values []byte) (int64, error) {
	ts, err := fragmentTensors(tensors, values)
	if err != nil {
		return 0, err
	}
	return safetensors.EncodeTo(w, ts, nil)
}

// FragmentHeader returns the header WriteFragment writes for tensors and
// size bytes of values, when the file it writes is exactly that header
// followed by the values (the layout's tensors are in the file's sorted
// order and span the values): ok is false when the file holds the values
// otherwise.
func FragmentHeader(tensors []wire.TensorInfo, size int64) (header []byte, ok bool, err error) {
	ts := make([]safetensors.Tensor, len(tensors))
	var total int64
	for i, t := range tensors {
		ts[i] = safetensors.Tensor{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape}
		total += machine.Elems(t.Shape) * int64(safetensors.DtypeSize(t.Dtype))
	}
	header, sorted, err := safetensors.Header(ts, nil)
	if err != nil {
		return nil, false, fmt.Errorf("fragment header: %w", err)
	}
	if total != size {
		return nil, false, nil
	}
	for i := range sorted {
		if sorted[i].Name != tensors[i].Name {
			return nil, false, nil
		}
	}
	return header, true, nil
}

// fragmentTensors is the tensors of a fragment file over values.
func fragmentTensors(tensors []wire.TensorInfo, values []byte) ([]safetensors.Tensor, error) {
	ts := make([]safetensors.Tensor, len(tensors))
	var off int64
	for i, t := range tensors {
		sz := int64(safetensors.DtypeSize(t.Dtype))
		n := machine.Elems(t.Shape) * sz
		if sz == 0 || off+n > int64(len(values)) {
			return nil, fmt.Errorf("fragment data shorter than its layout")
		}
		ts[i] = safetensors.Tensor{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape, Data: values[off : off+n]}
		off += n
	}
	return ts, nil
}
