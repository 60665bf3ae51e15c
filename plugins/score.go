package plugins

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/abi"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// KindScore is the evaluator plugin kind (ABI v3, ABI.md §4.2).
const KindScore = abi.KindScore

// Limits of one score call (ABI.md §4.2). They bound what the host assembles
// before the guest runs; the guest's own memory is bounded by the page limit.
const (
	// MaxScoreTensors bounds the model's tensor table.
	MaxScoreTensors = 1 << 16
	// MaxScoreNameBytes bounds one tensor name.
	MaxScoreNameBytes = 256
	// MaxScoreBatches bounds the batches of one call.
	MaxScoreBatches = 64
	// MaxScoreBatchSize bounds the windows of one batch.
	MaxScoreBatchSize = 4096
	// MaxScoreWindowLen bounds the values of one window.
	MaxScoreWindowLen = 1 << 20
	// maxScoreValues bounds the model's value count (the guest indexes f32
	// values with 32-bit offsets).
	maxScoreValues = 1 << 30
)

// ScoreInput is one evaluator call (syncer.ScoreInput: the node's engine
// seam owns the type).
type ScoreInput = syncer.ScoreInput

// ScoreOutput is the loss per batch before and after the step, and the fuel
// the call used.
type ScoreOutput = syncer.ScoreOutput

// ResolveScorer resolves an evaluator reference — a built-in name such as
// "TimesFMScore{d_model=64}" or "sha256:<hex>" — with its parameters (a JSON
// object of numbers, checked against the plugin's schema, defaults filled).
func (e *Engine) ResolveScorer(ctx context.Context, ref string, params json.RawMessage) (syncer.RuleRef, error) {
	rr, _, _, err := e.resolve(ctx, ref, params, KindScore)
	if err != nil {
		return syncer.RuleRef{}, fmt.Errorf("evaluator: %w", err)
	}
	return rr, nil
}

// scoreLayout is a checked ScoreInput: the table the guest reads, the
// value count of the model and the scored fragment's value range.
type scoreLayout struct {
	table  []byte // 32 bytes per tensor, name pointers filled in at the call
	names  []byte // the names back to back
	total  int64  // values of the model
	g0, g1 int64  // the fragment's values
}

