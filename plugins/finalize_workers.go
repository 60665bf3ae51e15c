//go:build linux

package plugins

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// remoteFinalize runs a finalize on one worker: the worker opens the stored
// files itself (values with a path) and reads them into its staging memory;
// values without a path are copied into the arena here. The new weights and
// momentum come back in the arena's output room, where in.Write reads them
// before the worker is released — or, when the worker hashed them and the
// caller can take them (in.Hold), the arena is kept and handed over as it
// is: the weights header is written in the room reserved before the output
// room, right before the new weights, so that the weights blob is one
// slice of the arena.
func (e *Engine) remoteFinalize(ctx context.Context, in syncer.FinalizeInput, span int64) (syncer.FinalizeOutput, error) {
	// The modules: the worker is sent those it lacks. A plugin this node
	// cannot find makes the separate steps the reference for whatever
	// happens next (they may never need it: a fragment without quorum).
	var hashes []wire.Hash
	mods := map[wire.Hash]*plugin{}
	need := func(ref syncer.RuleRef, kind string) bool {
		p, err := e.pluginFor(ctx, ref, kind)
		if err != nil {
			return false
		}
		defer e.release(p)
		if mods[ref.Hash] == nil {
			hashes = append(hashes, ref.Hash)
		}
		mods[ref.Hash] = p
		return true
	}
	calls := 2
	for _, v := range in.Verifiers {
		if v.RoundLevel && len(in.Inputs) > 0 {
			if !need(v, KindVerify) {
				return e.finalizeInProcess(ctx, in)
			}
			calls += len(in.Inputs)
		}
	}
	if !need(in.Rule, KindAggregate) || (!in.AggregateOnly && !need(in.Outer, KindOuter)) {
		return e.finalizeInProcess(ctx, in)
	}
	n := int64(in.N)
	if in.AggregateOnly {
		span = n * 4 // the aggregate takes the new weights' place
	}
	fr := &finReq{Rule: in.Rule, Outer: in.Outer, Verifiers: in.Verifiers, Quorum: in.Quorum, AggregateOnly: in.AggregateOnly}
	if len(in.WeightsHeader) <= maxSweptHeader {
		fr.WeightsHeader = in.WeightsHeader // else the node hashes the state itself
	}
	// Values without a path go through the arena.
	type arenaCopy struct {
		src     *source
		off, to int64
	}
	var copies []arenaCopy
	var inLen int64
	place := func(v syncer.Values) workerValues {
		if v.Path != "" {
			return workerValues{Path: v.Path, Ranges: coalesce(v.Ranges)}
		}
		l := v.Len()
		copies = append(copies, arenaCopy{src: readerSource(v.R, v.Ranges), off: inLen, to: inLen + l})
		wv := workerValues{Ranges: []syncer.ByteRange{{Off: inLen, Len: l}}}
		inLen += (l + 63) &^ 63
		return wv
	}
	for _, v := range in.Inputs {
		fr.Inputs = append(fr.Inputs, place(v))
	}
	if !in.AggregateOnly {
		fr.Weights = place(in.Weights)
	}
	if in.Momentum != nil && !in.AggregateOnly {
		m := place(*in.Momentum)
		fr.Momentum = &m
	}
	// The output room: each output can start anywhere within a page of its
	// part.
	page := int64(pageSize)
	fr.WeightsRoom = (span + page + 63) &^ 63
	outLen := fr.WeightsRoom + n*4 + page
	// Room for the weights header before the output room, for in.Hold.
	var gap int64
	if in.Hold != nil && !in.AggregateOnly && fr.WeightsHeader != nil {
		gap = (int64(len(fr.WeightsHeader)) + 63) &^ 63
	}
	req := workerReq{Op: "finalize", Dtype: in.Dtype, N: in.N, LR: in.LR, Beta: in.Beta, Nesterov: in.Nesterov, Fin: fr, OutLen: outLen}
	wall := e.wallFor(ctx)
	if max := time.Duration(math.MaxInt64) / time.Duration(calls); wall < max {
		wall *= time.Duration(calls)
	} else {
		wall = math.MaxInt64
	}
	out := syncer.FinalizeOutput{}
	pc := &poolCall{
		req:    req,
		hashes: hashes,
		module: func(h wire.Hash) ([]byte, error) { return e.moduleBytes(ctx, mods[h]) },
		inLen:  inLen,
		gap:    gap,
		wall:   wall,
		fill: func(dst []byte) error {
			jobs := make([]copyJob, len(copies))
			for i, c := range copies {
				jobs[i] = copyJob{dst: dst[c.off:c.to], src: c.src}
			}
			return runCopies(jobs)
		},
		consume: func(resp *workerResp, arena []byte, keep func() func()) error {
			fin := resp.Fin
			if fin == nil || len(fin.Rejected) != len(in.Inputs) || len(fin.Selected) != len(in.Inputs) {
				return &WorkerError{Op: "finalize", Reason: "answered for another call"}
			}
			out = syncer.FinalizeOutput{Status: fin.Status, Reason: fin.Reason, Rejected: fin.Rejected, Selected: fin.Selected,
				Kept: fin.Kept, AggregateHash: fin.AggregateHash, Fuel: resp.Fuel}
			if fin.Status != wire.FragAggregated {
				return nil
			}
			room := resp.outOff
			if fin.WeightsOff < room || fin.WeightsOff+span > room+fr.WeightsRoom ||
				!in.AggregateOnly && (fin.MomentumOff < room+fr.WeightsRoom || fin.MomentumOff+n*4 > room+outLen) {
				return &WorkerError{Op: "finalize", Reason: "put its outputs outside their room"}
			}
			w := arena[fin.WeightsOff : fin.WeightsOff+span : fin.WeightsOff+span]
			var m []byte
			if !in.AggregateOnly {
				m = arena[fin.MomentumOff : fin.MomentumOff+n*4 : fin.MomentumOff+n*4]
			}
			var known *syncer.StateHashes
			if fin.StateHashed && fr.WeightsHeader != nil && !in.AggregateOnly {
				known = &syncer.StateHashes{Weights: fin.WeightsHash, Momentum: fin.MomentumHash}
			}
			if hs := fin.WeightsOff - int64(len(fr.WeightsHeader)); known != nil && gap > 0 && hs >= room-gap {
				copy(arena[hs:fin.WeightsOff], fr.WeightsHeader)
				blob := arena[hs : fin.WeightsOff+span : fin.WeightsOff+span]
				return in.Hold(blob, m, *known, keep())
			}
			if in.Write != nil {
				return in.Write(w, m, known)
			}
			out.Weights = append([]byte(nil), w...)
			if m != nil {
				out.Momentum = append([]byte(nil), m...)
			}
			return nil
		},
	}
	resp, _, err := e.pool.call(ctx, pc)
	if err != nil {
		return out, err
	}
	if resp.Failure != nil {
		return out, resp.Failure // a round verifier's failure: not recorded
	}
	if resp.Err != "" {
		return out, fmt.Errorf("%s", resp.Err)
	}
	return out, nil
}

