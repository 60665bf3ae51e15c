package plugins

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Finalize implements syncer.Engine: a fragment's round-level verifiers,
// aggregation and outer step in one call — in one worker process when the
// engine runs calls out of process — on values read straight from their
// stored files into the plugins' memory. The order and rules are
// syncer.RunFinalize's; the results equal syncer.FinalizeInMemory's over
// Verify, Aggregate and OuterStep, byte for byte and fuel for fuel: every
// plugin call is the same call (same instance lifecycle, allocations,
// budget and entry points); what changes is how the bytes get there and
// where they go.
//
//   - Inputs are read once from their files (or the caller's readers) into
//     a stage (stage_linux.go), and the stage's pages are mapped over the
//     guest's input block: no copy through the node, no copy into fresh,
//     zeroed guest pages. A round-level verifier's K calls map one staged
//     round.
//   - The aggregate lands in a stage mapped over the aggregator's output
//     block; the outer step's gradient block maps it when the two blocks
//     share their alignment within a page, else it is copied once. Its
//     content hash is computed while the outer step runs.
//   - The weights and momentum are read into their output buffers (the
//     node's arena in a worker), which the outer step's blocks map shared:
//     the new state is written in place and handed to the caller's Write
//     without a copy.
func (e *Engine) Finalize(ctx context.Context, in syncer.FinalizeInput) (syncer.FinalizeOutput, error) {
	span, err := finalizeShape(in)
	if err != nil {
		return syncer.FinalizeOutput{}, err
	}
	if e.pool != nil {
		return e.remoteFinalize(ctx, in, span)
	}
	return e.finalizeInProcess(ctx, in)
}

// finalizeInProcess is Finalize in this process, on values finalizeShape
// has checked.
func (e *Engine) finalizeInProcess(ctx context.Context, in syncer.FinalizeInput) (syncer.FinalizeOutput, error) {
	var out syncer.FinalizeOutput
	span := int64(in.N) * int64(in.Dtype.Size())
	var err error
	srcs := make([]*source, len(in.Inputs))
	var releases []func()
	defer func() {
		for _, rel := range releases {
			rel()
		}
	}()
	open := func(v syncer.Values) (*source, error) {
		if v.R != nil {
			if b, ok := v.InPlace(); ok {
				return bytesSource(b), nil // a mapped blob: read in place
			}
			return readerSource(v.R, v.Ranges), nil
		}
		s, release, err := e.openValues(v.Path, v.Ranges)
		if err != nil {
			return nil, fmt.Errorf("plugins: finalize: %w", err)
		}
		releases = append(releases, release)
		return s, nil
	}
	for i, v := range in.Inputs {
		if srcs[i], err = open(v); err != nil {
			return out, err
		}
	}
	var w, m *source
	if !in.AggregateOnly {
		if w, err = open(in.Weights); err != nil {
			return out, err
		}
		if in.Momentum != nil {
			if m, err = open(*in.Momentum); err != nil {
				return out, err
			}
		}
	} else {
		span = int64(in.N) * 4 // the aggregate takes the weights' place
	}
	f := e.newFeeder()
	defer f.release()
	wOut, mOut := stagedDest(f, span), stagedDest(f, int64(in.N)*4)
	res, known, err := e.finalizeLocal(ctx, in, srcs, w, m, wOut, mOut, f)
	if err != nil || res.Status != wire.FragAggregated {
		return res, err
	}
	var mb []byte
	if !in.AggregateOnly {
		mb = mOut.bytes()
	}
	if in.Write != nil {
		return res, in.Write(wOut.bytes(), mb, known)
	}
	res.Weights = append([]byte(nil), wOut.bytes()...)
	res.Momentum = append([]byte(nil), mb...)
	if mb == nil {
		res.Momentum = nil
	}
	return res, nil
}

