package plugins

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"lukechampine.com/blake3"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// fusedFixture writes k inputs, weights and momentum of n F32 values to
// files at 4-aligned offsets (as a node's blob store holds them: the
// engine maps them) and returns the finalize over them.
func fusedFixture(t *testing.T, r *rand.Rand, rule, outer syncer.RuleRef, k, n int) syncer.FinalizeInput {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, pre int, v []float32) syncer.Values {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, append(make([]byte, pre), syncer.EncodeF32(v)...), 0o444); err != nil {
			t.Fatal(err)
		}
		return syncer.FileValues(p, syncer.ByteRange{Off: int64(pre), Len: 4 * int64(n)})
	}
	in := syncer.FinalizeInput{Rule: rule, Outer: outer, Dtype: machine.F32, N: n, Quorum: k, LR: 0.7, Beta: 0.9}
	negZero := float32(math.Copysign(0, -1))
	for i := range k {
		v := adversarial(r, n)
		if n > 3 {
			v[0], v[1] = negZero, 0 // −0 alone, and −0 beside +0
		}
		in.Inputs = append(in.Inputs, write(fmt.Sprintf("in%d", i), 8+4*i, v))
	}
	in.Weights = write("w", 4, adversarial(r, n))
	m := write("m", 0, adversarial(r, n))
	in.Momentum = &m
	return in
}

// sameFinalize fails unless got is want byte for byte: status, reason,
// selection, hashes, fuel and the new state.
func sameFinalize(t *testing.T, what string, got, want syncer.FinalizeOutput) {
	t.Helper()
	if got.Status != want.Status || got.Reason != want.Reason || got.Kept != want.Kept || got.AggregateHash != want.AggregateHash ||
		got.Fuel != want.Fuel || !reflect.DeepEqual(got.Selected, want.Selected) || !reflect.DeepEqual(got.Rejected, want.Rejected) ||
		!bytes.Equal(got.Weights, want.Weights) || !bytes.Equal(got.Momentum, want.Momentum) {
		t.Fatalf("%s: differs from the module's: status %s/%s %q/%q; fuel %d/%d; aggregate %x/%x; weights %s; momentum %s", what,
			got.Status, want.Status, got.Reason, want.Reason, got.Fuel, want.Fuel, got.AggregateHash[:4], want.AggregateHash[:4],
			firstDiff(got.Weights, want.Weights, 4), firstDiff(got.Momentum, want.Momentum, 4))
	}
}

