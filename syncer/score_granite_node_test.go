package syncer_test

import (
	"testing"

	"github.com/tenzro/train/internal/scoretest"
)

// TestScoredRunGraniteTTM: runScoredModel with the ragged Granite-TTM model
// of plugins/testdata/score (granite_odd) scored by the built-in
// GraniteTTMScore.
func TestScoredRunGraniteTTM(t *testing.T) {
	runScoredModel(t, scoretest.Model{Path: "../plugins/testdata/score/granite_odd/model.safetensors", Family: "granite-ttm", Evaluator: "GraniteTTMScore",
		Params: `{"context_len":23,"horizon":5,"patch_len":4,"d_model":10,"num_layers":2,"decoder_num_layers":2}`})
}