// checkScore validates everything the host assembles (bad input is an
// error that names the field; nothing runs).
func checkScore(in *ScoreInput) (*scoreLayout, error) {
	es := int64(in.Dtype.Size())
	if in.Dtype != machine.F32 && in.Dtype != machine.BF16 {
		return nil, fmt.Errorf("dtype %q: want F32 or BF16", in.Dtype)
	}
	if len(in.Tensors) == 0 || len(in.Tensors) > MaxScoreTensors {
		return nil, fmt.Errorf("%d tensors, want 1..%d", len(in.Tensors), MaxScoreTensors)
	}
	l := &scoreLayout{table: make([]byte, 32*len(in.Tensors))}
	seen := make(map[string]bool, len(in.Tensors))
	for i, t := range in.Tensors {
		if t.Name == "" || len(t.Name) > MaxScoreNameBytes {
			return nil, fmt.Errorf("tensor %d: name of %d bytes, want 1..%d", i, len(t.Name), MaxScoreNameBytes)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("tensor %q appears twice", t.Name)
		}
		seen[t.Name] = true
		if i > 0 && in.Tensors[i-1].Name >= t.Name {
			return nil, fmt.Errorf("tensor %q after %q: tensors must be in canonical (bytewise name) order", t.Name, in.Tensors[i-1].Name)
		}
		if machine.Dtype(t.Dtype) != in.Dtype {
			return nil, fmt.Errorf("tensor %q is %s, the model is %s", t.Name, t.Dtype, in.Dtype)
		}
		if len(t.Shape) == 0 || len(t.Shape) > 4 {
			return nil, fmt.Errorf("tensor %q has %d dimensions, want 1..4", t.Name, len(t.Shape))
		}
		n := int64(1)
		row := l.table[32*i:]
		binary.LittleEndian.PutUint32(row[4:], uint32(len(t.Name)))
		binary.LittleEndian.PutUint32(row[8:], uint32(l.total))
		binary.LittleEndian.PutUint32(row[12:], uint32(len(t.Shape)))
		for d, v := range t.Shape {
			if v < 1 || v > maxScoreValues {
				return nil, fmt.Errorf("tensor %q: dimension %d is %d", t.Name, d, v)
			}
			n *= v
			if n > maxScoreValues {
				return nil, fmt.Errorf("tensor %q has more than %d values", t.Name, maxScoreValues)
			}
			binary.LittleEndian.PutUint32(row[16+4*d:], uint32(v))
		}
		if i == in.FragFirst {
			l.g0 = l.total
		}
		l.total += n
		if l.total > maxScoreValues {
			return nil, fmt.Errorf("the model has more than %d values", maxScoreValues)
		}
		if i == in.FragFirst+in.FragCount-1 {
			l.g1 = l.total
		}
		l.names = append(l.names, t.Name...)
	}
	if in.FragFirst < 0 || in.FragCount < 1 || in.FragFirst+in.FragCount > len(in.Tensors) {
		return nil, fmt.Errorf("fragment tensors [%d, +%d) outside the model's %d", in.FragFirst, in.FragCount, len(in.Tensors))
	}
	if int64(len(in.Gradient)) != (l.g1-l.g0)*es {
		return nil, fmt.Errorf("gradient of %d bytes, the fragment has %d values of %s (%d bytes)", len(in.Gradient), l.g1-l.g0, in.Dtype, (l.g1-l.g0)*es)
	}
	var wb int64
	for i, v := range in.Weights {
		if v.R == nil && v.Path == "" {
			return nil, fmt.Errorf("weights part %d has neither a reader nor a path", i)
		}
		wb += v.Len()
	}
	if wb != l.total*es {
		return nil, fmt.Errorf("weights span %d bytes, the model has %d values of %s (%d bytes)", wb, l.total, in.Dtype, l.total*es)
	}
	if math.IsNaN(float64(in.LR)) || math.IsInf(float64(in.LR), 0) || math.IsNaN(float64(in.Beta)) || math.IsInf(float64(in.Beta), 0) {
		return nil, fmt.Errorf("lr %v and beta %v must be finite", in.LR, in.Beta)
	}
	if in.Batches < 1 || in.Batches > MaxScoreBatches || in.BatchSize < 1 || in.BatchSize > MaxScoreBatchSize ||
		in.WindowLen < 1 || in.WindowLen > MaxScoreWindowLen {
		return nil, fmt.Errorf("%d batches of %d windows of %d values, want 1..%d, 1..%d, 1..%d", in.Batches, in.BatchSize, in.WindowLen,
			MaxScoreBatches, MaxScoreBatchSize, MaxScoreWindowLen)
	}
	want := int64(in.Batches) * int64(in.BatchSize) * int64(in.WindowLen) * 4
	if int64(len(in.Windows)) != want {
		return nil, fmt.Errorf("windows of %d bytes, want %d batches × %d windows × %d f32 = %d bytes", len(in.Windows), in.Batches, in.BatchSize, in.WindowLen, want)
	}
	for i := 0; i < len(in.Windows); i += 4 {
		if binary.LittleEndian.Uint32(in.Windows[i:])&0x7f800000 == 0x7f800000 {
			v := i / 4
			return nil, fmt.Errorf("window %d has a non-finite value at %d", v/in.WindowLen, v%in.WindowLen)
		}
	}
	return l, nil
}