// maxSweptHeader bounds the weights header a finalize request carries
// (base64 in the JSON header, itself bounded by maxWorkerHeader): a larger
// one (a fragment of thousands of tensors) is not sent, and the node
// hashes the new state itself.
const maxSweptHeader = 64 << 10

// coalesce merges adjacent ranges (a payload's tensors stored in the
// fragment's order are one range).
func coalesce(rs []syncer.ByteRange) []syncer.ByteRange {
	var out []syncer.ByteRange
	for _, r := range rs {
		if l := len(out) - 1; l >= 0 && out[l].Off+out[l].Len == r.Off {
			out[l].Len += r.Len
			continue
		}
		out = append(out, r)
	}
	return out
}

// serveFinalize runs a finalize in a worker over the arena mapping mem.
// after unmaps the stored files it mapped: the worker runs it once the
// response is sent, off the node's wait (unmapping 8 files of a K=6
// commit took 3–7 ms).
func serveFinalize(ctx context.Context, e *Engine, req *workerReq, mem []byte, arena *stage) (_ *finResp, _ uint64, after func(), _ error) {
	fr := req.Fin
	if fr == nil || arena == nil {
		return nil, 0, nil, fmt.Errorf("finalize without a plan or an arena")
	}
	n := int64(req.N)
	es := int64(req.Dtype.Size())
	if es == 0 || n <= 0 || n > math.MaxInt32 {
		return nil, 0, nil, fmt.Errorf("finalize: dtype %q, N=%d", req.Dtype, req.N)
	}
	span := n * es
	if fr.AggregateOnly {
		span = n * 4 // the aggregate takes the new weights' place
	}
	if req.InOff < 0 || req.OutOff < req.InOff || req.OutLen < 0 || req.OutOff+req.OutLen > int64(len(mem)) ||
		fr.WeightsRoom < span+int64(pageSize) || req.OutLen < fr.WeightsRoom+n*4+int64(pageSize) {
		return nil, 0, nil, fmt.Errorf("finalize: arena layout out of bounds")
	}
	inputs := bytes.NewReader(mem[req.InOff:req.OutOff])
	// Stored files are mapped, not read: the native rules read them in
	// place, the others copy from the page cache into their guest.
	var releases []func()
	defer func() {
		rels := releases
		after = func() {
			for _, rel := range rels {
				rel()
			}
		}
	}()
	open := func(v workerValues) (*source, error) {
		if v.Path == "" {
			return readerSource(inputs, v.Ranges), nil
		}
		s, release, err := e.openValues(v.Path, v.Ranges)
		if err != nil {
			return nil, err
		}
		releases = append(releases, release)
		return s, nil
	}
	in := syncer.FinalizeInput{Rule: fr.Rule, Outer: fr.Outer, Verifiers: fr.Verifiers, Dtype: req.Dtype, N: req.N, Quorum: fr.Quorum,
		LR: req.LR, Beta: req.Beta, Nesterov: req.Nesterov, AggregateOnly: fr.AggregateOnly, WeightsHeader: fr.WeightsHeader,
		Inputs: make([]syncer.Values, len(fr.Inputs))} // counted by RunFinalize; the sources are srcs
	srcs := make([]*source, len(fr.Inputs))
	for i, v := range fr.Inputs {
		s, err := open(v)
		if err != nil {
			return nil, 0, nil, err
		}
		if s.size != n*es {
			return nil, 0, nil, fmt.Errorf("finalize: input %d spans %d bytes, want %d", i, s.size, span)
		}
		srcs[i] = s
	}
	var w, m *source
	if !fr.AggregateOnly {
		var err error
		if w, err = open(fr.Weights); err != nil {
			return nil, 0, nil, err
		}
		if w.size != span {
			return nil, 0, nil, fmt.Errorf("finalize: weights span %d bytes, want %d", w.size, span)
		}
	}
	if fr.Momentum != nil && !fr.AggregateOnly {
		var err error
		if m, err = open(*fr.Momentum); err != nil {
			return nil, 0, nil, err
		}
		if m.size != n*4 {
			return nil, 0, nil, fmt.Errorf("finalize: momentum spans %d bytes, want %d", m.size, n*4)
		}
	}
	f := e.newFeeder()
	defer f.release()
	wOut := roomDest(arena, req.OutOff, fr.WeightsRoom, span)
	mOut := roomDest(arena, req.OutOff+fr.WeightsRoom, req.OutLen-fr.WeightsRoom, n*4)
	res, known, err := e.finalizeLocal(ctx, in, srcs, w, m, wOut, mOut, f)
	if err != nil {
		return nil, res.Fuel, nil, err
	}
	resp := &finResp{Status: res.Status, Reason: res.Reason, Rejected: res.Rejected, Selected: res.Selected, Kept: res.Kept,
		AggregateHash: res.AggregateHash}
	if known != nil {
		resp.StateHashed, resp.WeightsHash, resp.MomentumHash = true, known.Weights, known.Momentum
	}
	if res.Status == wire.FragAggregated {
		wOut.bytes()
		if !fr.AggregateOnly {
			mOut.bytes()
		}
		if wOut.out.st == nil || (!fr.AggregateOnly && mOut.out.st == nil) {
			return nil, res.Fuel, nil, fmt.Errorf("finalize: outputs not in the arena")
		}
		resp.WeightsOff, resp.MomentumOff = wOut.out.off, mOut.out.off
	}
	return resp, res.Fuel, nil, nil
}
