package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tenzro/train/syncer"
)

// TestResolveGraniteScorer: the built-in Granite-TTM evaluator resolves by
// name, with the trainer's TINY config as defaults, to the embedded module's
// hash (recorded in docs/protocol/scoring.md §2b); out-of-range parameters
// are refused.
func TestResolveGraniteScorer(t *testing.T) {
	e := testEngine(t)
	rr, err := e.ResolveScorer(context.Background(), "GraniteTTMScore{num_layers=3}", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Name != "GraniteTTMScore" || rr.Hash.String() != "a0b82a6c4d0a2b2b319919a83dc4373bc4a96dbe7c9cd232e4efbd985b0315fd" {
		t.Errorf("resolved %s %s", rr.Name, rr.Hash)
	}
	if want := `{"context_len":64,"d_model":16,"decoder_num_layers":1,"horizon":16,"num_layers":3,"patch_len":8}`; string(rr.Params) != want {
		t.Errorf("params %s, want %s", rr.Params, want)
	}
	for _, bad := range []string{"GraniteTTMScore{d_model=0}", "GraniteTTMScore{context_len=1}", "GraniteTTMScore{n_heads=4}"} {
		if _, err := e.ResolveScorer(context.Background(), bad, nil); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// TestGraniteScoreBadInput: a model or configuration the evaluator does not
// implement is refused by the guest with a precise code and text, before
// any loss is computed.
func TestGraniteScoreBadInput(t *testing.T) {
	e := testEngine(t)
	base := loadScoreCase(t, "granite_odd")
	odd := func(mod string) json.RawMessage {
		p := map[string]int{"context_len": 23, "horizon": 5, "patch_len": 4, "d_model": 10, "num_layers": 2, "decoder_num_layers": 2}
		_ = json.Unmarshal([]byte(mod), &p)
		b, _ := json.Marshal(p)
		return b
	}
	for _, tc := range []struct {
		name, params, want string
		code               uint32
	}{
		{"context not longer than the patch", `{"context_len":4}`, "context_len 4 must be greater than patch_len 4", 106},
		{"wrong shape", `{"d_model":12}`, "net.backbone.encoder.patcher.weight has the wrong shape for the parameters (want [12, 4])", 104},
		{"patch count", `{"context_len":27,"horizon":1}`, "patch_mixer.mlp.fc1.weight has the wrong shape", 104},
		{"missing layer", `{"num_layers":3}`, "net.backbone.encoder.mlp_mixer_encoder.mixers.2.patch_mixer.norm.norm.weight is missing", 104},
		{"extra layer", `{"decoder_num_layers":1}`, "net.decoder.decoder_block.mixers.1.feature_mixer.gating_block.attn_layer.bias is not part of the Granite-TTM model", 104},
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

// FuzzGraniteScoreInput is FuzzScoreInput on the ragged Granite-TTM case:
// the evaluator refuses or answers, and never traps.
func FuzzGraniteScoreInput(f *testing.F) { fuzzScoreCase(f, "granite_odd") }
