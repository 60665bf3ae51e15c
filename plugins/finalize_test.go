package plugins

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// finalizeMode is one way of running Engine.Finalize.
type finalizeMode struct {
	name      string
	workers   bool
	chunk     int   // chunkOverride (0: whole)
	stageFrom int64 // staging threshold (0: default)
	noStaging bool  // Config.NoStaging
}

var finalizeModes = []finalizeMode{
	{name: "local"},
	{name: "local/staged", stageFrom: 4096},
	{name: "local/chunked", chunk: 1024},
	{name: "local/chunked/staged", chunk: 1024, stageFrom: 4096},
	{name: "worker", workers: true},
	{name: "worker/staged", workers: true, stageFrom: 4096},
	{name: "worker/chunked/staged", workers: true, chunk: 1024, stageFrom: 4096},
	{name: "local/unstaged", noStaging: true},
	{name: "worker/unstaged", workers: true, noStaging: true},
}

// finalizeEngines caches the engines of each mode and fuel budget.
type finalizeEngines struct {
	t  testing.TB
	es map[string]*Engine
}

func (fe *finalizeEngines) get(m finalizeMode, fuel string) *Engine {
	key := m.name + "/" + fuel
	if e := fe.es[key]; e != nil {
		return e
	}
	cfg := Config{Fuel: goldenFuel(fuel), chunkOverride: m.chunk, stageFrom: m.stageFrom, NoStaging: m.noStaging}
	if m.workers {
		exe, err := os.Executable()
		if err != nil {
			fe.t.Fatal(err)
		}
		cfg.Workers, cfg.WorkerCommand = 1, []string{exe}
	}
	e, err := NewEngine(context.Background(), cfg)
	if err != nil {
		fe.t.Fatal(err)
	}
	fe.t.Cleanup(func() { _ = e.Close(context.Background()) })
	fe.es[key] = e
	return e
}

