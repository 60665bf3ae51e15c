package plugins

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	wasm "github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire/safetensors"
)

// BenchmarkScore times a built-in evaluator (TimesFMScore; GraniteTTMScore
// for the granite-* models, ChronosBoltScore for chronos-*) on one submission — the
// losses of an own-shard and a control batch of SCORE_BATCH windows (default
// 8) before and after the gradient, i.e. four forward passes of 8 windows —
// against the aggregation of the same fragment by Mean over K=6 inputs,
// measured in the same iteration with the same engine. Both run as the node
// runs them: in worker processes, the start weights read from the fragments'
// weights blobs (canonical safetensors files) and the inputs from memory.
// The model is split into F=4 fragments (machine.SplitFragments); the scored
// and aggregated fragment is the largest. Random weights: the cost does not
// depend on the values.
//
//	SCORE_MODELS=demo,10m,granite-tiny,granite-1m,chronos-tiny,chronos-1m (default all) SCORE_BATCH=8
//	nice -n 10 go test ./bench/plugins -run '^$' -bench Score -benchtime 3x -timeout 30m
func BenchmarkScore(b *testing.B) {
	ctx := context.Background()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	e, err := wasm.NewEngine(ctx, wasm.Config{Workers: 2, WorkerCommand: []string{exe}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	batch := 8
	if v := os.Getenv("SCORE_BATCH"); v != "" {
		if _, err := fmt.Sscan(v, &batch); err != nil {
			b.Fatal(err)
		}
	}
	models := []scoreModel{
		{"demo", "TimesFMScore", map[string]int{"context_len": 64, "horizon": 16, "patch_len": 8, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128}},
		{"10m", "TimesFMScore", map[string]int{"context_len": 512, "horizon": 64, "patch_len": 32, "d_model": 256, "n_layers": 12, "n_heads": 8, "d_ff": 1024}},
		// the trainer's Granite-TTM TINY config (models/granite_ttm.py)
		{"granite-tiny", "GraniteTTMScore", map[string]int{"context_len": 64, "horizon": 16, "patch_len": 8, "d_model": 16, "num_layers": 2, "decoder_num_layers": 1}},
		// a Granite-TTM of the published TTM's size class (~1.6M parameters, context 512, 8 patches)
		{"granite-1m", "GraniteTTMScore", map[string]int{"context_len": 512, "horizon": 96, "patch_len": 64, "d_model": 192, "num_layers": 8, "decoder_num_layers": 2}},
		// the trainer's Chronos-Bolt TINY config (models/chronos_bolt.py)
		{"chronos-tiny", "ChronosBoltScore", map[string]int{"context_len": 64, "horizon": 16, "patch_len": 8, "d_model": 32, "d_ff": 64, "num_layers": 1, "num_decoder_layers": 1, "num_heads": 2, "d_kv": 16}},
		// a ~1.4M-parameter Chronos-Bolt (context 512 in 32 patches of 16, 2 + 2 blocks of width 128)
		{"chronos-1m", "ChronosBoltScore", map[string]int{"context_len": 512, "horizon": 64, "patch_len": 16, "d_model": 128, "d_ff": 512, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 4, "d_kv": 32}},
	}
	want := os.Getenv("SCORE_MODELS")
	for _, m := range models {
		if want != "" && !slices.Contains(strings.Split(want, ","), m.name) {
			continue
		}
		b.Run(m.name, func(b *testing.B) {
			in, agg, params := scoreFixture(b, e, m, batch)
			var score, mean []float64
			var sFuel, aFuel uint64
			run := func() {
				t0 := time.Now()
				out, err := e.Score(ctx, in)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				ao, err := e.Aggregate(ctx, agg)
				if err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				score, mean = append(score, t1.Sub(t0).Seconds()), append(mean, t2.Sub(t1).Seconds())
				sFuel, aFuel = out.Fuel, ao.Fuel
			}
			run() // warm-up: workers, compilation, page cache
			score, mean = nil, nil
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run()
			}
			b.StopTimer()
			b.ReportMetric(med(score)*1e3, "score_ms")
			b.ReportMetric(med(mean)*1e3, "mean6_ms")
			b.ReportMetric(med(score)/med(mean), "score/mean6")
			b.Logf("| %s | %d | %d | 2×%d | %.0f (%.0f–%.0f) | %.1f (%.1f–%.1f) | %s | %.3g | %.3g |", m.name, params, agg.N, batch,
				med(score)*1e3, slices.Min(score)*1e3, slices.Max(score)*1e3, med(mean)*1e3, slices.Min(mean)*1e3, slices.Max(mean)*1e3,
				ratioText(score, mean), float64(sFuel), float64(aFuel))
		})
	}
}

type scoreModel struct {
	name, evaluator string
	cfg             map[string]int
}

// modelShapes lists the tensors the model's evaluator takes.
func (m scoreModel) shapes() map[string][]int64 {
	switch m.evaluator {
	case "GraniteTTMScore":
		return graniteShapes(m.cfg)
	case "ChronosBoltScore":
		return chronosShapes(m.cfg)
	}
	return timesfmShapes(m.cfg)
}

// graniteShapes lists the Granite-TTM tensors (trainer models/granite_ttm.py:
// granite-tsfm's TinyTimeMixerForPrediction, decoder_d_model = max(8,
// d_model/2), scoring.md §2b).
func graniteShapes(c map[string]int) map[string][]int64 {
	P, D, H := int64(c["patch_len"]), int64(c["d_model"]), int64(c["horizon"])
	T, Dd := int64(c["context_len"]/c["patch_len"]), max(int64(8), int64(c["d_model"]/2))
	s := map[string][]int64{}
	lin := func(p string, out, in int64) { s[p+".weight"], s[p+".bias"] = []int64{out, in}, []int64{out} }
	mixers := func(base string, n int, d int64) {
		for l := 0; l < n; l++ {
			p := fmt.Sprintf("%s.%d.", base, l)
			if T > 1 {
				s[p+"patch_mixer.norm.norm.weight"], s[p+"patch_mixer.norm.norm.bias"] = []int64{d}, []int64{d}
				lin(p+"patch_mixer.mlp.fc1", 2*T, T)
				lin(p+"patch_mixer.mlp.fc2", T, 2*T)
				lin(p+"patch_mixer.gating_block.attn_layer", T, T)
			}
			s[p+"feature_mixer.norm.norm.weight"], s[p+"feature_mixer.norm.norm.bias"] = []int64{d}, []int64{d}
			lin(p+"feature_mixer.mlp.fc1", 2*d, d)
			lin(p+"feature_mixer.mlp.fc2", d, 2*d)
			lin(p+"feature_mixer.gating_block.attn_layer", d, d)
		}
	}
	lin("net.backbone.encoder.patcher", D, P)
	mixers("net.backbone.encoder.mlp_mixer_encoder.mixers", c["num_layers"], D)
	if D != Dd {
		lin("net.decoder.adapter", Dd, D)
	}
	mixers("net.decoder.decoder_block.mixers", c["decoder_num_layers"], Dd)
	lin("net.head.base_forecast_block", H, T*Dd)
	return s
}

// chronosShapes lists the Chronos-Bolt tensors (trainer models/chronos_bolt.py:
// chronos-forecasting's ChronosBoltModelForForecasting, scoring.md §2c).
func chronosShapes(c map[string]int) map[string][]int64 {
	P, D, F, H := int64(c["patch_len"]), int64(c["d_model"]), int64(c["d_ff"]), int64(c["horizon"])
	NH, I := int64(c["num_heads"]), int64(c["num_heads"]*c["d_kv"])
	s := map[string][]int64{"net.shared.weight": {2, D}}
	res := func(p string, in, out int64) {
		s[p+".hidden_layer.weight"], s[p+".hidden_layer.bias"] = []int64{F, in}, []int64{F}
		s[p+".output_layer.weight"], s[p+".output_layer.bias"] = []int64{out, F}, []int64{out}
		s[p+".residual_layer.weight"], s[p+".residual_layer.bias"] = []int64{out, in}, []int64{out}
	}
	attn := func(p string) {
		for _, n := range []string{"q", "k", "v"} {
			s[p+"."+n+".weight"] = []int64{I, D}
		}
		s[p+".o.weight"] = []int64{D, I}
	}
	stack := func(base string, n int, decoder bool) {
		for l := 0; l < n; l++ {
			p := fmt.Sprintf("%s.block.%d.layer.", base, l)
			s[p+"0.layer_norm.weight"] = []int64{D}
			attn(p + "0.SelfAttention")
			if l == 0 {
				s[p+"0.SelfAttention.relative_attention_bias.weight"] = []int64{32, NH}
			}
			ff := "1"
			if decoder {
				s[p+"1.layer_norm.weight"] = []int64{D}
				attn(p + "1.EncDecAttention")
				ff = "2"
			}
			s[p+ff+".layer_norm.weight"] = []int64{D}
			s[p+ff+".DenseReluDense.wi.weight"], s[p+ff+".DenseReluDense.wo.weight"] = []int64{F, D}, []int64{D, F}
		}
		s[base+".final_layer_norm.weight"] = []int64{D}
	}
	res("net.input_patch_embedding", 2*P, D)
	stack("net.encoder", c["num_layers"], false)
	stack("net.decoder", c["num_decoder_layers"], true)
	res("net.output_patch_embedding", D, 9*H)
	return s
}

// timesfmShapes lists the TimesFM-class tensors (trainer models/timesfm.py).
func timesfmShapes(c map[string]int) map[string][]int64 {
	P, D, F, H := int64(c["patch_len"]), int64(c["d_model"]), int64(c["d_ff"]), int64(c["horizon"])
	T := int64(c["context_len"] / c["patch_len"])
	s := map[string][]int64{"pos": {T, D}, "ln_f.weight": {D}, "ln_f.bias": {D}}
	res := func(p string, in, hid, out int64) {
		s[p+".hidden.weight"], s[p+".hidden.bias"] = []int64{hid, in}, []int64{hid}
		s[p+".out.weight"], s[p+".out.bias"] = []int64{out, hid}, []int64{out}
		s[p+".skip.weight"], s[p+".skip.bias"] = []int64{out, in}, []int64{out}
	}
	res("embed", P, F, D)
	res("head", D, F, H)
	for l := 0; l < c["n_layers"]; l++ {
		p := fmt.Sprintf("layers.%d.", l)
		for _, n := range []string{"ln1", "ln2"} {
			s[p+n+".weight"], s[p+n+".bias"] = []int64{D}, []int64{D}
		}
		s[p+"qkv.weight"], s[p+"qkv.bias"] = []int64{3 * D, D}, []int64{3 * D}
		s[p+"proj.weight"], s[p+"proj.bias"] = []int64{D, D}, []int64{D}
		s[p+"ff1.weight"], s[p+"ff1.bias"] = []int64{F, D}, []int64{F}
		s[p+"ff2.weight"], s[p+"ff2.bias"] = []int64{D, F}, []int64{D}
	}
	return s
}

func randF32(r *rand.Rand, n int64, scale float64) []byte {
	out := make([]byte, 4*n)
	for i := int64(0); i < n; i++ {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float32(r.NormFloat64()*scale)))
	}
	return out
}

