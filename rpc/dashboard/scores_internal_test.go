package dashboard

import (
	"testing"

	"github.com/tenzro/train/wire"
)

// TestScoreTexts: the trainers table's scores column summarizes each
// trainer's scored inputs across committed rounds; a run without scoring
// says so.
func TestScoreTexts(t *testing.T) {
	sc := func(ob, oa float64, pass bool) *wire.InputScore {
		return &wire.InputScore{OwnBefore: wire.F64Of(ob), OwnAfter: wire.F64Of(oa), CtlBefore: wire.F64Of(1), CtlAfter: wire.F64Of(1), Pass: pass}
	}
	scored := []wire.RoundCommit{
		{Fragments: []wire.FragmentCommit{{Scoring: &wire.CommitScoring{Evaluator: "TimesFMScore"}, Inputs: []wire.CommitInput{
			{TrainerDID: "a", Score: sc(1.0, 0.9, true)},
			{TrainerDID: "z", Score: sc(1.0, 1.0, false)},
			{TrainerDID: "u"}, // not drawn
		}}}},
		{Fragments: []wire.FragmentCommit{{Scoring: &wire.CommitScoring{Evaluator: "TimesFMScore"}, Inputs: []wire.CommitInput{
			{TrainerDID: "a", Score: sc(1.0, 0.7, true)},
			{TrainerDID: "z", Score: &wire.InputScore{Failed: "fuel"}},
		}}}},
	}
	for _, tc := range []struct {
		name string
		tr   []wire.RoundCommit
		did  string
		want string
	}{
		{"two passes", scored, "a", "2/2 passed, Δown +2.00e-01"},
		{"a zero gradient and an evaluator failure", scored, "z", "0/1 passed, Δown +0.00e+00, 1 not scorable"},
		{"never drawn", scored, "u", "–"},
		{"unscored run", []wire.RoundCommit{{Fragments: []wire.FragmentCommit{{Inputs: []wire.CommitInput{{TrainerDID: "a"}}}}}}, "a", "unscored"},
		{"no commit yet", nil, "a", "unscored"},
	} {
		if got := scoreTexts(tc.tr)(tc.did); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
