package plugins

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// scoreCase is one directory of testdata/score (trainer/tests/score_vectors.py).
type scoreCase struct {
	Name      string           `json:"name"`
	Evaluator string           `json:"evaluator"` // absent: TimesFMScore
	Config    map[string]int   `json:"config"`
	Dtype     string           `json:"dtype"`
	Fragment  []string         `json:"fragment"`
	LR        float64          `json:"lr"`
	Beta      float64          `json:"beta"`
	Nesterov  bool             `json:"nesterov"`
	Batches   int              `json:"batches"`
	BatchSize int              `json:"batch_size"`
	TorchF64  map[string][]any `json:"torch_f64"`
	TorchF32  map[string][]any `json:"torch_f32"`

	dir     string
	tensors []wire.TensorInfo
	values  []byte // the model's values in canonical order
	offs    []int64
	in      ScoreInput
}

func loadScoreCase(t testing.TB, name string) *scoreCase {
	t.Helper()
	dir := filepath.Join("testdata", "score", name)
	raw, err := os.ReadFile(filepath.Join(dir, "case.json"))
	if err != nil {
		t.Fatal(err)
	}
	c := &scoreCase{dir: dir}
	if err := json.Unmarshal(raw, c); err != nil {
		t.Fatal(err)
	}
	model, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	ts, _, err := safetensors.Parse(model, safetensors.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range ts {
		c.offs = append(c.offs, int64(len(c.values)))
		c.tensors = append(c.tensors, wire.TensorInfo{Name: tt.Name, Dtype: tt.Dtype, Shape: tt.Shape})
		c.values = append(c.values, tt.Data...)
	}
	c.offs = append(c.offs, int64(len(c.values)))
	gb, err := os.ReadFile(filepath.Join(dir, "grad.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	gs, _, err := safetensors.Parse(gb, safetensors.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	first := slices.IndexFunc(c.tensors, func(x wire.TensorInfo) bool { return x.Name == gs[0].Name })
	var grad []byte
	for i, g := range gs {
		if c.tensors[first+i].Name != g.Name || g.Name != c.Fragment[i] {
			t.Fatalf("%s: gradient tensor %q is not the fragment's tensor %d", name, g.Name, i)
		}
		grad = append(grad, g.Data...)
	}
	win, err := os.ReadFile(filepath.Join(dir, "windows.f32"))
	if err != nil {
		t.Fatal(err)
	}
	e := testEngine(t)
	params, _ := json.Marshal(c.Config)
	evaluator := "TimesFMScore"
	if c.Evaluator != "" {
		evaluator = c.Evaluator
	}
	ev, err := e.ResolveScorer(context.Background(), evaluator, params)
	if err != nil {
		t.Fatal(err)
	}
	// The start weights in three parts (before, the fragment, after), as
	// fragment blobs would give them.
	lo, hi := c.offs[first], c.offs[first+len(gs)]
	c.in = ScoreInput{Evaluator: ev, Dtype: machine.Dtype(c.Dtype), Tensors: c.tensors,
		Weights:   []syncer.Values{syncer.BytesValues(c.values[:lo]), syncer.BytesValues(c.values[lo:hi]), syncer.BytesValues(c.values[hi:])},
		FragFirst: first, FragCount: len(gs), Gradient: grad, LR: float32(c.LR), Beta: float32(c.Beta), Nesterov: c.Nesterov,
		Windows: win, Batches: c.Batches, BatchSize: c.BatchSize, WindowLen: c.Config["context_len"] + c.Config["horizon"]}
	return c
}

func (c *scoreCase) torch(which, label string) []float64 {
	m := c.TorchF64
	if which == "f32" {
		m = c.TorchF32
	}
	var out []float64
	for _, v := range m[label] {
		out = append(out, v.(float64))
	}
	return out
}

// lossDigest hashes a call's losses (the bits).
func lossDigest(o ScoreOutput) string {
	h := sha256.New()
	for i := range o.Before {
		_ = binary.Write(h, binary.LittleEndian, math.Float64bits(o.Before[i]))
		_ = binary.Write(h, binary.LittleEndian, math.Float64bits(o.After[i]))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// scoreDigest is lossDigest and the fuel.
func scoreDigest(o ScoreOutput) string { return fmt.Sprintf("%s/%d", lossDigest(o), o.Fuel) }

var scoreCases = []string{"odd", "tiny", "tiny_bf16", "granite_odd", "granite_flat", "granite_tiny", "granite_tiny_bf16", "granite_narrow",
	"chronos_tiny", "chronos_odd", "chronos_long", "chronos_tiny_bf16"}

// TestScoreMatchesPyTorch runs the evaluator of each case (TimesFMScore;
// GraniteTTMScore for the granite_* cases, ChronosBoltScore for chronos_*) on the reference vectors and
// compares its losses with PyTorch's float64 run of the trainer's own model: every loss within 2e-6 relative, and every loss
// change (before − after, the score) within 2e-6 of the loss — the f32
// forward pass against f64. PyTorch's own float32 run is held to the same
// bound, which shows the evaluator is as close to the model as the model's
// float32 arithmetic is to itself.
func TestScoreMatchesPyTorch(t *testing.T) {
	const tol = 2e-6
	for _, name := range scoreCases {
		t.Run(name, func(t *testing.T) {
			c := loadScoreCase(t, name)
			out, err := testEngine(t).Score(context.Background(), c.in)
			if err != nil {
				t.Fatal(err)
			}
			for _, ref := range []string{"f64", "f32"} {
				tb, ta := c.torch(ref, "before"), c.torch(ref, "after")
				for i := range out.Before {
					db, da := math.Abs(out.Before[i]-tb[i]), math.Abs(out.After[i]-ta[i])
					dd := math.Abs((out.Before[i] - out.After[i]) - (tb[i] - ta[i]))
					t.Logf("%s batch %d: wasm before %.9g after %.9g Δ %.3e; torch %s before %.9g after %.9g Δ %.3e; |err| %.1e %.1e Δ %.1e",
						name, i, out.Before[i], out.After[i], out.Before[i]-out.After[i], ref, tb[i], ta[i], tb[i]-ta[i], db, da, dd)
					if db > tol*tb[i] || da > tol*ta[i] || dd > tol*tb[i] {
						t.Errorf("%s batch %d: wasm differs from torch %s beyond %g relative", name, i, ref, tol)
					}
				}
			}
			if out.Fuel == 0 {
				t.Error("no fuel recorded")
			}
		})
	}
}

// TestScoreReproducible: the same call gives the same bits and fuel again,
// on the interpreter, and in a worker process, with the weights read from
// memory or from a weights file.
func TestScoreReproducible(t *testing.T) {
	ctx := context.Background()
	interp, err := NewEngine(ctx, Config{Fuel: 20_000_000_000, Interpreter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer interp.Close(ctx)
	for _, name := range scoreCases {
		c := loadScoreCase(t, name)
		ref, err := testEngine(t).Score(ctx, c.in)
		if err != nil {
			t.Fatal(err)
		}
		want := scoreDigest(ref)
		t.Logf("%s: %s (fuel %d)", name, want, ref.Fuel)
		again, err := testEngine(t).Score(ctx, c.in)
		if err != nil || scoreDigest(again) != want {
			t.Errorf("%s: second run %v %v", name, scoreDigest(again), err)
		}
		if name != "tiny_bf16" { // the interpreter is slow: one case with ragged tails, one TINY
			got, err := interp.Score(ctx, c.in)
			if err != nil || scoreDigest(got) != want {
				t.Errorf("%s: interpreter %v %v, compiler %s", name, scoreDigest(got), err, want)
			}
		}
		// The weights straight from the model's safetensors file.
		v, infos, err := WeightsFileValues(filepath.Join(c.dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != len(c.tensors) {
			t.Fatalf("%s: %d tensors from the file, %d from Parse", name, len(infos), len(c.tensors))
		}
		fin := c.in
		fin.Weights = []syncer.Values{v}
		got, err := testEngine(t).Score(ctx, fin)
		if err != nil || scoreDigest(got) != want {
			t.Errorf("%s: weights from the file %v %v, want %s", name, scoreDigest(got), err, want)
		}
		if w := scoreWorker(t); w != nil {
			got, err := w.Score(ctx, c.in)
			if err != nil || scoreDigest(got) != want {
				t.Errorf("%s: worker (weights in the arena) %v %v, want %s", name, scoreDigest(got), err, want)
			}
			got, err = w.Score(ctx, fin)
			if err != nil || scoreDigest(got) != want {
				t.Errorf("%s: worker (weights file) %v %v, want %s", name, scoreDigest(got), err, want)
			}
		}
	}
}

// TestScoreGolden pins the evaluator's bits: a change to the module, the
// host's call or the fuel table shows here.
func TestScoreGolden(t *testing.T) {
	want := map[string]string{
		"odd":       "a7761f163b122a7a/3108759",
		"tiny":      "3a1e9eeeffa5cd1a/22880287",
		"tiny_bf16": "4c765bc253eb26c1/23123105",
		// GraniteTTMScore (scoring.md §2b)
		"granite_odd":       "6c1bc1f97386bd47/9241450",
		"granite_flat":      "683b778c463b2ae3/818196",
		"granite_tiny":      "7612861e7f838ae8/13019879",
		"granite_tiny_bf16": "e3fa858c22c5d64a/12886533",
		"granite_narrow":    "19ffae990f6f3206/3459550",
		// ChronosBoltScore (scoring.md §2c)
		"chronos_tiny":      "e2896c1af1f57168/19986040",
		"chronos_odd":       "570f5d063bdcc563/11332390",
		"chronos_long":      "52e47092c4b61836/9219280",
		"chronos_tiny_bf16": "d3de2ddb84876b70/21681962",
	}
	for _, name := range scoreCases {
		c := loadScoreCase(t, name)
		out, err := testEngine(t).Score(context.Background(), c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := scoreDigest(out); got != want[name] {
			t.Errorf("%s: losses/fuel %s, want %s", name, got, want[name])
		}
	}
}

// TestScoreZeroGradient: a zero gradient changes nothing, bit for bit.
func TestScoreZeroGradient(t *testing.T) {
	c := loadScoreCase(t, "odd")
	c.in.Gradient = make([]byte, len(c.in.Gradient))
	out, err := testEngine(t).Score(context.Background(), c.in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range out.Before {
		if math.Float64bits(out.Before[i]) != math.Float64bits(out.After[i]) {
			t.Errorf("batch %d: before %v, after %v", i, out.Before[i], out.After[i])
		}
	}
}

// TestScoreBadInput: every malformed call is refused with an error naming
// what is wrong, before anything runs.
func TestScoreBadInput(t *testing.T) {
	e := testEngine(t)
	base := loadScoreCase(t, "odd")
	for _, tc := range []struct {
		name string
		mod  func(in *ScoreInput)
		want string
		rule bool // a deterministic rule failure (the guest refused)
	}{
		{"short gradient", func(in *ScoreInput) { in.Gradient = in.Gradient[4:] }, "gradient of", false},
		{"short weights", func(in *ScoreInput) { in.Weights = in.Weights[:2] }, "weights span", false},
		{"file without ranges", func(in *ScoreInput) {
			in.Weights = []syncer.Values{syncer.FileValues(filepath.Join("testdata", "score", "odd", "model.safetensors"))}
		}, "weights span 0 bytes", false},
		{"windows", func(in *ScoreInput) { in.Windows = in.Windows[:len(in.Windows)-4] }, "windows of", false},
		{"no batches", func(in *ScoreInput) { in.Batches = 0 }, "batches of", false},
		{"nan window", func(in *ScoreInput) {
			in.Windows = bytes.Clone(in.Windows)
			binary.LittleEndian.PutUint32(in.Windows[8:], 0x7fc00000)
		}, "window 0 has a non-finite value at 2", false},
		{"fragment range", func(in *ScoreInput) { in.FragCount = len(in.Tensors) }, "outside the model", false},
		{"order", func(in *ScoreInput) {
			in.Tensors = slices.Clone(in.Tensors)
			in.Tensors[0], in.Tensors[1] = in.Tensors[1], in.Tensors[0]
		}, "canonical", false},
		{"dtype", func(in *ScoreInput) { in.Dtype = machine.BF16 }, "is F32, the model is BF16", false},
		{"nan lr", func(in *ScoreInput) { in.LR = float32(math.NaN()) }, "must be finite", false},
		{"window length", func(in *ScoreInput) {
			in.WindowLen--
			in.Windows = in.Windows[:in.Batches*in.BatchSize*in.WindowLen*4]
		}, "windows have 22 values, want context_len + horizon = 23", true},
		{"wrong params", func(in *ScoreInput) {
			in.Evaluator.Params = json.RawMessage(`{"context_len":20,"horizon":3,"patch_len":5,"d_model":12,"n_layers":2,"n_heads":3,"d_ff":11}`)
		}, "has the wrong shape for the parameters", true},
		{"extra tensor", func(in *ScoreInput) {
			in.Evaluator.Params = json.RawMessage(`{"context_len":20,"horizon":3,"patch_len":5,"d_model":12,"n_layers":1,"n_heads":3,"d_ff":10}`)
		}, "is not part of a TimesFM-class model", true},
		{"missing tensor", func(in *ScoreInput) {
			in.Evaluator.Params = json.RawMessage(`{"context_len":20,"horizon":3,"patch_len":5,"d_model":12,"n_layers":3,"n_heads":3,"d_ff":10}`)
		}, "layers.2.ln1.weight is missing", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base.in
			tc.mod(&in)
			_, err := e.Score(context.Background(), in)
			var rf *syncer.RuleFailure
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &rf) != tc.rule {
				t.Fatalf("err = %v, want %q (rule failure %v)", err, tc.want, tc.rule)
			}
		})
	}
	// A scorer is not an aggregator, and an aggregator is not a scorer.
	if _, err := e.ResolveScorer(context.Background(), "Mean", nil); err == nil || !strings.Contains(err.Error(), "not score") {
		t.Errorf("ResolveScorer(Mean): %v", err)
	}
	if _, err := e.ResolveRule(context.Background(), "TimesFMScore", nil, 1, 0); err == nil {
		t.Error("ResolveRule accepted an evaluator")
	}
}

// TestScoreOutOfFuel: a budget too small ends the call deterministically.
func TestScoreOutOfFuel(t *testing.T) {
	ctx := context.Background()
	e, err := NewEngine(ctx, Config{Fuel: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	c := loadScoreCase(t, "tiny")
	_, err = e.Score(ctx, c.in)
	var rf *syncer.RuleFailure
	if !errors.As(err, &rf) || rf.Code != CodeOutOfFuel {
		t.Fatalf("err = %v, want out of fuel", err)
	}
}

// FuzzScoreInput mutates a valid score call (the fragment, the batch shape,
// a tensor's shape and name, the gradient's length): the host refuses or the
// guest answers — with an error naming the problem, or losses for every
// batch — and nothing panics or traps.
func FuzzScoreInput(f *testing.F) { fuzzScoreCase(f, "odd") }

// fuzzScoreCase is FuzzScoreInput's body on one case of testdata/score.
func fuzzScoreCase(f *testing.F, name string) {
	f.Add(int8(0), int8(0), uint8(2), uint8(4), int8(0), uint8(0), int32(0), uint8(0), uint16(0))
	f.Add(int8(-1), int8(3), uint8(1), uint8(1), int8(1), uint8(3), int32(5), uint8(2), uint16(4))
	f.Add(int8(0), int8(0), uint8(1), uint8(8), int8(0), uint8(7), int32(-1), uint8(1), uint16(0))
	base := loadScoreCase(f, name)
	e := testEngine(f)
	f.Fuzz(func(t *testing.T, dFirst, dCount int8, batches, bsize uint8, dWin int8, ti uint8, dim int32, cut uint8, gcut uint16) {
		in := base.in
		in.FragFirst += int(dFirst)
		in.FragCount += int(dCount)
		in.Batches, in.BatchSize = int(batches%4), int(bsize%9)
		in.WindowLen += int(dWin % 3)
		if n := in.Batches * in.BatchSize * in.WindowLen * 4; n >= 0 && n <= len(base.in.Windows) {
			in.Windows = base.in.Windows[:n]
		}
		in.Tensors = slices.Clone(in.Tensors)
		tt := &in.Tensors[int(ti)%len(in.Tensors)]
		if dim != 0 { // reshape (same size when dim divides it, else a size change the host refuses)
			n := int64(1)
			for _, d := range tt.Shape {
				n *= d
			}
			if dim > 0 && n%int64(dim) == 0 {
				tt.Shape = []int64{int64(dim), n / int64(dim)}
			} else {
				tt.Shape = []int64{n + int64(dim%7)}
			}
		}
		if cut%4 == 1 && len(tt.Name) > 1 {
			tt.Name = tt.Name[:len(tt.Name)-1]
		}
		if int(gcut) < len(in.Gradient) {
			in.Gradient = in.Gradient[:len(in.Gradient)-int(gcut)]
		}
		out, err := e.Score(context.Background(), in)
		var rf *syncer.RuleFailure
		if errors.As(err, &rf) && (rf.Code == CodeTrap || rf.Code == CodeOutOfFuel) {
			t.Fatalf("the evaluator trapped or ran out of fuel: %v", err)
		}
		if err == nil && (len(out.Before) != in.Batches || len(out.After) != in.Batches) {
			t.Fatalf("%d/%d losses for %d batches", len(out.Before), len(out.After), in.Batches)
		}
	})
}

// TestResolveScorer: the built-in evaluator resolves by name, with inline
// parameters and defaults filled, to the embedded module's hash (recorded
// in docs/protocol/scoring.md).
func TestResolveScorer(t *testing.T) {
	rr, err := testEngine(t).ResolveScorer(context.Background(), "TimesFMScore{n_layers=3, d_ff=256}", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Name != "TimesFMScore" || rr.Hash.String() != "b9752bdfcc14e7b5bb9e8a118aabef67ec9db2dd8464fc0f0dee1d3c06d82027" {
		t.Errorf("resolved %s %s", rr.Name, rr.Hash)
	}
	if want := `{"context_len":64,"d_ff":256,"d_model":64,"horizon":16,"n_heads":4,"n_layers":3,"patch_len":8}`; string(rr.Params) != want {
		t.Errorf("params %s, want %s", rr.Params, want)
	}
	if _, err := testEngine(t).ResolveScorer(context.Background(), "TimesFMScore{n_heads=0}", nil); err == nil {
		t.Error("n_heads=0 accepted")
	}
}