// finalizeInput stores a case's values the ways the syncer may hold them:
// safetensors blob files read by path only, by path and reader, with the
// fragment's two tensors in another order than the file's, and bytes in
// memory.
func finalizeInput(t testing.TB, e *Engine, c goldenCase, d goldenData, dir string) syncer.FinalizeInput {
	t.Helper()
	ctx := context.Background()
	es := c.Dtype.Size()
	cut := c.N - 1000
	layout := []wire.TensorInfo{{Name: "b", Dtype: string(c.Dtype), Shape: []int64{int64(cut)}}, {Name: "a", Dtype: string(c.Dtype), Shape: []int64{1000}}}
	store := func(name string, v []byte, form int) syncer.Values {
		p := filepath.Join(dir, name)
		var raw []byte
		var err error
		switch form {
		case 1:
			return syncer.BytesValues(v)
		case 3: // raw file, whole
			raw = v
		case 0:
			raw, err = safetensors.Encode([]safetensors.Tensor{{Name: "w", Dtype: string(c.Dtype), Shape: []int64{int64(c.N)}, Data: v}}, nil)
		case 2:
			raw, err = safetensors.Encode([]safetensors.Tensor{
				{Name: "b", Dtype: string(c.Dtype), Shape: []int64{int64(cut)}, Data: v[:cut*es]},
				{Name: "a", Dtype: string(c.Dtype), Shape: []int64{1000}, Data: v[cut*es:]}}, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		switch form {
		case 3:
			return syncer.FileValues(p, syncer.ByteRange{Off: 0, Len: int64(len(raw))})
		case 0:
			vals, err := syncer.TensorValues(f, int64(len(raw)), p, []wire.TensorInfo{{Name: "w", Dtype: string(c.Dtype), Shape: []int64{int64(c.N)}}})
			if err != nil {
				t.Fatal(err)
			}
			vals.R = nil // the path only
			return vals
		}
		vals, err := syncer.TensorValues(f, int64(len(raw)), p, layout)
		if err != nil {
			t.Fatal(err)
		}
		return vals
	}
	in := syncer.FinalizeInput{Dtype: c.Dtype, N: c.N, Quorum: c.Quorum, LR: 0.7, Beta: 0.9, Nesterov: true}
	var err error
	if in.Rule, err = e.ResolveRule(ctx, c.Rule, nil, c.Quorum, c.K); err != nil {
		t.Fatal(err)
	}
	if in.Outer, err = e.ResolveOuter(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Verifier != "" {
		v, err := e.ResolveVerifier(ctx, c.Verifier+"{max_ratio=3}")
		if err != nil {
			t.Fatal(err)
		}
		fin, _ := e.ResolveVerifier(ctx, "Finite") // per submission: not run here
		in.Verifiers = []syncer.RuleRef{fin, v}
	}
	for i, b := range d.inputs {
		in.Inputs = append(in.Inputs, store(fmt.Sprintf("in%d", i), b, i%3))
	}
	in.Weights = store("weights", d.weights, 0)
	if d.momentum != nil {
		m := store("momentum", d.momentum, 3)
		if c.K%2 == 0 {
			m = syncer.BytesValues(d.momentum)
		}
		in.Momentum = &m
	}
	return in
}

func asGolden(out syncer.FinalizeOutput) goldenResult {
	return goldenResult{Status: out.Status, Reason: out.Reason, Rejected: out.Rejected, Selected: out.Selected, Kept: out.Kept,
		Weights: digest(out.Weights), Momentum: digest(out.Momentum), Fuel: out.Fuel}
}

// TestFinalizeMatchesGolden: Engine.Finalize gives what the separate calls
// gave before it existed (the golden) and what they give now
// (syncer.FinalizeInMemory on the same engine, the aggregate's hash
// included), in process and in workers, whole and chunked, with blocks
// mapped from stages or copied, for every built-in aggregation rule, F32
// and BF16, with and without momentum, round-level verification, no
// quorum and out-of-fuel failures.
func TestFinalizeMatchesGolden(t *testing.T) {
	golden := loadGolden(t)
	fe := &finalizeEngines{t: t, es: map[string]*Engine{}}
	ctx := context.Background()
	for _, m := range finalizeModes {
		t.Run(m.name, func(t *testing.T) {
			mapped := mappedBlocks.Load()
			defer func() {
				if n := mappedBlocks.Load() - mapped; m.stageFrom > 0 && !m.workers && n == 0 {
					t.Errorf("no block was mapped from a stage")
				} else if m.noStaging && !m.workers && n != 0 {
					t.Errorf("%d blocks mapped from a stage with NoStaging", n)
				} else {
					t.Logf("%d blocks mapped", n)
				}
			}()
			for _, c := range goldenCases() {
				if testing.Short() && c.N > goldenN {
					continue
				}
				e := fe.get(m, c.Fuel)
				d := c.data()
				in := finalizeInput(t, e, c, d, t.TempDir())
				got, err := e.Finalize(ctx, in)
				if err != nil {
					t.Fatalf("%s: %v", c.Name, err)
				}
				ref, err := syncer.FinalizeInMemory(ctx, e, in)
				if err != nil {
					t.Fatalf("%s: steps: %v", c.Name, err)
				}
				if !reflect.DeepEqual(got, ref) {
					t.Errorf("%s: Finalize differs from the separate steps:\n got %+v\nwant %+v", c.Name, asGolden(got), asGolden(ref))
				}
				want := golden[goldenKey(c, m.chunk)]
				want.Aggregate = ""
				if g := asGolden(got); !sameResult(g, want) {
					t.Errorf("%s: got %+v, golden %+v", c.Name, g, want)
				}
				if got.Status == wire.FragAggregated || got.Status == wire.FragRuleFailed && got.Selected != nil && golden[goldenKey(c, m.chunk)].Aggregate != "" {
					if got.AggregateHash.IsZero() {
						t.Errorf("%s: no aggregate hash", c.Name)
					}
				}
			}
		})
	}
}

// TestFinalizeWrite: with a Write callback the new state is handed over in
// place (the same bytes), its error is returned, and nothing is copied into
// the output.
func TestFinalizeWrite(t *testing.T) {
	ctx := context.Background()
	fe := &finalizeEngines{t: t, es: map[string]*Engine{}}
	c := goldenCases()[1] // Mean, F32, momentum
	for _, m := range []finalizeMode{finalizeModes[1], finalizeModes[5]} {
		e := fe.get(m, "")
		in := finalizeInput(t, e, c, c.data(), t.TempDir())
		ref, err := e.Finalize(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		var w, mo []byte
		in.Write = func(wb, mb []byte, _ *syncer.StateHashes) error {
			w, mo = bytes.Clone(wb), bytes.Clone(mb)
			return nil
		}
		got, err := e.Finalize(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if got.Weights != nil || got.Momentum != nil || !bytes.Equal(w, ref.Weights) || !bytes.Equal(mo, ref.Momentum) || got.AggregateHash != ref.AggregateHash {
			t.Fatalf("%s: Write got other bytes", m.name)
		}
		boom := fmt.Errorf("disk full")
		in.Write = func([]byte, []byte, *syncer.StateHashes) error { return boom }
		if _, err := e.Finalize(ctx, in); err == nil || err.Error() != boom.Error() && !bytes.Contains([]byte(err.Error()), []byte(boom.Error())) {
			t.Fatalf("%s: Write's error: %v", m.name, err)
		}
	}
}

// TestFinalizeErrors: values of the wrong size and unreadable files are
// errors (nothing recorded), in process and in workers.
func TestFinalizeErrors(t *testing.T) {
	ctx := context.Background()
	fe := &finalizeEngines{t: t, es: map[string]*Engine{}}
	c := goldenCases()[1]
	for _, m := range []finalizeMode{finalizeModes[0], finalizeModes[5]} {
		e := fe.get(m, "")
		dir := t.TempDir()
		in := finalizeInput(t, e, c, c.data(), dir)
		short := in
		short.Inputs = append([]syncer.Values(nil), in.Inputs...)
		short.Inputs[1] = syncer.BytesValues(make([]byte, 12))
		if _, err := e.Finalize(ctx, short); err == nil {
			t.Fatalf("%s: a short input was accepted", m.name)
		}
		gone := in
		gone.Inputs = append([]syncer.Values(nil), in.Inputs...)
		gone.Inputs[0] = syncer.FileValues(filepath.Join(dir, "missing"), in.Inputs[0].Ranges...)
		if _, err := e.Finalize(ctx, gone); err == nil {
			t.Fatalf("%s: a missing file was accepted", m.name)
		}
		if _, err := e.Finalize(ctx, in); err != nil {
			t.Fatalf("%s: after the errors: %v", m.name, err)
		}
	}
}

// TestFinalizeWorkerHostile: in a worker, a finalize whose aggregator
// loops is killed at the backstop (a local failure, nothing recorded) and
// the next one runs on a fresh worker; one whose aggregator grows its memory
// to the limit is the recorded trap, as in separate calls.
func TestFinalizeWorkerHostile(t *testing.T) {
	ctx := context.Background()
	// The loop needs the backstop to end it; the memory.grow loop must
	// reach its trap whatever the machine's load, so its engine's backstop
	// is far off.
	killer := workerEngine(t, Config{Fuel: maxFuel, WallClock: 2 * time.Second})
	e := workerEngine(t, Config{Fuel: maxFuel, WallClock: 10 * time.Minute})
	in := func(e *Engine, rule syncer.RuleRef) syncer.FinalizeInput {
		outer, _ := e.ResolveOuter(ctx)
		return syncer.FinalizeInput{Rule: rule, Outer: outer, Dtype: machine.F32, N: 4, Quorum: 2, LR: 1, Beta: 0.9,
			Inputs:  []syncer.Values{syncer.BytesValues(f32s(1, 2, 3, 4)), syncer.BytesValues(f32s(3, 4, 5, 6))},
			Weights: syncer.BytesValues(f32s(0, 0, 0, 0))}
	}
	hostile := func(e *Engine, body []byte) syncer.RuleRef {
		info, err := e.Publish(ctx, buildModule(t, modSpec{aggBody: body}))
		if err != nil {
			t.Fatal(err)
		}
		ref, _, _, err := e.resolve(ctx, "sha256:"+info.Hash.String(), nil, KindAggregate)
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	_, err := killer.Finalize(ctx, in(killer, hostile(killer, loopBody)))
	var rf *syncer.RuleFailure
	if !IsWorkerError(err) || errors.As(err, &rf) || !strings.Contains(err.Error(), "wall-clock") {
		t.Fatalf("want a wall-clock worker error, got %v", err)
	}
	mean := in(killer, mustResolve(t, killer, "Mean", 2))
	out, err := killer.Finalize(ctx, mean)
	if err != nil || out.Status != wire.FragAggregated || !bytes.Equal(out.Weights, f32s(-2, -3, -4, -5)) {
		t.Fatalf("Mean after the kill: %+v %v", out, err)
	}
	grow := in(e, hostile(e, growTouch))
	got, err := e.Finalize(ctx, grow)
	if err != nil {
		t.Fatal(err)
	}
	want, err := syncer.FinalizeInMemory(ctx, e, grow)
	if err != nil || got.Status != wire.FragRuleFailed || !reflect.DeepEqual(got, want) {
		t.Fatalf("memory.grow loop: %+v (%v), separate steps %+v", got, err, want)
	}
}

// TestFinalizeAggregateOnly: the aggregation-only finalize (`tenzro plugin
// run`) gives Engine.Aggregate's bytes, selection and fuel, in process and
// in workers, without weights, and hands the aggregate to Write.
func TestFinalizeAggregateOnly(t *testing.T) {
	ctx := context.Background()
	fe := &finalizeEngines{t: t, es: map[string]*Engine{}}
	for _, ci := range []int{0, 12, 6} { // Mean F32, Krum{f=1} F32, TrimmedMean BF16 (goldenCases order)
		c := goldenCases()[ci]
		for _, m := range []finalizeMode{finalizeModes[1], finalizeModes[5], finalizeModes[6]} {
			e := fe.get(m, "")
			d := c.data()
			in := finalizeInput(t, e, c, d, t.TempDir())
			in.AggregateOnly, in.Weights, in.Momentum, in.Verifiers, in.Quorum = true, syncer.Values{}, nil, nil, 0
			got, err := e.Finalize(ctx, in)
			if err != nil {
				t.Fatalf("%s %s: %v", c.Name, m.name, err)
			}
			agg, err := e.Aggregate(ctx, syncer.AggregateInput{Rule: in.Rule, Dtype: c.Dtype, N: c.N, Inputs: d.inputs})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != wire.FragAggregated || !bytes.Equal(got.Weights, agg.Aggregate) || got.Momentum != nil ||
				got.Fuel != agg.Fuel || got.AggregateHash != wire.ContentHash(agg.Aggregate) || !reflect.DeepEqual(got.Selected, agg.Selected) {
				t.Errorf("%s %s: got %s fuel %d, Aggregate fuel %d (same bytes %v)", c.Name, m.name, got.Status, got.Fuel, agg.Fuel, bytes.Equal(got.Weights, agg.Aggregate))
			}
			var handed []byte
			in.Write = func(w, mo []byte, _ *syncer.StateHashes) error {
				if mo != nil {
					return errors.New("momentum handed over")
				}
				handed = bytes.Clone(w)
				return nil
			}
			if _, err := e.Finalize(ctx, in); err != nil || !bytes.Equal(handed, agg.Aggregate) {
				t.Errorf("%s %s: Write got other bytes (%v)", c.Name, m.name, err)
			}
		}
	}
}
