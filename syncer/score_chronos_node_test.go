package syncer_test

import (
	"testing"

	"github.com/tenzro/train/internal/scoretest"
)

// TestScoredRunChronosBolt: runScoredModel with the ragged Chronos-Bolt model
// of plugins/testdata/score (chronos_odd) scored by the built-in
// ChronosBoltScore.
func TestScoredRunChronosBolt(t *testing.T) {
	runScoredModel(t, scoretest.Model{Path: "../plugins/testdata/score/chronos_odd/model.safetensors", Family: "chronos-bolt", Evaluator: "ChronosBoltScore",
		Params: `{"context_len":23,"horizon":5,"patch_len":4,"d_model":10,"d_ff":14,"num_layers":2,"num_decoder_layers":2,"num_heads":3,"d_kv":5}`})
}
