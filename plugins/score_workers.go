//go:build linux

package plugins

import (
	"bytes"
	"context"
	"fmt"
	"math"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// remoteScore runs a score call in a worker: weights held in memory travel
// in the arena, weights in files are opened by the worker; the losses come
// back as f64 bits in ScoreBits (before, after per batch).
func (e *Engine) remoteScore(ctx context.Context, p *plugin, in ScoreInput, _ *scoreLayout) (ScoreOutput, error) {
	var out ScoreOutput
	sr := &scoreReq{FragFirst: in.FragFirst, FragCount: in.FragCount, Batches: in.Batches, BatchSize: in.BatchSize, WindowLen: in.WindowLen,
		Fuel: in.Fuel}
	for _, t := range in.Tensors {
		sr.Tensors = append(sr.Tensors, workerTensor{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape})
	}
	var inLen int64
	var mem []syncer.Values
	for _, v := range in.Weights {
		if v.Path != "" && v.R == nil {
			sr.Weights = append(sr.Weights, workerValues{Path: v.Path, Ranges: v.Ranges})
			continue
		}
		sr.Weights = append(sr.Weights, workerValues{Ranges: []syncer.ByteRange{{Off: inLen, Len: v.Len()}}})
		mem = append(mem, v)
		inLen += v.Len()
	}
	sr.GradOff, sr.GradLen = inLen, int64(len(in.Gradient))
	inLen += sr.GradLen
	sr.WinOff, sr.WinLen = inLen, int64(len(in.Windows))
	inLen += sr.WinLen
	req := workerReq{Op: "score", Rule: in.Evaluator, Dtype: in.Dtype, LR: in.LR, Beta: in.Beta, Nesterov: in.Nesterov, Score: sr}
	resp, _, err := e.remote(ctx, p, req, inLen, func(dst []byte) error {
		var off int64
		for _, v := range mem {
			if err := readerSource(v.R, v.Ranges).readAt(dst[off:off+v.Len()], 0); err != nil {
				return err
			}
			off += v.Len()
		}
		off += int64(copy(dst[off:], in.Gradient))
		copy(dst[off:], in.Windows)
		return nil
	})
	if resp != nil {
		out.Fuel = resp.Fuel
	}
	if err != nil {
		return out, err
	}
	if len(resp.ScoreBits) != 2*in.Batches {
		return ScoreOutput{}, &WorkerError{Op: "score", Reason: fmt.Sprintf("returned %d losses for %d batches", len(resp.ScoreBits), in.Batches)}
	}
	out.Before, out.After = make([]float64, in.Batches), make([]float64, in.Batches)
	for i := 0; i < in.Batches; i++ {
		out.Before[i] = math.Float64frombits(resp.ScoreBits[2*i])
		out.After[i] = math.Float64frombits(resp.ScoreBits[2*i+1])
	}
	return out, nil
}

// serveScore runs a score request on the worker's engine.
func serveScore(ctx context.Context, e *Engine, req *workerReq, span func(off, n int64) ([]byte, error)) (ScoreOutput, error) {
	sr := req.Score
	if sr == nil {
		return ScoreOutput{}, fmt.Errorf("score without a plan")
	}
	in := ScoreInput{Evaluator: req.Rule, Dtype: req.Dtype, FragFirst: sr.FragFirst, FragCount: sr.FragCount,
		LR: req.LR, Beta: req.Beta, Nesterov: req.Nesterov, Batches: sr.Batches, BatchSize: sr.BatchSize, WindowLen: sr.WindowLen, Fuel: sr.Fuel}
	for _, t := range sr.Tensors {
		in.Tensors = append(in.Tensors, wire.TensorInfo{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape})
	}
	inputs, err := span(req.InOff, sr.WinOff+sr.WinLen)
	if err != nil {
		return ScoreOutput{}, err
	}
	for _, v := range sr.Weights {
		if v.Path != "" {
			in.Weights = append(in.Weights, syncer.FileValues(v.Path, v.Ranges...))
			continue
		}
		for _, r := range v.Ranges {
			if r.Off < 0 || r.Len < 0 || r.Off+r.Len > int64(len(inputs)) {
				return ScoreOutput{}, fmt.Errorf("score: weights range outside the input bytes")
			}
		}
		in.Weights = append(in.Weights, syncer.Values{R: bytes.NewReader(inputs), Ranges: v.Ranges})
	}
	if in.Gradient, err = span(req.InOff+sr.GradOff, sr.GradLen); err != nil {
		return ScoreOutput{}, err
	}
	if in.Windows, err = span(req.InOff+sr.WinOff, sr.WinLen); err != nil {
		return ScoreOutput{}, err
	}
	return e.Score(ctx, in)
}
