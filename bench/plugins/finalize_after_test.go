package plugins

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	wasm "github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// The after path of BenchmarkFinalize (finalize_test.go): one
// Engine.Finalize. FINALIZE_WASM_OUTER=1 runs the built-in outer step in
// Wasm (plugins.Config.WasmOuter) instead of its native fast path.
func init() {
	afterPath = after
	configHook = func(c *wasm.Config) { c.WasmOuter = os.Getenv("FINALIZE_WASM_OUTER") == "1" }
}

// after is one Finalize on the stored files; the Write callback hashes the
// new weights (as their safetensors file) and momentum with BLAKE3, as the
// syncer's blob writer does while writing them.
func after(f *finalizeFixture, b *testing.B) (total, engine float64) {
	ctx := context.Background()
	in := syncer.FinalizeInput{Rule: f.rule, Outer: f.outer, Dtype: machine.F32, N: f.c.n, Quorum: f.c.k,
		LR: 0.7, Beta: 0.9, Nesterov: true}
	t0 := time.Now()
	for _, p := range f.inputs {
		in.Inputs = append(in.Inputs, stored(f, b, p))
	}
	in.Weights = stored(f, b, f.wPath)
	mom := syncer.FileValues(f.mPath, syncer.ByteRange{Off: 0, Len: int64(f.c.n) * 4})
	in.Momentum = &mom
	var wHash, mHash wire.Hash
	var hashing time.Duration
	hdr, _, err := safetensors.Header([]safetensors.Tensor{{Name: "w", Dtype: "F32", Shape: []int64{int64(f.c.n)}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	in.WeightsHeader = hdr // as the syncer asks: the sweep may hash the new state
	in.Write = func(w, m []byte, known *syncer.StateHashes) error {
		t := time.Now()
		if known != nil {
			wHash, mHash = known.Weights, known.Momentum
			hashing = time.Since(t)
			return nil
		}
		h := wire.NewContentHasher()
		h.Write(hdr)
		h.Write(w)
		wHash = h.Sum()
		mHash = wire.ContentHash(m)
		hashing = time.Since(t)
		return nil
	}
	out, err := f.e.Finalize(ctx, in)
	if err != nil {
		b.Fatal(err)
	}
	total = time.Since(t0).Seconds()
	if out.Status != wire.FragAggregated {
		b.Fatalf("finalize: %s %s", out.Status, out.Reason)
	}
	f.check(b, "after", out.AggregateHash, wHash, mHash, out.Fuel)
	return total, total - hashing.Seconds()
}

// stored opens a safetensors file in place, as the syncer opens a blob.
func stored(f *finalizeFixture, b *testing.B, p string) syncer.Values {
	fh, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		b.Fatal(err)
	}
	v, err := syncer.TensorValues(fh, st.Size(), p, f.tensor)
	if err != nil {
		b.Fatal(err)
	}
	v.R = nil // the engine reads the file by its path
	return v
}
