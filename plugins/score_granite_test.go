package plugins

import "testing"

// TestResolveGraniteScorer: the built-in Granite-TTM evaluator resolves by
// name, with the trainer's TINY config as defaults, to the embedded module's
// hash (recorded in docs/protocol/scoring.md §2b); out-of-range parameters
// are refused.
func TestResolveGraniteScorer(t *testing.T) {
	checkResolveScorer(t, "GraniteTTMScore{num_layers=3}", "GraniteTTMScore", "a0b82a6c4d0a2b2b319919a83dc4373bc4a96dbe7c9cd232e4efbd985b0315fd",
		`{"context_len":64,"d_model":16,"decoder_num_layers":1,"horizon":16,"num_layers":3,"patch_len":8}`,
		"GraniteTTMScore{d_model=0}", "GraniteTTMScore{context_len=1}", "GraniteTTMScore{n_heads=4}")
}

// TestGraniteScoreBadInput: a model or configuration the evaluator does not
// implement is refused by the guest with a precise code and text, before
// any loss is computed.
func TestGraniteScoreBadInput(t *testing.T) {
	checkScoreRefusals(t, "granite_odd", []scoreRefusal{
		{"context not longer than the patch", `{"context_len":4}`, "context_len 4 must be greater than patch_len 4", 106},
		{"wrong shape", `{"d_model":12}`, "net.backbone.encoder.patcher.weight has the wrong shape for the parameters (want [12, 4])", 104},
		{"patch count", `{"context_len":27,"horizon":1}`, "patch_mixer.mlp.fc1.weight has the wrong shape", 104},
		{"missing layer", `{"num_layers":3}`, "net.backbone.encoder.mlp_mixer_encoder.mixers.2.patch_mixer.norm.norm.weight is missing", 104},
		{"extra layer", `{"decoder_num_layers":1}`, "net.decoder.decoder_block.mixers.1.feature_mixer.gating_block.attn_layer.bias is not part of the Granite-TTM model", 104},
		{"window length", `{"horizon":6}`, "windows have 28 values, want context_len + horizon = 29", 105},
	})
}

// FuzzGraniteScoreInput is FuzzScoreInput on the ragged Granite-TTM case:
// the evaluator refuses or answers, and never traps.
func FuzzGraniteScoreInput(f *testing.F) { fuzzScoreCase(f, "granite_odd") }