// Score runs a score plugin (ABI.md §4.2) in a fresh instance under the fuel
// budget — in.Fuel when set (the spec's scoring.fuel), else the engine's
// per-call budget, with the wall-clock backstop scaled to it
// (ScaledWallClock) — in a worker process when the engine has them — and returns the
// loss of every batch before and after the gradient, NaN canonical. A
// deterministic failure of the plugin (out of fuel, trap, a guest error)
// is a *syncer.RuleFailure.
func (e *Engine) Score(ctx context.Context, in ScoreInput) (out ScoreOutput, err error) {
	if in.Fuel > maxFuel {
		return out, fmt.Errorf("plugins: score: fuel budget %d exceeds %d", in.Fuel, uint64(maxFuel))
	}
	if in.Fuel != 0 {
		ctx = withFuel(ctx, in.Fuel)
	}
	p, err := e.pluginFor(ctx, in.Evaluator, KindScore)
	if err != nil {
		return out, err
	}
	defer e.release(p)
	params, err := paramVector(p.manifest, in.Evaluator.Params)
	if err != nil {
		return out, fmt.Errorf("plugins: %s: %w", p.info.Name, err)
	}
	l, err := checkScore(&in)
	if err != nil {
		return out, fmt.Errorf("plugins: score: %w", err)
	}
	if !p.manifest.SupportsDtype(string(in.Dtype)) {
		return out, &syncer.RuleFailure{Rule: p.info.Name, Code: CodeBadInput, Reason: fmt.Sprintf("evaluator does not take %s weights", in.Dtype)}
	}
	es := uint64(in.Dtype.Size())
	need := uint64(l.total)*es + uint64(len(in.Gradient)) + uint64(len(in.Windows)) + uint64(len(l.table)) + uint64(len(l.names)) +
		uint64(len(params))*8 + uint64(in.Batches)*16 + guestSlack
	if need > e.memBudget() {
		return out, &syncer.RuleFailure{Rule: p.info.Name, Code: CodeTooLarge,
			Reason: fmt.Sprintf("scoring a model of %d values needs at least %d bytes of guest memory, limit %d pages", l.total, need, e.cfg.MemoryPages)}
	}
	if e.pool != nil {
		return e.remoteScore(ctx, p, in, l)
	}
	srcs := make([]*source, len(in.Weights))
	var files []*os.File
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	for i, v := range in.Weights {
		if v.R != nil {
			srcs[i] = readerSource(v.R, v.Ranges)
			continue
		}
		f, err := os.Open(v.Path)
		if err != nil {
			return out, fmt.Errorf("plugins: score: %w", err)
		}
		files = append(files, f)
		srcs[i] = readerSource(f, v.Ranges)
	}
	f := e.newFeeder()
	defer f.release()
	return e.scoreLocal(ctx, p, in, l, params, srcs, f)
}