// finalizeShape checks the sizes of a finalize's values and returns the
// bytes of one input.
func finalizeShape(in syncer.FinalizeInput) (int64, error) {
	es := int64(in.Dtype.Size())
	if es == 0 || in.N <= 0 || in.N > math.MaxInt32 {
		return 0, fmt.Errorf("plugins: finalize: dtype %q, N=%d", in.Dtype, in.N)
	}
	span := int64(in.N) * es
	for i, v := range in.Inputs {
		if v.Len() != span {
			return 0, fmt.Errorf("plugins: finalize: input %d spans %d bytes, want N*%d = %d", i, v.Len(), es, span)
		}
		if v.R == nil && v.Path == "" {
			return 0, fmt.Errorf("plugins: finalize: input %d has neither a reader nor a path", i)
		}
	}
	if in.AggregateOnly {
		return span, nil
	}
	if in.Weights.Len() != span || (in.Weights.R == nil && in.Weights.Path == "") {
		return 0, fmt.Errorf("plugins: finalize: weights span %d bytes, want %d", in.Weights.Len(), span)
	}
	if in.Momentum != nil && (in.Momentum.Len() != int64(in.N)*4 || (in.Momentum.R == nil && in.Momentum.Path == "")) {
		return 0, fmt.Errorf("plugins: finalize: momentum spans %d bytes, want %d", in.Momentum.Len(), int64(in.N)*4)
	}
	return span, nil
}

// finalizeLocal runs a finalize in this process: syncer.RunFinalize over
// the plugins' steps on values placed from srcs (pluginSteps). The new
// weights and momentum land in wOut and mOut, NaN canonicalised; the
// caller hands them on, with their hashes (known) when the sweep computed
// them (in.WeightsHeader set, fused.go).
func (e *Engine) finalizeLocal(ctx context.Context, in syncer.FinalizeInput, srcs []*source, w, m *source, wOut, mOut dest, f *feeder) (syncer.FinalizeOutput, *syncer.StateHashes, error) {
	f.ids(srcs...)
	s := &pluginSteps{e: e, in: in, srcs: srcs, w: w, m: m, wOut: wOut, mOut: mOut, f: f}
	defer s.ahead.Wait()
	out, err := syncer.RunFinalize(ctx, in, s)
	if err != nil || out.Status != wire.FragAggregated || s.fz == nil {
		return out, nil, err
	}
	return out, s.fz.state, nil
}

// pluginSteps are syncer.FinalizeSteps on staged sources: inputs mapped
// into the guests' memory, the aggregate staged where the outer step's
// gradient block maps it, the weights and momentum read ahead into their
// outputs while the aggregator runs (a native outer step).
type pluginSteps struct {
	e          *Engine
	in         syncer.FinalizeInput
	srcs       []*source
	w, m       *source
	wOut, mOut dest
	f          *feeder
	ahead      sync.WaitGroup
	agg        finalizeAgg
	// stepped: the outer step ran within Aggregate (fused), with this
	// result; fz is the fusion it ran with.
	fz       *fusion
	stepped  bool
	stepFuel uint64
	stepErr  error
}

func (s *pluginSteps) Verify(ctx context.Context, v syncer.RuleRef, ks []int) ([]syncer.VerifyOutput, error) {
	return s.e.finalizeVerifier(ctx, s.in, v, s.srcs, ks, s.f)
}

func (s *pluginSteps) Aggregate(ctx context.Context, kept []int) (syncer.AggregateOutput, error) {
	srcs := make([]*source, len(kept))
	for j, k := range kept {
		srcs[j] = s.srcs[k]
	}
	var err error
	if s.in.AggregateOnly {
		// The aggregate lands where the new weights would.
		s.agg, err = s.e.finalizeAggregate(ctx, s.in, srcs, s.f, s.wOut)
		return s.agg.AggregateOutput, err
	}
	if stateInMemory(s.w, s.m) {
		return s.fused(ctx, srcs)
	}
	// A native outer step reads the weights and momentum on the other core
	// while the aggregator's guest runs.
	s.e.readAhead(ctx, s.in, s.w, s.m, s.wOut, s.mOut, s.f, &s.ahead)
	s.agg, err = s.e.finalizeAggregate(ctx, s.in, srcs, s.f, stagedDest(s.f, int64(s.in.N)*4))
	return s.agg.AggregateOutput, err
}

