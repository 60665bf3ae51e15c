//go:build linux

package plugins

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/tenzro/train/plugins/builtin"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// newEngineWorkers starts the worker pool of an engine whose calls run out
// of process.
func newEngineWorkers(e *Engine) (*pool, error) {
	as := e.cfg.WorkerAddressSpace
	if as == 0 {
		as = 2*e.memBudget() + 1<<30
	}
	wc := workerConfig{
		MemoryPages: e.cfg.MemoryPages, Fuel: e.cfg.Fuel, NoFuel: e.cfg.NoFuel, Interpreter: e.cfg.Interpreter,
		MaxModuleBytes: e.cfg.MaxModuleBytes, CacheDir: e.cfg.CacheDir, CacheBytes: e.cfg.CacheBytes,
		AddressSpace: as, ChunkOverride: e.chunkOverride, StageFrom: e.stageFrom,
	}
	return newPool(e.cfg.WorkerCommand, e.cfg.Workers, wc, e.log)
}

// moduleBytes returns the published bytes of p for a worker.
func (e *Engine) moduleBytes(ctx context.Context, p *plugin) ([]byte, error) {
	if p.module != nil {
		return p.module, nil
	}
	return e.Module(ctx, p.info.Hash)
}

// prepareRemote has a worker instrument, compile and probe a module that
// passed the structural checks here; this process keeps only its info.
func (e *Engine) prepareRemote(ctx context.Context, module []byte, man *Manifest) (*plugin, error) {
	h := wire.SHA256(module)
	pc := &poolCall{
		req:    workerReq{Op: "publish", Probe: true},
		hashes: []wire.Hash{h},
		module: func(wire.Hash) ([]byte, error) { return module, nil },
		wall:   ProbeWallClock,
	}
	resp, _, err := e.pool.call(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("plugins: %s: %w", man.ID, err)
	}
	if resp.Err != "" {
		return nil, fmt.Errorf("%s", resp.Err)
	}
	if resp.Info == nil || resp.Info.Hash != h {
		return nil, &WorkerError{Op: "publish", Reason: fmt.Sprintf("%s: answered for another module", man.ID)}
	}
	p := &plugin{info: *resp.Info, manifest: man}
	if e.cfg.KV == nil && !isBuiltinModule(module) {
		p.module = bytes.Clone(module)
	}
	return p, nil
}

func isBuiltinModule(module []byte) bool {
	h := wire.SHA256(module)
	for _, stem := range builtin.Names() {
		if m, _ := builtin.Module(stem); wire.SHA256(m) == h {
			return true
		}
	}
	return false
}

// remote runs one call on a worker and turns its answer into this
// package's errors: a rule failure as *syncer.RuleFailure (recorded), a
// worker's death or kill as *WorkerError (local, never recorded).
func (e *Engine) remote(ctx context.Context, p *plugin, req workerReq, inLen int64, fill func([]byte) error) (*workerResp, []byte, error) {
	req.Probe = isProbe(ctx)
	pc := &poolCall{
		req:    req,
		hashes: []wire.Hash{p.info.Hash},
		module: func(wire.Hash) ([]byte, error) { return e.moduleBytes(ctx, p) },
		inLen:  inLen,
		fill:   fill,
		wall:   e.wallFor(ctx),
	}
	resp, out, err := e.pool.call(ctx, pc)
	if err != nil {
		return nil, nil, err
	}
	if resp.Failure != nil {
		return resp, nil, resp.Failure
	}
	if resp.Err != "" {
		return resp, nil, fmt.Errorf("%s", resp.Err)
	}
	return resp, out, nil
}