// TestFusedFinalizeMatchesWasm: a finalize swept in one pass (the native
// Mean or TrimmedMean with the native outer step, fused.go) gives the
// modules' result — aggregate hash, new weights and momentum, selection and
// fuel — for K = 1, 2, 3, 6, 16 (TrimmedMean 3, 6, 16), sizes that are not
// multiples of the sweep block or of a vector (and one spread over every
// core), Nesterov on and off, momentum absent and present, with the vector
// kernels and the Go ones; in process and in a worker; and it does sweep.
func TestFusedFinalizeMatchesWasm(t *testing.T) {
	ctx := context.Background()
	native := testEngine(t)
	wasm := newEngine(t, Config{Fuel: 20_000_000_000, WasmMean: true, WasmTrimmedMean: true, WasmOuter: true})
	outer, err := native.ResolveOuter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{1, 7, 17, 4095, 4097, 3*leafCoords + 13, 40*leafCoords + 5}
	rules := []struct {
		ref string
		ks  []int
	}{{"Mean", []int{1, 2, 3, 6, 16}}, {"TrimmedMean{alpha_bps=2000}", []int{3, 6, 16}}}
	if testing.Short() {
		sizes = sizes[:5]
	}
	mean, step := haveMeanAVX2, haveStepAVX2
	defer func() { haveMeanAVX2, haveStepAVX2 = mean, step }()
	r := rand.New(rand.NewPCG(31, 7))
	swept := fusedSweeps.Load()
	for _, rl := range rules {
		for _, k := range rl.ks {
			rule, err := native.ResolveRule(ctx, rl.ref, nil, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range sizes {
				in := fusedFixture(t, r, rule, outer, k, n)
				mom := in.Momentum
				for c := range 4 {
					in.Nesterov = c&1 == 1
					in.Momentum = mom
					if c&2 == 0 {
						in.Momentum = nil
					}
					want, err := wasm.Finalize(ctx, in)
					if err != nil || want.Status != wire.FragAggregated {
						t.Fatalf("%v %s %s", err, want.Status, want.Reason)
					}
					for run := range 2 { // the vector kernels, then the Go ones
						haveMeanAVX2, haveStepAVX2 = mean && run == 0, step && run == 0
						before := fusedSweeps.Load()
						got, err := native.Finalize(ctx, in)
						if err != nil {
							t.Fatal(err)
						}
						what := fmt.Sprintf("%s K=%d n=%d nesterov=%v momentum=%v vector=%v", rl.ref, k, n, in.Nesterov, in.Momentum != nil, run == 0)
						sameFinalize(t, what, got, want)
						if fusedSweeps.Load() == before {
							t.Fatalf("%s: not swept", what)
						}
					}
					haveMeanAVX2, haveStepAVX2 = mean, step
					if k == 6 && c == 3 {
						got, err := sharedWorkerEngine(t).Finalize(ctx, in)
						if err != nil {
							t.Fatal(err)
						}
						sameFinalize(t, fmt.Sprintf("worker: %s K=%d n=%d", rl.ref, k, n), got, want)
					}
				}
			}
		}
	}
	if fusedSweeps.Load() == swept {
		t.Fatal("no finalize was swept")
	}
}

// TestFusedFinalizeBudget: under budgets at and one below each call's fuel
// (the aggregate's and the step's), a fused engine gives exactly what the
// modules give — the same successes, the same out-of-fuel failures with
// the same aggregate hash and fuel — and it sweeps only when both fit.
func TestFusedFinalizeBudget(t *testing.T) {
	ctx := context.Background()
	const n, k = 5003, 4
	ref := testEngine(t)
	outer, _ := ref.ResolveOuter(ctx)
	cache := t.TempDir() // the engines below compile the built-ins once
	for _, rl := range []string{"Mean", "TrimmedMean{alpha_bps=2000}"} {
		rule, err := ref.ResolveRule(ctx, rl, nil, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		in := fusedFixture(t, rand.New(rand.NewPCG(41, 3)), rule, outer, k, n)
		in.Nesterov = true
		full, err := ref.Finalize(ctx, in)
		if err != nil || full.Status != wire.FragAggregated {
			t.Fatalf("%v %s", err, full.Status)
		}
		// each call's fuel, from the separate calls
		var inputs [][]byte
		for _, v := range in.Inputs {
			b, err := v.Bytes(4 * n)
			if err != nil {
				t.Fatal(err)
			}
			inputs = append(inputs, b)
		}
		agg, err := ref.Aggregate(ctx, syncer.AggregateInput{Rule: rule, Dtype: machine.F32, N: n, Inputs: inputs})
		if err != nil {
			t.Fatal(err)
		}
		aggFuel := agg.Fuel
		stepFuel := full.Fuel - aggFuel
		budgets := []uint64{aggFuel - 1, stepFuel - 1, max(aggFuel, stepFuel)} // each short, both fit exactly
		if aggFuel < stepFuel {
			budgets = append(budgets, aggFuel) // the aggregate fits, the step does not
		} else if stepFuel < aggFuel {
			budgets = append(budgets, stepFuel)
		}
		for _, budget := range budgets {
			fused := newEngine(t, Config{Fuel: budget, CacheDir: cache})
			wasm := newEngine(t, Config{Fuel: budget, CacheDir: cache, WasmMean: true, WasmTrimmedMean: true, WasmOuter: true})
			want, werr := wasm.Finalize(ctx, in)
			before := fusedSweeps.Load()
			got, gerr := fused.Finalize(ctx, in)
			what := fmt.Sprintf("%s budget %d (aggregate %d, step %d)", rl, budget, aggFuel, stepFuel)
			if werr != nil || gerr != nil {
				t.Fatalf("%s: %v / %v", what, gerr, werr)
			}
			sameFinalize(t, what, got, want)
			fits := budget >= aggFuel && budget >= stepFuel
			if swept := fusedSweeps.Load() > before; swept != fits {
				t.Fatalf("%s: swept %v, both calls fit %v", what, swept, fits)
			}
			if !fits && got.Status != wire.FragRuleFailed {
				t.Fatalf("%s: status %s, want a rule failure", what, got.Status)
			}
		}
	}
}

// TestSweepKernels: the vector Mean and outer-step kernels give the Go
// kernels' bits (which the tests above and TestNativeOuterMatchesWasm hold
// to the modules) on adversarial values, every flag and every remainder.
func TestSweepKernels(t *testing.T) {
	if !haveMeanAVX2 || !haveStepAVX2 {
		t.Skip("no vector kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(51, 9))
	for _, k := range []int{1, 2, 3, 5, 6, 16, 33} {
		for _, n := range []int{1, 15, 16, 17, 31, 64, 100, 4097} {
			in := make([][]float32, k)
			for i := range in {
				in[i] = adversarial(r, n+3)[3:] // at every offset
			}
			want, got := make([]float32, n), make([]float32, n)
			meanBlockGo(in, 0, n, want)
			meanBlock(in, 0, n, got)
			if b := syncer.EncodeF32(got); !bytes.Equal(b, syncer.EncodeF32(want)) {
				t.Fatalf("mean K=%d n=%d: %s", k, n, firstDiff(b, syncer.EncodeF32(want), 4))
			}
		}
	}
	params := [][2]float32{{0.7, 0.9}, {1, 0}, {0, 0.5}, {-0.3, 0.99}, {1e-3, 1}, {float32(math.Inf(1)), 0.9}, {0.7, float32(math.NaN())}}
	for _, n := range []int{1, 7, 8, 9, 63, 1000, 4099} {
		for _, lp := range params {
			for flags := range 4 {
				has, nest := flags&1 == 1, flags&2 == 2
				w, m, g := syncer.EncodeF32(adversarial(r, n)), syncer.EncodeF32(adversarial(r, n)), syncer.EncodeF32(adversarial(r, n))
				var outs [2][2][]byte
				for run := range 2 {
					haveStepAVX2 = run == 0
					wo, mo := make([]byte, 4*n), make([]byte, 4*n)
					nesterovRange(machine.F32, w, wo, m, mo, g, 0, n, has, lp[0], lp[1], nest)
					outs[run] = [2][]byte{wo, mo}
				}
				haveStepAVX2 = true
				if !bytes.Equal(outs[0][0], outs[1][0]) || !bytes.Equal(outs[0][1], outs[1][1]) {
					t.Fatalf("step n=%d lr=%v beta=%v momentum=%v nesterov=%v: weights %s, momentum %s", n, lp[0], lp[1], has, nest,
						firstDiff(outs[0][0], outs[1][0], 4), firstDiff(outs[0][1], outs[1][1], 4))
				}
			}
		}
	}
}

// TestTreeHash: the aggregate's hash assembled from 16 KiB subtrees, given
// in any order, is BLAKE3 of the bytes, at every size class around the
// block and chunk boundaries.
func TestTreeHash(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 1))
	sizes := []int{1, 4, 64, 1023, 1024, 1025, 2048, 2052, leafBytes - 4, leafBytes, leafBytes + 4, leafBytes + 1024, 2 * leafBytes,
		2*leafBytes + 1028, 3 * leafBytes, 5*leafBytes + 2000, 8 * leafBytes, 8*leafBytes + 4, 13*leafBytes + 16380}
	for range 10 {
		sizes = append(sizes, 4*(1+r.IntN(300_000)))
	}
	for _, n := range sizes {
		checkTreeHash(t, r, make([]byte, n))
	}
}

func checkTreeHash(t *testing.T, r *rand.Rand, b []byte) {
	t.Helper()
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	th := newTreeHash(int64(len(b)))
	blocks := (len(b) + leafBytes - 1) / leafBytes
	for _, i := range r.Perm(blocks) {
		th.leaf(i, b[i*leafBytes:min((i+1)*leafBytes, len(b))], leafPrefetch{})
	}
	if got, want := th.sum(), wire.Hash(blake3.Sum256(b)); got != want {
		t.Fatalf("%d bytes: tree hash %x, BLAKE3 %x", len(b), got[:8], want[:8])
	}
}

// FuzzTreeHash: any length and content hash as BLAKE3 does.
func FuzzTreeHash(f *testing.F) {
	f.Add(uint32(leafBytes+4), uint64(1))
	f.Add(uint32(3*leafBytes), uint64(2))
	f.Fuzz(func(t *testing.T, n uint32, seed uint64) {
		n = n%(40*leafBytes) + 1
		checkTreeHash(t, rand.New(rand.NewPCG(seed, 0)), make([]byte, n))
	})
}

// TestBlobHash: a blob of a head followed by data, its data written block
// by block in any order and on two goroutines, hashes as BLAKE3 of the
// whole — at head lengths across the 1 KiB chunk and the 16 KiB leaf, and
// data lengths across both (the new weights' file: its header, then the
// values; the momentum: no head).
func TestBlobHash(t *testing.T) {
	r := rand.New(rand.NewPCG(67, 2))
	heads := []int{0, 8, 64, 1016, 1024, 1032, 2048 + 8, leafBytes - 8, leafBytes, leafBytes + 8, 3*leafBytes + 1000}
	datas := []int{0, 4, 1020, 1024, 1028, leafBytes - 4, leafBytes, leafBytes + 4, 2*leafBytes + 1024, 5*leafBytes + 12, 17 * leafBytes}
	for range 4 {
		datas = append(datas, 4*(1+r.IntN(200_000)))
	}
	for _, h := range heads {
		for _, d := range datas {
			checkBlobHash(t, r, h, d, true)
		}
	}
}

func checkBlobHash(t *testing.T, r *rand.Rand, head, data int, concurrent bool) {
	t.Helper()
	b := make([]byte, head+data)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	bh := newBlobHash(b[:head], b[head:])
	blocks := (data + leafBytes - 1) / leafBytes
	order := r.Perm(blocks)
	var wg sync.WaitGroup
	for half := range 2 {
		part := order[half*len(order)/2 : (half+1)*len(order)/2]
		run := func() {
			for _, i := range part {
				bh.written(int64(i)*leafBytes, min(int64(i+1)*leafBytes, int64(data)), leafPrefetch{})
			}
		}
		if concurrent {
			wg.Add(1)
			go func() { defer wg.Done(); run() }()
		} else {
			run()
		}
	}
	wg.Wait()
	if got, want := bh.sum(), wire.Hash(blake3.Sum256(b)); got != want {
		t.Fatalf("head %d + data %d bytes: %x, BLAKE3 %x", head, data, got[:8], want[:8])
	}
}

// FuzzBlobHash: any head and data length (data in whole f32s), any order
// of the blocks, merge to BLAKE3 of the blob.
func FuzzBlobHash(f *testing.F) {
	f.Add(uint32(88), uint32(leafBytes+4), uint64(1))
	f.Add(uint32(1024), uint32(3*leafBytes), uint64(2))
	f.Add(uint32(0), uint32(0), uint64(3))
	f.Fuzz(func(t *testing.T, head, data uint32, seed uint64) {
		head %= 4 * leafBytes
		data = 4 * (data % (12 * leafBytes))
		checkBlobHash(t, rand.New(rand.NewPCG(seed, 0)), int(head), int(data), false)
	})
}

// TestFusedStateHashes: a swept finalize asked to (WeightsHeader set) gives
// Write the hashes of the new weights' blob (the header, then the values)
// and of the new momentum, and they are BLAKE3 of those bytes exactly — in
// process and in a worker, Nesterov on and off, momentum absent and
// present, sizes across block edges, headers across 1 KiB. Without a
// header no hashes are given, and a finalize that does not sweep gives
// none either.
func TestFusedStateHashes(t *testing.T) {
	ctx := context.Background()
	native := testEngine(t)
	outer, err := native.ResolveOuter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rule, err := native.ResolveRule(ctx, "Mean", nil, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(71, 5))
	sizes := []int{1, 17, 4095, 4097, 3*leafCoords + 13, 9*leafCoords + 250}
	// Layouts (tensors × name length) whose headers fall below, on and
	// past 1 KiB and a few KiB.
	heads := []struct{ tensors, nameLen int }{{1, 1}, {1, 400}, {2, 400}, {2, 430}, {2, 445}, {3, 300}, {3, 330}, {12, 450}}
	if testing.Short() {
		sizes = sizes[:4]
	}
	engines := []struct {
		name string
		e    *Engine
	}{{"in process", native}, {"worker", sharedWorkerEngine(t)}}
	lens := map[int]int{} // headers by KiB
	for _, n := range sizes {
		in := fusedFixture(t, r, rule, outer, 3, n)
		mom := in.Momentum
		for c := range 4 {
			in.Nesterov = c&1 == 1
			in.Momentum = mom
			if c&2 == 0 {
				in.Momentum = nil
			}
			for hi, lay := range heads {
				header := fragmentHeader(t, n, lay.tensors, lay.nameLen)
				lens[len(header)/1024]++
				e := engines[hi%2]
				what := fmt.Sprintf("%s n=%d nesterov=%v momentum=%v header %d bytes", e.name, n, in.Nesterov, in.Momentum != nil, len(header))
				for _, ask := range []bool{true, false} {
					in.WeightsHeader = nil
					if ask {
						in.WeightsHeader = header
					}
					called := false
					in.Write = func(w, m []byte, known *syncer.StateHashes) error {
						called = true
						if !ask {
							if known != nil {
								t.Fatalf("%s: hashes given unasked", what)
							}
							return nil
						}
						if known == nil {
							t.Fatalf("%s: no hashes", what)
						}
						if want := wire.ContentHash(append(append([]byte(nil), header...), w...)); known.Weights != want {
							t.Fatalf("%s: weights hash %s, BLAKE3 of the blob %s", what, known.Weights, want)
						}
						if want := wire.ContentHash(m); known.Momentum != want {
							t.Fatalf("%s: momentum hash %s, BLAKE3 %s", what, known.Momentum, want)
						}
						return nil
					}
					before := fusedSweeps.Load()
					out, err := e.e.Finalize(ctx, in)
					if err != nil || out.Status != wire.FragAggregated || !called {
						t.Fatalf("%s: %v %s %s, write called %v", what, err, out.Status, out.Reason, called)
					}
					if e.e == native && fusedSweeps.Load() == before {
						t.Fatalf("%s: not swept", what)
					}
				}
			}
		}
	}
	if lens[0] == 0 || lens[1] == 0 || lens[5]+lens[6] == 0 {
		t.Fatalf("headers by KiB: %v, want some below 1 KiB, past 1 KiB and past 4 KiB", lens)
	}
	// A header past maxSweptHeader is not sent to a worker: no hashes
	// (the caller hashes), the finalize otherwise the same.
	{
		in := fusedFixture(t, r, rule, outer, 3, 5000)
		in.WeightsHeader = fragmentHeader(t, 5000, 200, 400)
		if len(in.WeightsHeader) <= maxSweptHeader {
			t.Fatalf("header of %d bytes, want more than %d", len(in.WeightsHeader), maxSweptHeader)
		}
		for _, e := range engines {
			var got *syncer.StateHashes
			called := false
			in.Write = func(w, m []byte, known *syncer.StateHashes) error {
				called, got = true, known
				if known != nil && (known.Weights != wire.ContentHash(append(append([]byte(nil), in.WeightsHeader...), w...)) || known.Momentum != wire.ContentHash(m)) {
					t.Fatalf("%s, large header: wrong hashes", e.name)
				}
				return nil
			}
			if out, err := e.e.Finalize(ctx, in); err != nil || out.Status != wire.FragAggregated || !called {
				t.Fatalf("%s, large header: %v %s", e.name, err, out.Status)
			}
			if (got != nil) != (e.e == native) {
				t.Fatalf("%s, header of %d bytes: hashes given %v", e.name, len(in.WeightsHeader), got != nil)
			}
		}
	}
	// Not swept (the outer step in Wasm): no hashes, the caller hashes.
	wasmOuter := newEngine(t, Config{WasmOuter: true})
	in := fusedFixture(t, r, rule, outer, 3, 5000)
	in.WeightsHeader = []byte("12345678")
	in.Write = func(w, m []byte, known *syncer.StateHashes) error {
		if known != nil {
			t.Fatal("hashes from a finalize that did not sweep")
		}
		return nil
	}
	if out, err := wasmOuter.Finalize(ctx, in); err != nil || out.Status != wire.FragAggregated {
		t.Fatalf("%v %s", err, out.Status)
	}
}

// fragmentHeader is the header of a fragment of n F32 values in up to
// tensors tensors (names of nameLen bytes, in the file's order).
func fragmentHeader(t *testing.T, n, tensors, nameLen int) []byte {
	t.Helper()
	tensors = min(tensors, n)
	var ts []wire.TensorInfo
	for i := range tensors {
		lo, hi := i*n/tensors, (i+1)*n/tensors
		name := fmt.Sprintf("%03d", i) + strings.Repeat("w", max(nameLen-3, 0))
		ts = append(ts, wire.TensorInfo{Name: name, Dtype: "F32", Shape: []int64{int64(hi - lo)}})
	}
	header, ok, err := syncer.FragmentHeader(ts, 4*int64(n))
	if err != nil || !ok {
		t.Fatalf("header: %v %v", ok, err)
	}
	return header
}
