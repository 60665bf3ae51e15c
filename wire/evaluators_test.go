package wire_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSpecEvaluatorFamily: a spec naming a built-in evaluator must be of the
// model family that evaluator scores (the trainer's names and aliases, any
// case); an evaluator named by hash is not tied to a family.
func TestSpecEvaluatorFamily(t *testing.T) {
	hash := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		evaluator, family, want string
	}{
		{"TimesFMScore", "timesfm", ""},
		{"TimesFMScore", "TimesFM-class", ""},
		{"GraniteTTMScore", "granite-ttm", ""},
		{"GraniteTTMScore", "Granite_TTM", ""},
		{"GraniteTTMScore", "ttm", ""},
		{"GraniteTTMScore", "timesfm", `evaluator GraniteTTMScore scores the granite-ttm family, the architecture is family "timesfm"`},
		{"GraniteTTMScore", "chronos-bolt", "scores the granite-ttm family"},
		{"ChronosBoltScore", "chronos-bolt", ""},
		{"ChronosBoltScore", "Chronos_Bolt", ""},
		{"ChronosBoltScore", "chronos", ""},
		{"ChronosBoltScore", "granite-ttm", `evaluator ChronosBoltScore scores the chronos-bolt family, the architecture is family "granite-ttm"`},
		{"TimesFMScore", "chronos-bolt", "scores the timesfm family"},
		{"TimesFMScore", "granite-ttm", `evaluator TimesFMScore scores the timesfm family, the architecture is family "granite-ttm"`},
		{"TimesFMScore", "", "scores the timesfm family"},
		{hash, "chronos-bolt", ""},
		{"OtherScore", "chronos-bolt", ""}, // not a built-in here: the engine resolves it or refuses
	} {
		s := validSpecForCopies(t)
		s.Architecture.Family = tc.family
		s.Scoring = json.RawMessage(`{"evaluator":"` + tc.evaluator + `"}`)
		err := s.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s with family %q: err = %v, want %q", tc.evaluator, tc.family, err, tc.want)
		}
	}
}
