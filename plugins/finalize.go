package plugins

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Finalize implements syncer.Engine: a fragment's round-level verifiers,
// aggregation and outer step in one call — in one worker process when the
// engine runs calls out of process — on values read straight from their
// stored files into the plugins' memory. The results are those of
// syncer.FinalizeBySteps over Verify, Aggregate and OuterStep, byte for
// byte and fuel for fuel: every plugin call is the same call (same
// instance lifecycle, allocations, budget and entry points); what changes
// is how the bytes get there and where they go.
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
	out := syncer.FinalizeOutput{Rejected: make([]string, len(in.Inputs)), Selected: make([]bool, len(in.Inputs))}
	span, err := finalizeShape(in)
	if err != nil {
		return out, err
	}
	if e.pool != nil {
		return e.remoteFinalize(ctx, in, span)
	}
	srcs := make([]*source, len(in.Inputs))
	var files []*os.File
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	open := func(v syncer.Values) (*source, error) {
		if v.R != nil {
			return readerSource(v.R, v.Ranges), nil
		}
		f, err := os.Open(v.Path)
		if err != nil {
			return nil, fmt.Errorf("plugins: finalize: %w", err)
		}
		files = append(files, f)
		return readerSource(f, v.Ranges), nil
	}
	for i, v := range in.Inputs {
		if srcs[i], err = open(v); err != nil {
			return out, err
		}
	}
	w, err := open(in.Weights)
	if err != nil {
		return out, err
	}
	var m *source
	if in.Momentum != nil {
		if m, err = open(*in.Momentum); err != nil {
			return out, err
		}
	}
	f := e.newFeeder()
	defer f.release()
	wOut, mOut := stagedDest(f, span), stagedDest(f, int64(in.N)*4)
	res, err := e.finalizeLocal(ctx, in, srcs, w, m, wOut, mOut, f)
	if err != nil || res.Status != wire.FragAggregated {
		return res, err
	}
	if in.Write != nil {
		return res, in.Write(wOut.bytes(), mOut.bytes())
	}
	res.Weights = append([]byte(nil), wOut.bytes()...)
	res.Momentum = append([]byte(nil), mOut.bytes()...)
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
	if in.Weights.Len() != span || (in.Weights.R == nil && in.Weights.Path == "") {
		return 0, fmt.Errorf("plugins: finalize: weights span %d bytes, want %d", in.Weights.Len(), span)
	}
	if in.Momentum != nil && (in.Momentum.Len() != int64(in.N)*4 || (in.Momentum.R == nil && in.Momentum.Path == "")) {
		return 0, fmt.Errorf("plugins: finalize: momentum spans %d bytes, want %d", in.Momentum.Len(), int64(in.N)*4)
	}
	return span, nil
}

