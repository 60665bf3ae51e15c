package syncer_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// initWeightsBF16 is initWeights rounded to BF16.
func initWeightsBF16(t *testing.T, f, n int) []byte {
	t.Helper()
	ts, _, err := safetensors.Parse(initWeights(t, f, n), safetensors.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range ts {
		v, _ := safetensors.F32Values(x)
		ts[i] = safetensors.FromF32AsBF16(x.Name, x.Shape, v)
	}
	b, err := safetensors.Encode(ts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (h *harness) setInit(weights []byte) error {
	p := &wire.SetInitWeightsParams{TaskID: h.task, Weights: weights}
	p.Nonce, p.ChainID = h.nextNonce(), chain.ManualChainID
	p.Signature = h.sponsor.Sign(p.Preimage(h.sponsor.DID.String()))
	_, err := h.node.SetInitWeights(h.ctx, p)
	h.conserve("setInitWeights")
	return err
}

// TestInitWeightsDtype: the node refuses initial weights whose dtype is not
// the spec's architecture.dtype, through postTask and setInitWeights, with
// an error naming both, and stores nothing (no run, no weights blob); the
// spec's own dtype must be f32 or bf16.
func TestInitWeightsDtype(t *testing.T) {
	const F = 2
	cases := []struct {
		name     string
		dtype    string // the spec's
		bf16     bool   // the weights are BF16 (else F32)
		late     bool   // sent with setInitWeights after a posting without weights
		wantErr  string // "" accepted
		wantFrag string // the accepted run's fragment dtype
	}{
		{"F32 weights under bf16, postTask", "bf16", false, false, "architecture.dtype is bf16, so the initial weights must be BF16, but they are F32 (fragment 0, tensor \"layer0.w\"): round them to BF16 before signing", ""},
		{"F32 weights under bf16, setInitWeights", "bf16", false, true, "architecture.dtype is bf16, so the initial weights must be BF16, but they are F32", ""},
		{"BF16 weights under f32, postTask", "f32", true, false, "architecture.dtype is f32, so the initial weights must be F32, but they are BF16 (fragment 0, tensor \"layer0.w\"): the node never converts weights", ""},
		{"BF16 weights under f32, setInitWeights", "f32", true, true, "must be F32, but they are BF16", ""},
		{"a spec dtype that is neither", "fp16", false, false, `architecture.dtype is "fp16", want "f32" or "bf16"`, ""},
		{"BF16 weights under bf16", "bf16", true, false, "", "BF16"},
		{"BF16 weights under bf16, setInitWeights", "bf16", true, true, "", "BF16"},
		{"F32 weights under f32", "f32", false, false, "", "F32"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kv, _ := store.OpenInMemory()
			h := newHarness(t, kv)
			h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
			w := initWeights(t, F, 16)
			if tc.bf16 {
				w = initWeightsBF16(t, F, 16)
			}
			layout, _, err := machine.InitLayoutOf(w, F)
			if err != nil {
				t.Fatal(err)
			}
			raw := specDtype(tc.dtype, h.task, h.sponsor.DID.String(), 8, 6, F, 2)
			if tc.late {
				if err := h.post(raw, nil); err != nil {
					t.Fatal(err)
				}
				err = h.setInit(w)
			} else {
				err = h.post(raw, w)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range h.run().Fragments {
					if f.Dtype != tc.wantFrag {
						t.Fatalf("fragment %d is %s, want %s", f.Index, f.Dtype, tc.wantFrag)
					}
				}
				return
			}
			if machine.KindOf(err) != machine.KindInvalid || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v (kind %v), want invalid: %q", err, machine.KindOf(err), tc.wantErr)
			}
			if tc.late {
				if v := h.run(); v.HasWeights || !v.InitWeightsHash.IsZero() {
					t.Fatalf("refused weights were installed: has_weights %v, init %s", v.HasWeights, v.InitWeightsHash)
				}
			} else if _, err := h.node.GetRun(h.ctx, h.task); machine.KindOf(err) != machine.KindNotFound {
				t.Fatalf("a refused posting left a run: %v", err)
			}
			for i, f := range layout.Fragments {
				if ok, _ := (syncer.KVBlobs{KV: kv}).Has(h.ctx, f.WeightsHash); ok {
					t.Fatalf("fragment %d of the refused weights was stored", i)
				}
			}
		})
	}
}

// gradientOf is h.gradient with the fragment's values written as dtype.
func (h *harness) gradientOf(dtype string, i, round, f int, scale float32) *wire.OuterGradient {
	var out []safetensors.Tensor
	for _, t := range h.weights(f) {
		v, _ := safetensors.F32Values(t)
		for j := range v {
			v[j] = scale * 0.001 * pattern(i, round, f, j)
		}
		if dtype == "BF16" {
			out = append(out, safetensors.FromF32AsBF16(t.Name, t.Shape, v))
		} else {
			out = append(out, safetensors.FromF32(t.Name, t.Shape, v))
		}
	}
	payload, _ := safetensors.Encode(out, bound(h.task, h.tr[i].DID.String(), round, f))
	g := &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: h.task, TrainerDID: h.tr[i].DID.String(), Round: uint64(round), FragmentIndex: uint64(f),
		GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
	g.Signature = h.tr[i].Sign(g.Preimage())
	return g
}

// bf16Run posts a run of the spec's dtype with weights in it and enrols M.
func bf16Run(t *testing.T, dtype string, m, k, f, rounds int) *harness {
	t.Helper()
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	w := initWeights(t, f, 16)
	if dtype == "bf16" {
		w = initWeightsBF16(t, f, 16)
	}
	if err := h.post(specDtype(dtype, h.task, h.sponsor.DID.String(), m, k, f, rounds), w); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < m; i++ {
		h.faucet(h.tr[i].DID.String(), "200000000000000000000")
		if err := h.enroll(i, "100000000000000000000"); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// TestPayloadDtype: a payload's dtype must be the run's weights' (= the
// spec's); the node refuses one that is not with the tensor and both
// dtypes named, and the refusal changes nothing (no record, no count, the
// payload not stored); the right dtype is then accepted.
func TestPayloadDtype(t *testing.T) {
	cases := []struct {
		name, spec, payload, wantErr string
	}{
		{"BF16 payload into an f32 run", "f32", "BF16", `gradient_payload: tensor "layer0.w" has dtype BF16, the fragment's is F32`},
		{"F32 payload into a bf16 run", "bf16", "F32", `gradient_payload: tensor "layer0.w" has dtype F32, the fragment's is BF16`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := bf16Run(t, tc.spec, 2, 2, 1, 2)
			g := h.gradientOf(tc.payload, 0, 0, 0, 1)
			err := h.submit(g)
			if machine.KindOf(err) != machine.KindInvalid || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want invalid: %s", err, tc.wantErr)
			}
			v := h.run()
			if v.Fragments[0].Accepted != 0 || v.TrainerMetrics[h.tr[0].DID.String()].Submitted != 0 {
				t.Fatalf("a refused payload counted: %+v %+v", v.Fragments[0], v.TrainerMetrics[h.tr[0].DID.String()])
			}
			if ok, _ := (syncer.KVBlobs{KV: h.kv}).Has(h.ctx, g.PayloadHash); ok {
				t.Fatal("a refused payload was stored")
			}
			want := "F32"
			if tc.spec == "bf16" {
				want = "BF16"
			}
			if err := h.submit(h.gradientOf(want, 0, 0, 0, 1)); err != nil {
				t.Fatalf("the run's dtype refused after a refusal: %v", err)
			}
		})
	}
}

// TestBF16RunFinalizesDeterministically: a bf16 run's outer step keeps its
// weights BF16 (the stored weights of every fragment, the run view's
// layout), and two nodes that see the same submissions commit identical
// weight bytes and model hashes, round after round.
func TestBF16RunFinalizesDeterministically(t *testing.T) {
	const M, K, F, R = 3, 3, 2, 2
	var weights [2][][]byte
	var models [2][]wire.Hash
	for n := 0; n < 2; n++ {
		h := bf16Run(t, "bf16", M, K, F, R)
		init := make([][]byte, F)
		for f := 0; f < F; f++ {
			init[f], _ = safetensors.Encode(h.weights(f), nil)
		}
		for round := 0; round < R; round++ {
			for f := 0; f < F; f++ {
				for i := 0; i < M; i++ {
					if err := h.submit(h.gradientOf("BF16", i, round, f, 1+float32(i))); err != nil {
						t.Fatalf("node %d round %d fragment %d trainer %d: %v", n, round, f, i, err)
					}
				}
			}
			h.advance(time.Second)
			if _, err := h.finalize(round); err != nil && round < R-1 {
				t.Fatalf("node %d finalize round %d: %v", n, round, err)
			}
			v := h.run()
			models[n] = append(models[n], v.ModelHash)
			for f := 0; f < F; f++ {
				if v.Fragments[f].Dtype != "BF16" {
					t.Fatalf("round %d fragment %d: layout dtype %s", round, f, v.Fragments[f].Dtype)
				}
				ts := h.weights(f)
				for _, x := range ts {
					if x.Dtype != "BF16" {
						t.Fatalf("round %d: stored tensor %q is %s, want BF16", round, x.Name, x.Dtype)
					}
				}
				b, _ := safetensors.Encode(ts, nil)
				if bytes.Equal(b, init[f]) {
					t.Fatalf("round %d fragment %d: the outer step left the weights as they were", round, f)
				}
				weights[n] = append(weights[n], b)
			}
		}
		if st := h.run().Status; st != wire.StatusSealed {
			t.Fatalf("node %d: status %s after %d rounds", n, st, R)
		}
	}
	for i := range weights[0] {
		if !bytes.Equal(weights[0][i], weights[1][i]) {
			t.Fatalf("weights %d differ between the two nodes", i)
		}
	}
	if fmt.Sprint(models[0]) != fmt.Sprint(models[1]) {
		t.Fatalf("model hashes differ: %v vs %v", models[0], models[1])
	}
}
