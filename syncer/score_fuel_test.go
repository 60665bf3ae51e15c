package syncer_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tenzro/train/internal/scoretest"
	"github.com/tenzro/train/wire"
)

// TestScoredRunFuelBudget: the spec's scoring.fuel is the budget of every
// score call of the run, on the syncer that commits and on a validator that
// re-executes. The scored "odd" TimesFM run needs ≈3.1·10⁶ fuel per scored
// input (2 batches of 4 windows; plugins TestScoreGolden): under
// "fuel":1000000 every drawn input records the same out-of-fuel evaluator
// failure — on the syncer's compiled engine and on validator 1's wazero
// interpreter, bit for bit — while every node's engine budget (5·10¹⁰) would
// have scored it; under "fuel":100000000 the same run scores every input.
func TestScoredRunFuelBudget(t *testing.T) {
	for _, tc := range []struct {
		name, scoring string
		failed        string // the recorded failure; "" = scored
	}{
		{"too small", `"rate_bps":10000,"fuel":1000000`, "out of fuel (budget 1000000)"},
		{"enough", `"rate_bps":10000,"fuel":100000000`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newScoredCNetOf(t, scoretest.TimesFM, tc.scoring, true)
			tr := c.commitRoundZero(t)
			for _, fc := range tr[0].Fragments {
				if fc.Status != wire.FragAggregated || fc.Scoring == nil || len(fc.Inputs) != 2 {
					t.Fatalf("fragment %d: status %s scoring %+v, %d inputs", fc.Fragment, fc.Status, fc.Scoring, len(fc.Inputs))
				}
				for _, in := range fc.Inputs {
					at := fmt.Sprintf("fragment %d %s", fc.Fragment, in.TrainerDID)
					if tc.failed == "" {
						checkInputScore(t, at, fc.Scoring, in, "")
						continue
					}
					if in.Score == nil || !strings.Contains(in.Score.Failed, tc.failed) || in.Score.Pass {
						t.Fatalf("%s: score %+v, want the failure %q", at, in.Score, tc.failed)
					}
				}
				// Validator 1 runs wazero's interpreter: the same scores (or
				// failures) and result hash, bit for bit.
				re, err := c.vals[1].Reexecute(c.ctx, c.task, 0, int(fc.Fragment))
				if err != nil || !re.Agrees() {
					t.Fatalf("fragment %d: a validator re-executing: %+v %v", fc.Fragment, re, err)
				}
				for k, in := range re.Commit.Inputs {
					if in.Score == nil || *in.Score != *fc.Inputs[k].Score {
						t.Fatalf("fragment %d input %d: re-executed score %+v, committed %+v", fc.Fragment, k, in.Score, fc.Inputs[k].Score)
					}
				}
			}
		})
	}
}