// fused is Aggregate with the weights and momentum in memory: when the rule
// runs natively its aggregate is owed (fused.go), and the outer step runs
// at once, sweeping both when it runs natively too; Outer then returns the
// step's result. If the step did not sweep, the aggregate is computed and
// hashed as in Aggregate.
func (s *pluginSteps) fused(ctx context.Context, srcs []*source) (syncer.AggregateOutput, error) {
	fz := &fusion{n: s.in.N, head: s.in.WeightsHeader}
	s.fz = fz
	ctx = withFusion(ctx, fz)
	var err error
	s.agg, err = s.e.finalizeAggregate(ctx, s.in, srcs, s.f, stagedDest(s.f, int64(s.in.N)*4))
	out := s.agg.AggregateOutput
	if err != nil || !fz.pending {
		return out, err
	}
	g := bytesSource(s.agg.dest.bytes())
	s.f.ids(g)
	if st := s.agg.dest.out.st; st != nil { // as in Outer, for a step in Wasm
		s.f.remember([]*source{g}, 0, int64(s.in.N)*4, st, s.agg.dest.out.off)
	}
	s.stepped = true
	s.stepFuel, s.stepErr = s.e.finalizeOuter(ctx, s.in, s.w, s.m, g, s.wOut, s.mOut, s.f)
	if !fz.swept {
		fz.materialize()
		return out, nil
	}
	h := fz.hash
	out.Aggregate, out.Hash = nil, &h
	return out, nil
}

func (s *pluginSteps) Outer(ctx context.Context, aggregate []byte) (uint64, error) {
	if s.stepped { // run by fused
		return s.stepFuel, s.stepErr
	}
	// The step's gradient block maps the staged aggregate private, or
	// copies it: the aggregate does not change.
	g := bytesSource(aggregate)
	s.f.ids(g)
	if st := s.agg.dest.out.st; st != nil {
		s.f.remember([]*source{g}, 0, int64(s.in.N)*4, st, s.agg.dest.out.off)
	}
	s.ahead.Wait()
	return s.e.finalizeOuter(ctx, s.in, s.w, s.m, g, s.wOut, s.mOut, s.f)
}