// scoreFixture writes the model's fragments as weights blobs and returns the
// score call of one input on the largest fragment, the Mean K=6 call on the
// same fragment, and the model's parameter count.
func scoreFixture(b *testing.B, e *wasm.Engine, m scoreModel, batch int) (wasm.ScoreInput, syncer.AggregateInput, int64) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, uint64(len(m.name))))
	var tensors []safetensors.Tensor
	var total int64
	for name, shape := range m.shapes() {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		scale := 1 / math.Sqrt(float64(shape[len(shape)-1]))
		if strings.HasSuffix(name, "norm") || strings.Contains(name, ".ln") || strings.HasPrefix(name, "ln_f") || strings.Contains(name, ".norm.") {
			scale = 0.1
		}
		tensors = append(tensors, safetensors.Tensor{Name: name, Dtype: "F32", Shape: shape, Data: randF32(r, n, scale)})
		total += n
	}
	frags, err := machine.SplitFragments(tensors, 4)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	in := wasm.ScoreInput{Dtype: machine.F32, LR: 0.7, Beta: 0.9, Nesterov: true, Batches: 2, BatchSize: batch,
		WindowLen: m.cfg["context_len"] + m.cfg["horizon"]}
	largest, first := -1, 0
	var fragN int64
	for i, ts := range frags {
		enc, err := safetensors.Encode(ts, nil)
		if err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(dir, fmt.Sprintf("frag%d.safetensors", i))
		if err := os.WriteFile(path, enc, 0o600); err != nil {
			b.Fatal(err)
		}
		v, infos, err := wasm.WeightsFileValues(path)
		if err != nil {
			b.Fatal(err)
		}
		if n := v.Len() / 4; n > fragN {
			largest, fragN, in.FragFirst, in.FragCount = i, n, first, len(infos)
		}
		first += len(infos)
		in.Weights = append(in.Weights, v)
		in.Tensors = append(in.Tensors, infos...)
	}
	params, _ := jsonParams(m.cfg)
	if in.Evaluator, err = e.ResolveScorer(ctx, m.evaluator, params); err != nil {
		b.Fatal(err)
	}
	in.Gradient = randF32(r, fragN, 1e-3)
	win := make([]float32, in.Batches*batch*in.WindowLen)
	for i := range win {
		win[i] = float32(100 + 10*math.Sin(float64(i)/7) + r.NormFloat64())
	}
	in.Windows = wasm.WindowBytes(win)
	mean, err := e.ResolveRule(ctx, "Mean", nil, 6, 6)
	if err != nil {
		b.Fatal(err)
	}
	agg := syncer.AggregateInput{Rule: mean, Dtype: machine.F32, N: int(fragN)}
	for k := 0; k < 6; k++ {
		agg.Inputs = append(agg.Inputs, randF32(r, fragN, 1e-3))
	}
	b.Logf("%s: %d parameters, fragment %d of 4 has %d values", m.name, total, largest, fragN)
	return in, agg, total
}

func jsonParams(c map[string]int) ([]byte, error) {
	var parts []string
	for k, v := range c {
		parts = append(parts, fmt.Sprintf("%q:%d", k, v))
	}
	slices.Sort(parts)
	return []byte("{" + strings.Join(parts, ",") + "}"), nil
}
