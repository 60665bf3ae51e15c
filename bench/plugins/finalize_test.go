package plugins

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	wasm "github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// BenchmarkFinalize times one fragment's finalize — aggregation and the
// outer step, as the syncer runs them — against a memory pass (an f32 sum in
// Go over the same K·N input values), measured in the same iteration, and
// reports the ratios (median and range over the iterations). Inputs,
// weights and momentum are stored files (the blob store's form: safetensors
// payloads and weights, raw f32 momentum), warm in the page cache.
//
//	before: syncer.computeFragment's path before Engine.Finalize: each
//	        stored payload read into memory, Aggregate, the aggregate's
//	        content hash, weights and momentum read, OuterStep, the new
//	        weights encoded and hashed, the momentum hashed. "engine" is the
//	        Aggregate and OuterStep calls alone.
//	after:  one Engine.Finalize on the files in place (finalize_after_test.go);
//	        "engine" is the call without its Write callback, "+hash" adds
//	        one BLAKE3 of the new weights (safetensors header + data) and one
//	        of the momentum, done in the Write callback where the syncer
//	        writes its blobs.
//
// Neither path includes the synced write of the new state (the syncer's
// blob store). The engine runs its calls in worker processes, as the node
// does (FINALIZE_WORKERS=0: in process, for CPU profiles of the plugin
// host). FINALIZE_GRID=seed (default: Mean and TrimmedMean at K=6, N=2^24)
// or full (Mean, TrimmedMean, CoordinateMedian, Krum × K=4,8,16 ×
// N=2^20, 2^22, 2^24); FINALIZE_RULES, FINALIZE_K, FINALIZE_N narrow it
// (comma-separated); FINALIZE_PATH=before|after|both (default both). This
// file alone compiles on a checkout from before Engine.Finalize, which is
// how the before figures of bench/results/finalize.md were measured.
//
//	nice -n 10 go test ./bench/plugins -run '^$' -bench Finalize -benchtime 5x -timeout 2h
func BenchmarkFinalize(b *testing.B) {
	ctx := context.Background()
	cfg := wasm.Config{Fuel: 1 << 40, Workers: 2}
	if configHook != nil {
		configHook(&cfg)
	}
	if os.Getenv("FINALIZE_WORKERS") == "0" {
		cfg.Workers = 0
	} else {
		exe, err := os.Executable()
		if err != nil {
			b.Fatal(err)
		}
		cfg.WorkerCommand = []string{exe}
	}
	e, err := wasm.NewEngine(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	path := os.Getenv("FINALIZE_PATH")
	if afterPath == nil {
		path = "before" // a checkout without Engine.Finalize
	}
	for _, c := range finalizeGrid() {
		b.Run(fmt.Sprintf("%s/K=%d/N=%d", c.rule, c.k, c.n), func(b *testing.B) {
			f := newFinalizeFixture(b, e, c)
			defer f.close()
			var mem, before, beforeEng, after, afterEng []float64
			// warm-up: start the workers, compile, fault in arenas
			if path != "after" {
				f.before(b)
			}
			if path != "before" {
				afterPath(f, b)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				mem = append(mem, f.memoryPass())
				if path != "after" {
					tot, eng := f.before(b)
					before, beforeEng = append(before, tot), append(beforeEng, eng)
				}
				if path != "before" {
					tot, eng := afterPath(f, b)
					after, afterEng = append(after, tot), append(afterEng, eng)
				}
			}
			b.StopTimer()
			m := med(mem)
			b.ReportMetric(m*1e3, "mempass_ms")
			row := fmt.Sprintf("| %s | %d | %d | %.0f (%.0f–%.0f)", c.rule, c.k, c.n, m*1e3, slices.Min(mem)*1e3, slices.Max(mem)*1e3)
			if len(before) > 0 {
				b.ReportMetric(med(before)*1e3, "before_ms")
				b.ReportMetric(med(before)/m, "before/mempass")
				row += fmt.Sprintf(" | %.0f | %s | %s", med(before)*1e3, ratioText(before, mem), ratioText(beforeEng, mem))
			} else {
				row += " | – | – | –"
			}
			if len(after) > 0 {
				b.ReportMetric(med(after)*1e3, "after_ms")
				b.ReportMetric(med(afterEng)/m, "engine/mempass")
				b.ReportMetric(med(after)/m, "engine+hash/mempass")
				row += fmt.Sprintf(" | %.0f | %s | %s |", med(after)*1e3, ratioText(afterEng, mem), ratioText(after, mem))
			} else {
				row += " | – | – | – |"
			}
			b.Log(row)
		})
	}
}

// ratioText is the median of the per-iteration ratios x[i]/base[i] and
// their range.
func ratioText(x, base []float64) string {
	r := make([]float64, len(x))
	for i := range x {
		r[i] = x[i] / base[i]
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", med(r), slices.Min(r), slices.Max(r))
}

func med(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// afterPath and configHook are set by finalize_after_test.go, which needs
// Engine.Finalize: without it this file runs the before path alone (on a
// checkout from before Finalize, for the before figures).
var (
	afterPath  func(f *finalizeFixture, b *testing.B) (total, engine float64)
	configHook func(*wasm.Config)
)

type finalizeCase struct {
	rule string
	k, n int
}

func finalizeGrid() []finalizeCase {
	rules := []string{"Mean", "TrimmedMean{alpha_bps=2000}"}
	ks, ns := []int{6}, []int{1 << 24}
	if os.Getenv("FINALIZE_GRID") == "full" {
		rules = []string{"Mean", "TrimmedMean{alpha_bps=2000}", "CoordinateMedian", "Krum{f=0}"}
		ks, ns = []int{4, 8, 16}, []int{1 << 20, 1 << 22, 1 << 24}
	}
	if s := os.Getenv("FINALIZE_RULES"); s != "" {
		rules = strings.Split(s, ",")
	}
	ints := func(s string, def []int) []int {
		if s == "" {
			return def
		}
		var out []int
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.Atoi(f)
			if err != nil {
				panic(err)
			}
			out = append(out, v)
		}
		return out
	}
	ks, ns = ints(os.Getenv("FINALIZE_K"), ks), ints(os.Getenv("FINALIZE_N"), ns)
	var out []finalizeCase
	for _, r := range rules {
		for _, n := range ns {
			for _, k := range ks {
				out = append(out, finalizeCase{r, k, n})
			}
		}
	}
	return out
}

type finalizeFixture struct {
	e      *wasm.Engine
	c      finalizeCase
	dir    string
	vals   [][]float32 // the inputs, in memory, for the memory pass
	inputs []string    // payload files
	wPath  string      // weights (safetensors)
	mPath  string      // momentum (raw f32)
	rule   syncer.RuleRef
	outer  syncer.RuleRef
	tensor []wire.TensorInfo
	// results of the first path run, checked against every later run
	aggHash, wHash, mHash wire.Hash
	fuel                  uint64
	checked               bool
}

var sumSink float32

func newFinalizeFixture(b *testing.B, e *wasm.Engine, c finalizeCase) *finalizeFixture {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "finalize-bench-")
	if err != nil {
		b.Fatal(err)
	}
	f := &finalizeFixture{e: e, c: c, dir: dir, tensor: []wire.TensorInfo{{Name: "w", Dtype: "F32", Shape: []int64{int64(c.n)}}}}
	r := rand.New(rand.NewPCG(uint64(c.k), uint64(c.n)))
	write := func(name string, v []float32, st bool) string {
		p := filepath.Join(dir, name)
		raw := syncer.EncodeF32(v)
		if st {
			if raw, err = safetensors.Encode([]safetensors.Tensor{{Name: "w", Dtype: "F32", Shape: []int64{int64(c.n)}, Data: raw}}, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(p, raw, 0o600); err != nil {
			b.Fatal(err)
		}
		return p
	}
	vec := func(scale float64) []float32 {
		v := make([]float32, c.n)
		for j := range v {
			v[j] = float32(r.NormFloat64() * scale)
		}
		return v
	}
	for i := 0; i < c.k; i++ {
		v := vec(1e-2)
		f.vals = append(f.vals, v)
		f.inputs = append(f.inputs, write(fmt.Sprintf("payload%02d", i), v, true))
	}
	f.wPath = write("weights", vec(1), true)
	f.mPath = write("momentum", vec(1e-2), false)
	if f.rule, err = e.ResolveRule(ctx, c.rule, nil, c.k, c.k); err != nil {
		b.Fatal(err)
	}
	if f.outer, err = e.ResolveOuter(ctx); err != nil {
		b.Fatal(err)
	}
	return f
}

func (f *finalizeFixture) close() { _ = os.RemoveAll(f.dir) }

// memoryPass sums the K·N input values in Go and returns the seconds.
func (f *finalizeFixture) memoryPass() float64 {
	t := time.Now()
	var s float32
	for _, v := range f.vals {
		for _, x := range v {
			s += x
		}
	}
	sumSink = s
	return time.Since(t).Seconds()
}

func (f *finalizeFixture) check(b *testing.B, path string, agg, w, m wire.Hash, fuel uint64) {
	if !f.checked {
		f.aggHash, f.wHash, f.mHash, f.fuel, f.checked = agg, w, m, fuel, true
		return
	}
	if agg != f.aggHash || w != f.wHash || m != f.mHash || fuel != f.fuel {
		b.Fatalf("%s: results differ from the first run (aggregate %v/%v weights %v/%v momentum %v/%v fuel %d/%d)",
			path, agg, f.aggHash, w, f.wHash, m, f.mHash, fuel, f.fuel)
	}
}

// before is syncer.computeFragment's path on main before Finalize: it returns
// the total seconds and the seconds spent in engine calls.
func (f *finalizeFixture) before(b *testing.B) (total, engine float64) {
	ctx := context.Background()
	t0 := time.Now()
	inputs := make([][]byte, f.c.k)
	for i, p := range f.inputs {
		raw, err := os.ReadFile(p) // the store's Get + clone
		if err != nil {
			b.Fatal(err)
		}
		ts, _, err := safetensors.Parse(raw, safetensors.DefaultLimits)
		if err != nil {
			b.Fatal(err)
		}
		inputs[i] = ts[0].Data
	}
	t1 := time.Now()
	agg, err := f.e.Aggregate(ctx, syncer.AggregateInput{Rule: f.rule, Dtype: machine.F32, N: f.c.n, Inputs: inputs})
	if err != nil {
		b.Fatal(err)
	}
	eng := time.Since(t1)
	aggHash := wire.ContentHash(agg.Aggregate)
	wraw, err := os.ReadFile(f.wPath)
	if err != nil {
		b.Fatal(err)
	}
	ws, _, err := safetensors.Parse(wraw, safetensors.DefaultLimits)
	if err != nil {
		b.Fatal(err)
	}
	mom, err := os.ReadFile(f.mPath)
	if err != nil {
		b.Fatal(err)
	}
	t1 = time.Now()
	step, err := f.e.OuterStep(ctx, syncer.OuterStepInput{Rule: f.outer, Dtype: machine.F32, N: f.c.n, Weights: ws[0].Data, Momentum: mom,
		Aggregate: agg.Aggregate, LR: 0.7, Beta: 0.9, Nesterov: true})
	if err != nil {
		b.Fatal(err)
	}
	eng += time.Since(t1)
	enc, err := safetensors.Encode([]safetensors.Tensor{{Name: "w", Dtype: "F32", Shape: []int64{int64(f.c.n)}, Data: step.Weights}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	wHash, mHash := wire.ContentHash(enc), wire.ContentHash(step.Momentum)
	total = time.Since(t0).Seconds()
	f.check(b, "before", aggHash, wHash, mHash, agg.Fuel+step.Fuel)
	return total, eng.Seconds()
}