func (e *Engine) remoteAggregate(ctx context.Context, p *plugin, in syncer.AggregateInput) (syncer.AggregateOutput, error) {
	var out syncer.AggregateOutput
	span := int64(in.N) * int64(in.Dtype.Size())
	req := workerReq{Op: "aggregate", Rule: in.Rule, Dtype: in.Dtype, N: in.N, K: len(in.Inputs), OutLen: int64(in.N) * 4}
	resp, agg, err := e.remote(ctx, p, req, int64(len(in.Inputs))*span, func(dst []byte) error {
		// One goroutine per input: the copy is the whole cost of a worker
		// call, and memory bandwidth scales with cores.
		var wg sync.WaitGroup
		for i, b := range in.Inputs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				copy(dst[int64(i)*span:], b)
			}()
		}
		wg.Wait()
		return nil
	})
	if resp != nil {
		out.Fuel = resp.Fuel
	}
	if err != nil {
		return out, err
	}
	out.Aggregate, out.Selected = agg, resp.Selected
	if resp.HasScores {
		out.Scores = make([]float64, len(resp.ScoreBits))
		for i, b := range resp.ScoreBits {
			out.Scores[i] = math.Float64frombits(b)
		}
	}
	if len(out.Selected) != len(in.Inputs) {
		return syncer.AggregateOutput{}, &WorkerError{Op: "aggregate", Reason: fmt.Sprintf("returned %d selections for %d inputs", len(out.Selected), len(in.Inputs))}
	}
	return out, nil
}

func (e *Engine) remoteVerify(ctx context.Context, p *plugin, in syncer.VerifyInput) (syncer.VerifyOutput, error) {
	var out syncer.VerifyOutput
	span := int64(in.N) * int64(in.Dtype.Size())
	req := workerReq{Op: "verify", Rule: in.Verifier, Dtype: in.Dtype, N: in.N, K: len(in.Round)}
	resp, _, err := e.remote(ctx, p, req, int64(1+len(in.Round))*span, func(dst []byte) error {
		copy(dst, in.Input)
		for i, b := range in.Round {
			copy(dst[int64(i+1)*span:], b)
		}
		return nil
	})
	if resp != nil {
		out.Fuel = resp.Fuel
	}
	if err != nil {
		return out, err
	}
	out.Accept, out.Code, out.Reason = resp.Accept, resp.Code, resp.Reason
	return out, nil
}

func (e *Engine) remoteOuter(ctx context.Context, p *plugin, in syncer.OuterStepInput, es int) (syncer.OuterStepOutput, error) {
	var out syncer.OuterStepOutput
	n := int64(in.N)
	wl := n * int64(es)
	inLen := wl + n*4
	if in.Momentum != nil {
		inLen += n * 4
	}
	req := workerReq{Op: "outer", Rule: in.Rule, Dtype: in.Dtype, N: in.N, Momentum: in.Momentum != nil,
		LR: in.LR, Beta: in.Beta, Nesterov: in.Nesterov, OutLen: wl + n*4}
	resp, res, err := e.remote(ctx, p, req, inLen, func(dst []byte) error {
		copy(dst, in.Weights)
		copy(dst[wl:], in.Aggregate)
		if in.Momentum != nil {
			copy(dst[wl+n*4:], in.Momentum)
		}
		return nil
	})
	if resp != nil {
		out.Fuel = resp.Fuel
	}
	if err != nil {
		return out, err
	}
	out.Weights, out.Momentum = res[:wl:wl], res[wl:]
	return out, nil
}

func (e *Engine) remoteDecode(ctx context.Context, p *plugin, in syncer.DecodeInput) (syncer.DecodeOutput, error) {
	var out syncer.DecodeOutput
	req := workerReq{Op: "decode", Rule: in.Codec, Dtype: in.Dtype, N: in.N, OutLen: int64(in.N) * int64(in.Dtype.Size())}
	var inLen int64
	for _, t := range in.Tensors {
		req.Tensors = append(req.Tensors, workerTensor{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape, Len: int64(len(t.Data))})
		inLen += int64(len(t.Data))
	}
	resp, res, err := e.remote(ctx, p, req, inLen, func(dst []byte) error {
		var off int64
		for _, t := range in.Tensors {
			copy(dst[off:], t.Data)
			off += int64(len(t.Data))
		}
		return nil
	})
	if resp != nil {
		out.Fuel = resp.Fuel
	}
	if err != nil {
		return out, err
	}
	out.Values = res
	return out, nil
}