// scoreLocal runs the call in this process: allocations in a fixed order
// (names, table, weights, gradient, windows, parameters, output), then
// tenzro_score.
func (e *Engine) scoreLocal(ctx context.Context, p *plugin, in ScoreInput, l *scoreLayout, params []float64, srcs []*source, f *feeder) (out ScoreOutput, err error) {
	c, err := e.newCall(ctx, p, e.fuelFor(ctx), f)
	if err != nil {
		return out, err
	}
	defer c.close(ctx)
	defer func() { out.Fuel = c.used() }()
	es := int64(in.Dtype.Size())
	namesPtr, err := c.alloc(ctx, uint64(len(l.names))+1)
	if err != nil {
		return out, err
	}
	if err := c.write(namesPtr, l.names); err != nil {
		return out, err
	}
	table := append([]byte(nil), l.table...)
	off := namesPtr
	for i, t := range in.Tensors {
		binary.LittleEndian.PutUint32(table[32*i:], off)
		off += uint32(len(t.Name))
	}
	tabPtr, err := c.alloc(ctx, uint64(len(table)))
	if err != nil {
		return out, err
	}
	if err := c.write(tabPtr, table); err != nil {
		return out, err
	}
	wPtr, err := c.alloc(ctx, uint64(l.total*es))
	if err != nil {
		return out, err
	}
	f.ids(srcs...)
	at := wPtr
	for _, s := range srcs {
		if s.size == 0 {
			continue
		}
		if err := c.fill(at, []*source{s}, 0, s.size); err != nil {
			return out, err
		}
		at += uint32(s.size)
	}
	gPtr, err := c.alloc(ctx, uint64(len(in.Gradient)))
	if err != nil {
		return out, err
	}
	if err := c.write(gPtr, in.Gradient); err != nil {
		return out, err
	}
	winPtr, err := c.alloc(ctx, uint64(len(in.Windows)))
	if err != nil {
		return out, err
	}
	if err := c.write(winPtr, in.Windows); err != nil {
		return out, err
	}
	parPtr, err := c.alloc(ctx, uint64(len(params))*8+8)
	if err != nil {
		return out, err
	}
	if err := c.write(parPtr, f64Bytes(params)); err != nil {
		return out, err
	}
	outPtr, err := c.alloc(ctx, uint64(in.Batches)*16)
	if err != nil {
		return out, err
	}
	dc, _ := dtypeCode(in.Dtype)
	nest := uint64(0)
	if in.Nesterov {
		nest = 1
	}
	res, err := c.invoke(ctx, "tenzro_score", dc, uint64(len(in.Tensors)), uint64(tabPtr), uint64(wPtr),
		uint64(in.FragFirst), uint64(in.FragCount), uint64(gPtr),
		uint64(math.Float32bits(in.LR)), uint64(math.Float32bits(in.Beta)), nest,
		uint64(in.Batches), uint64(in.BatchSize), uint64(in.WindowLen), uint64(winPtr),
		uint64(parPtr), uint64(len(params)), uint64(outPtr))
	if err != nil {
		return out, err
	}
	if rc := uint32(res[0]); rc != 0 {
		return out, c.guestError(ctx, rc)
	}
	raw, err := c.read(outPtr, uint64(in.Batches)*16)
	if err != nil {
		return out, err
	}
	out.Before, out.After = splitScores(raw, in.Batches)
	return out, nil
}

// splitScores reads the guest's (before, after) f64 pairs, NaN canonical
// (ABI.md §11).
func splitScores(raw []byte, batches int) (before, after []float64) {
	before, after = make([]float64, batches), make([]float64, batches)
	for i := 0; i < batches; i++ {
		before[i] = canonF64(math.Float64frombits(binary.LittleEndian.Uint64(raw[16*i:])))
		after[i] = canonF64(math.Float64frombits(binary.LittleEndian.Uint64(raw[16*i+8:])))
	}
	return before, after
}

func canonF64(v float64) float64 {
	if math.IsNaN(v) {
		return math.Float64frombits(canonNaN64)
	}
	return v
}

// WeightsFileValues locates a fragment's values in its weights blob (the
// canonical safetensors file whose content hash is the fragment's weights
// hash): the data section, tensors in name order, which is the fragment's
// order. It returns the values and the tensors the header lists.
func WeightsFileValues(path string) (syncer.Values, []wire.TensorInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return syncer.Values{}, nil, fmt.Errorf("plugins: weights: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return syncer.Values{}, nil, fmt.Errorf("plugins: weights: %w", err)
	}
	ts, _, err := safetensors.ParseHeaderAt(f, st.Size(), safetensors.DefaultLimits)
	if err != nil {
		return syncer.Values{}, nil, fmt.Errorf("plugins: weights %s: %w", path, err)
	}
	if len(ts) == 0 {
		return syncer.Values{}, nil, fmt.Errorf("plugins: weights %s: no tensors", path)
	}
	infos := make([]wire.TensorInfo, len(ts))
	off := ts[0].Offset
	for i, t := range ts {
		if t.Offset != off {
			return syncer.Values{}, nil, fmt.Errorf("plugins: weights %s: tensor %q is not stored in name order", path, t.Name)
		}
		off += t.Len
		infos[i] = wire.TensorInfo{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape}
	}
	return syncer.FileValues(path, syncer.ByteRange{Off: ts[0].Offset, Len: off - ts[0].Offset}), infos, nil
}

// WindowBytes encodes f32 windows as ScoreInput.Windows expects them.
func WindowBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