// finalizeLocal runs a finalize in this process: exactly the steps of
// syncer.FinalizeBySteps, with Verify, Aggregate and OuterStep's checks in
// the same order. The new weights and momentum land in wOut and mOut, NaN
// canonicalised; the caller hands them on.
func (e *Engine) finalizeLocal(ctx context.Context, in syncer.FinalizeInput, srcs []*source, w, m *source, wOut, mOut dest, f *feeder) (syncer.FinalizeOutput, error) {
	out := syncer.FinalizeOutput{Rejected: make([]string, len(srcs)), Selected: make([]bool, len(srcs))}
	f.ids(srcs...)
	n := in.N
	// Round-level verifiers (Engine.Verify per input, against all inputs).
	keep := make([]bool, len(srcs))
	for k := range keep {
		keep[k] = true
	}
	for _, v := range in.Verifiers {
		if !v.RoundLevel || len(srcs) == 0 {
			continue
		}
		if err := e.finalizeVerifier(ctx, in, v, srcs, keep, &out, f); err != nil {
			return out, fmt.Errorf("round verifier %s: %w", v.Name, err)
		}
	}
	var kept []*source
	var keptIdx []int
	for k, ok := range keep {
		if ok {
			kept = append(kept, srcs[k])
			keptIdx = append(keptIdx, k)
		}
	}
	out.Kept = len(kept)
	if len(kept) < in.Quorum {
		out.Status = wire.FragNoQuorum
		out.Reason = syncer.NoQuorumReason(len(kept), in.Quorum)
		return out, nil
	}
	// A native outer step reads the weights and momentum on the other core
	// while the aggregator's guest runs.
	ahead := e.readAhead(ctx, in, w, m, wOut, mOut, f)
	defer ahead.Wait()
	// Aggregation (Engine.Aggregate).
	agg, err := e.finalizeAggregate(ctx, in, kept, f)
	var rf *syncer.RuleFailure
	if errors.As(err, &rf) {
		out.Status, out.Reason = wire.FragRuleFailed, rf.Error()
		return out, nil
	} else if err != nil {
		return out, fmt.Errorf("aggregate: %w", err)
	}
	out.Fuel += agg.Fuel
	for j, k := range keptIdx {
		out.Selected[k] = j < len(agg.Selected) && agg.Selected[j]
	}
	// The aggregate's hash is computed while the outer step runs (the
	// step's gradient block maps the aggregate private, or copies it: the
	// aggregate does not change).
	var hashed sync.WaitGroup
	hashed.Add(1)
	go func() {
		defer hashed.Done()
		out.AggregateHash = wire.ContentHash(agg.Aggregate)
	}()
	g := bytesSource(agg.Aggregate)
	f.ids(g)
	if agg.dest.out.st != nil {
		f.remember([]*source{g}, 0, int64(n)*4, agg.dest.out.st, agg.dest.out.off)
	}
	ahead.Wait()
	fuel, err := e.finalizeOuter(ctx, in, w, m, g, wOut, mOut, f)
	hashed.Wait()
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

// finalizeVerifier runs one round-level verifier on every input, as
// Engine.Verify would, clearing keep and recording the reason for inputs it
// rejects.
func (e *Engine) finalizeVerifier(ctx context.Context, in syncer.FinalizeInput, v syncer.RuleRef, srcs []*source, keep []bool, out *syncer.FinalizeOutput, f *feeder) error {
	p, err := e.pluginFor(ctx, v, KindVerify)
	if err != nil {
		return err
	}
	defer e.release(p)
	params, err := paramVector(p.manifest, v.Params)
	if err != nil {
		return fmt.Errorf("plugins: %s: %w", p.info.Name, err)
	}
	es, err := checkShape(p, in.Dtype, in.N, 1)
	if err != nil {
		return err
	}
	round := srcs
	if p.manifest.RoundLevel {
		if _, err := checkShape(p, in.Dtype, in.N, len(srcs)); err != nil {
			return err
		}
	} else {
		round = nil // per-submission verifiers never see the round
	}
	for k := range srcs {
		vo, err := e.verifySrc(ctx, p, params, in.Dtype, in.N, es, srcs[k], round, f)
		if err != nil {
			return err
		}
		out.Fuel += vo.Fuel
		if !vo.Accept && keep[k] {
			keep[k] = false
			out.Rejected[k] = fmt.Sprintf("%s: %s", v.Name, vo.Reason)
		}
	}
	return nil
}

type finalizeAgg struct {
	syncer.AggregateOutput
	dest dest
}

// finalizeAggregate is Engine.Aggregate on the kept inputs, the aggregate
// landing in a stage (NaN canonicalised).
func (e *Engine) finalizeAggregate(ctx context.Context, in syncer.FinalizeInput, kept []*source, f *feeder) (finalizeAgg, error) {
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
	out.dest = stagedDest(f, int64(in.N)*4)
	out.AggregateOutput, err = e.aggregateSrc(ctx, p, params, in.Dtype, in.N, es, kept, out.dest, f)
	if err != nil {
		return out, err
	}
	parallel(len(out.Aggregate)/8, func(lo, hi int) { canonicalF32(out.Aggregate[8*lo : 8*hi]) })
	canonicalF32(out.Aggregate[len(out.Aggregate)&^7:])
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

// readAhead has the weights and momentum read into their output buffers in
// the background, from when the aggregator's guest starts (f.onRun), when
// the outer step will run natively (its blocks then need no particular
// alignment): the caller waits before the step.
func (e *Engine) readAhead(ctx context.Context, in syncer.FinalizeInput, w, m *source, wOut, mOut dest, f *feeder) *sync.WaitGroup {
	var wg sync.WaitGroup
	p, err := e.pluginFor(ctx, in.Outer, KindOuter)
	if err != nil {
		return &wg
	}
	defer e.release(p)
	if _, ok := e.nativeOuter(ctx, p, outerVariant{in.Dtype, m != nil, in.Nesterov}); !ok {
		return &wg
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
	return &wg
}