// finalizeVerifier runs one round-level verifier on the inputs ks names,
// as Engine.Verify would, each against every input.
func (e *Engine) finalizeVerifier(ctx context.Context, in syncer.FinalizeInput, v syncer.RuleRef, srcs []*source, ks []int, f *feeder) ([]syncer.VerifyOutput, error) {
	p, err := e.pluginFor(ctx, v, KindVerify)
	if err != nil {
		return nil, err
	}
	defer e.release(p)
	params, err := paramVector(p.manifest, v.Params)
	if err != nil {
		return nil, fmt.Errorf("plugins: %s: %w", p.info.Name, err)
	}
	es, err := checkShape(p, in.Dtype, in.N, 1)
	if err != nil {
		return nil, err
	}
	round := srcs
	if p.manifest.RoundLevel {
		if _, err := checkShape(p, in.Dtype, in.N, len(srcs)); err != nil {
			return nil, err
		}
	} else {
		round = nil // per-submission verifiers never see the round
	}
	out := make([]syncer.VerifyOutput, len(ks))
	for j, k := range ks {
		if out[j], err = e.verifySrc(ctx, p, params, in.Dtype, in.N, es, srcs[k], round, f); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type finalizeAgg struct {
	syncer.AggregateOutput
	dest dest
}

// finalizeAggregate is Engine.Aggregate on the kept inputs, the aggregate
// landing in to (N f32, NaN canonicalised).
func (e *Engine) finalizeAggregate(ctx context.Context, in syncer.FinalizeInput, kept []*source, f *feeder, to dest) (finalizeAgg, error) {
	var out finalizeAgg
	p, err := e.pluginFor(ctx, in.Rule, KindAggregate)
	if err != nil {
		return out, err
	}
	defer e.release(p)
	params, err := paramVector(p.manifest, in.Rule.Params)
	if err != nil {
		return out, fmt.Errorf("plugins: %s: %w", p.info.Name, err)
	}
	es, err := checkShape(p, in.Dtype, in.N, len(kept))
	if err != nil {
		return out, err
	}
	out.dest = to
	out.AggregateOutput, err = e.aggregateSrc(ctx, p, params, in.Dtype, in.N, es, kept, out.dest, f)
	if err != nil {
		return out, err
	}
	if !out.dest.out.canonical { // the native Mean writes canonical NaNs
		parallel(len(out.Aggregate)/8, func(lo, hi int) { canonicalF32(out.Aggregate[8*lo : 8*hi]) })
		canonicalF32(out.Aggregate[len(out.Aggregate)&^7:])
	}
	return out, nil
}

// finalizeOuter is Engine.OuterStep: the new state lands in wOut and mOut
// (NaN canonicalised); it returns the fuel.
func (e *Engine) finalizeOuter(ctx context.Context, in syncer.FinalizeInput, w, m, g *source, wOut, mOut dest, f *feeder) (uint64, error) {
	p, err := e.pluginFor(ctx, in.Outer, KindOuter)
	if err != nil {
		return 0, err
	}
	defer e.release(p)
	es, err := checkShape(p, in.Dtype, in.N, 1)
	if err != nil {
		return 0, err
	}
	fuel, err := e.outerSrc(ctx, p, in.Dtype, in.N, es, w, m, g, wOut, mOut, in.LR, in.Beta, in.Nesterov, f)
	if err != nil {
		return fuel, err
	}
	canonicalOut(in.Dtype, wOut, mOut)
	return fuel, nil
}

// checkShape is checkInputs for k inputs of n values of d whose sizes the
// caller has checked.
func checkShape(p *plugin, d machine.Dtype, n, k int) (int, error) {
	if _, err := dtypeCode(d); err != nil {
		return 0, fmt.Errorf("plugins: %w", err)
	}
	if !p.manifest.SupportsDtype(string(d)) {
		return 0, &syncer.RuleFailure{Rule: p.info.Name, Code: CodeBadInput, Reason: fmt.Sprintf("rule does not accept %s", d)}
	}
	if k == 0 || k > MaxK {
		return 0, fmt.Errorf("plugins: %d inputs, want 1..%d", k, MaxK)
	}
	if n <= 0 || n > math.MaxInt32 {
		return 0, fmt.Errorf("plugins: N=%d out of range", n)
	}
	return d.Size(), nil
}

// stateInMemory reports whether the weights w and the momentum m (nil:
// none) are bytes in memory (mapped blobs), not read from a reader: the
// outer step then reads them in place.
func stateInMemory(w, m *source) bool { return w.r == nil && (m == nil || m.r == nil) }

// readAhead has the weights and momentum read into their output buffers in
// the background, from when the aggregator's guest starts (f.onRun), when
// the outer step will run natively (its blocks then need no particular
// alignment): the caller waits on wg before the step.
func (e *Engine) readAhead(ctx context.Context, in syncer.FinalizeInput, w, m *source, wOut, mOut dest, f *feeder, wg *sync.WaitGroup) {
	p, err := e.pluginFor(ctx, in.Outer, KindOuter)
	if err != nil {
		return
	}
	defer e.release(p)
	if _, ok := e.nativeOuter(ctx, p, outerVariant{in.Dtype, m != nil, in.Nesterov}); !ok {
		return
	}
	if stateInMemory(w, m) {
		return // in memory (mapped): the step reads them in place
	}
	wb, mb := wOut.bytes(), mOut.bytes()
	read := func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.readAt(wb, 0); err != nil {
				return // read again, and fail, by the step
			}
			if m == nil {
				clear(mb)
			} else if err := m.readAt(mb, 0); err != nil {
				return
			}
			wOut.out.prefilled, mOut.out.prefilled = true, true
		}()
	}
	if f == nil {
		read()
	} else {
		f.onRun = read
	}
}
