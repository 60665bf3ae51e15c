package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tenzro/train/syncer"
)

// TestResolveChronosScorer: the built-in Chronos-Bolt evaluator resolves by
// name, with the trainer's TINY config as defaults, to the embedded module's
// hash (recorded in docs/protocol/scoring.md §2c); out-of-range and unknown
// parameters are refused.
func TestResolveChronosScorer(t *testing.T) {
	e := testEngine(t)
	rr, err := e.ResolveScorer(context.Background(), "ChronosBoltScore{num_heads=4}", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Name != "ChronosBoltScore" || rr.Hash.String() != "5e12457e851c19d76d923a0bc3a42c8e05f4508d4de4e690ca291f2bba1d5e9d" {
		t.Errorf("resolved %s %s", rr.Name, rr.Hash)
	}
	if want := `{"context_len":64,"d_ff":64,"d_kv":16,"d_model":32,"horizon":16,"num_decoder_layers":1,"num_heads":4,"num_layers":1,"patch_len":8}`; string(rr.Params) != want {
		t.Errorf("params %s, want %s", rr.Params, want)
	}
	for _, bad := range []string{"ChronosBoltScore{d_model=0}", "ChronosBoltScore{num_layers=0}", "ChronosBoltScore{d_kv=5000}", "ChronosBoltScore{n_heads=4}"} {
		if _, err := e.ResolveScorer(context.Background(), bad, nil); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// TestChronosScoreBadInput: a model or configuration the evaluator does not
// implement is refused by the guest with a precise code and text, before
// any loss is computed.
func TestChronosScoreBadInput(t *testing.T) {
	e := testEngine(t)
	base := loadScoreCase(t, "chronos_odd")
	odd := func(mod string) json.RawMessage {
		p := map[string]int{"context_len": 23, "horizon": 5, "patch_len": 4, "d_model": 10, "d_ff": 14, "num_layers": 2,
			"num_decoder_layers": 2, "num_heads": 3, "d_kv": 5}
		_ = json.Unmarshal([]byte(mod), &p)
		b, _ := json.Marshal(p)
		return b
	}
	for _, tc := range []struct {
		name, params, want string
		code               uint32
	}{
		{"d_model", `{"d_model":12}`, "tensor net.shared.weight has the wrong shape for the parameters (want [2, 12])", 104},
		{"d_ff", `{"d_ff":16}`, "tensor net.input_patch_embedding.hidden_layer.weight has the wrong shape for the parameters (want [16, 8])", 104},
		{"patch_len", `{"patch_len":8}`, "net.input_patch_embedding.hidden_layer.weight has the wrong shape for the parameters (want [14, 16])", 104},
		{"heads of the same inner width", `{"num_heads":5,"d_kv":3}`, "net.encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight has the wrong shape for the parameters (want [32, 5])", 104},
		{"horizon", `{"context_len":24,"horizon":4}`, "net.output_patch_embedding.output_layer.weight has the wrong shape for the parameters (want [36, 14])", 104},
		{"missing layer", `{"num_layers":3}`, "tensor net.encoder.block.2.layer.0.layer_norm.weight is missing", 104},
		{"extra layer", `{"num_decoder_layers":1}`, "tensor net.decoder.block.1.layer.0.SelfAttention.k.weight is not part of the Chronos-Bolt model", 104},
		{"window length", `{"horizon":6}`, "windows have 28 values, want context_len + horizon = 29", 105},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base.in
			in.Evaluator.Params = odd(tc.params)
			_, err := e.Score(context.Background(), in)
			var rf *syncer.RuleFailure
			if !errors.As(err, &rf) || rf.Code != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want code %d %q", err, tc.code, tc.want)
			}
		})
	}
}

// FuzzChronosScoreInput is FuzzScoreInput on the ragged Chronos-Bolt case:
// the evaluator refuses or answers, and never traps.
func FuzzChronosScoreInput(f *testing.F) { fuzzScoreCase(f, "chronos_odd") }

// TestChronosScoreBiasStep: a gradient on the encoder's relative position
// bias table alone changes the loss — the table is read from the stepped
// weights, not kept from before the step — and leaves the losses before the
// step as the full gradient's call computes them, bit for bit.
func TestChronosScoreBiasStep(t *testing.T) {
	e := testEngine(t)
	c := loadScoreCase(t, "chronos_long")
	full, err := e.Score(context.Background(), c.in)
	if err != nil {
		t.Fatal(err)
	}
	in := c.in
	in.Gradient = make([]byte, len(c.in.Gradient))
	base := c.offs[in.FragFirst]
	found := false
	for i := in.FragFirst; i < in.FragFirst+in.FragCount; i++ {
		if strings.HasSuffix(c.tensors[i].Name, ".relative_attention_bias.weight") {
			copy(in.Gradient[c.offs[i]-base:c.offs[i+1]-base], c.in.Gradient[c.offs[i]-base:c.offs[i+1]-base])
			found = true
		}
	}
	if !found {
		t.Fatal("chronos_long's fragment has no relative_attention_bias tensor")
	}
	out, err := e.Score(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range out.Before {
		if out.Before[i] != full.Before[i] {
			t.Errorf("batch %d: loss before %v, the full gradient's call %v", i, out.Before[i], full.Before[i])
		}
		if out.After[i] == out.Before[i] {
			t.Errorf("batch %d: a step of the bias table left the loss at %v", i, out.Before[i])
		}
	}
}
