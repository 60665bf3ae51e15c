package machine

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// scoredRun is a one-fragment run of N=100 values scored at rateBps, with
// trainers A..F and the fragment's seed drawn.
func scoredRun(rateBps int) *Run {
	spec := &wire.TaskSpec{TaskID: "t", Quorum: 2,
		Scoring: json.RawMessage(`{"evaluator":"TimesFMScore","rate_bps":` + itoa(rateBps) + `,"batch":4,"corpus":"` + wire.SHA256([]byte("c")).String() + `"}`)}
	seed := wire.SHA256([]byte("seed"))
	r := &Run{spec: spec, Scorer: &RuleRef{Name: "TimesFMScore", Hash: wire.SHA256([]byte("ev")), Params: json.RawMessage(`{"horizon":3}`)},
		Fragments: []*RunFragment{{FragLayout: FragLayout{N: 100}, ScoreSeed: &seed}}}
	for _, d := range []string{"A", "B", "C", "D", "E", "F"} {
		r.Trainers = append(r.Trainers, &RunTrainer{DID: d, Status: wire.TrainerActive})
	}
	return r
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// scoredCommit is a commit of r's fragment 0 whose inputs carry a passing
// score exactly where the draw wants one.
func scoredCommit(r *Run) *wire.FragmentCommit {
	fc := &wire.FragmentCommit{Status: wire.FragAggregated, Scoring: r.ScoringOf(0)}
	for _, d := range []string{"A", "B", "C", "D", "E", "F"} {
		in := wire.CommitInput{TrainerDID: d}
		if r.ScoreWanted(0, fc.Status, &in) {
			in.Score = &wire.InputScore{OwnBefore: wire.F64Of(1), OwnAfter: wire.F64Of(0.5), CtlBefore: wire.F64Of(1), CtlAfter: wire.F64Of(1), Pass: true}
		}
		fc.Inputs = append(fc.Inputs, in)
	}
	return fc
}

// TestCheckScores: the chain requires a score on exactly the kept inputs
// its draw picked, the run's evaluator and the fragment's seed.
func TestCheckScores(t *testing.T) {
	half := scoredRun(5000)
	drawn, undrawn := -1, -1
	for j, in := range scoredCommit(half).Inputs {
		if in.Score != nil && drawn < 0 {
			drawn = j
		}
		if in.Score == nil && undrawn < 0 {
			undrawn = j
		}
	}
	if drawn < 0 || undrawn < 0 {
		t.Fatalf("the draw at 5000 bps picked all or none of 6 (drawn %d, undrawn %d)", drawn, undrawn)
	}
	for _, tc := range []struct {
		name string
		r    *Run
		mut  func(*wire.FragmentCommit)
		err  string
	}{
		{"every input at rate 1", scoredRun(10000), func(*wire.FragmentCommit) {}, ""},
		{"the draw at half", half, func(*wire.FragmentCommit) {}, ""},
		{"drawn input without a score", half, func(c *wire.FragmentCommit) { c.Inputs[drawn].Score = nil }, "drawn for scoring and has no score"},
		{"undrawn input with a score", half, func(c *wire.FragmentCommit) { c.Inputs[undrawn].Score = &wire.InputScore{} }, "not a kept input drawn"},
		{"rejected input with a score", scoredRun(10000), func(c *wire.FragmentCommit) { c.Inputs[0].Rejected = "bad" }, "not a kept input drawn"},
		{"rejected input without", scoredRun(10000), func(c *wire.FragmentCommit) { c.Inputs[0].Rejected, c.Inputs[0].Score = "bad", nil }, ""},
		{"no scoring header", scoredRun(10000), func(c *wire.FragmentCommit) { c.Scoring = nil }, "has no scoring"},
		{"another seed", scoredRun(10000), func(c *wire.FragmentCommit) { c.Scoring.Seed[0] ^= 1 }, "is not the run's"},
		{"another evaluator", scoredRun(10000), func(c *wire.FragmentCommit) { c.Scoring.Hash[0] ^= 1 }, "is not the run's"},
		{"another rate", scoredRun(10000), func(c *wire.FragmentCommit) { c.Scoring.RateBps = 5000 }, "is not the run's"},
		{"scores on a no-quorum commit", scoredRun(10000), func(c *wire.FragmentCommit) { c.Status = wire.FragNoQuorum }, "carries no scores"},
		{"a failure with losses", scoredRun(10000), func(c *wire.FragmentCommit) { c.Inputs[1].Score.Failed = "x" }, "zero losses"},
		{"a failure", scoredRun(10000), func(c *wire.FragmentCommit) { c.Inputs[1].Score = &wire.InputScore{Failed: "out of fuel"} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := scoredCommit(tc.r)
			tc.mut(c)
			err := tc.r.checkScores(0, c)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
	// An unscored run: no scoring, no scores.
	plain := scoredRun(10000)
	plain.Scorer = nil
	if err := plain.checkScores(0, &wire.FragmentCommit{Status: wire.FragAggregated, Inputs: []wire.CommitInput{{TrainerDID: "A"}}}); err != nil {
		t.Fatal(err)
	}
	if err := plain.checkScores(0, scoredCommit(scoredRun(10000))); err == nil {
		t.Fatal("an unscored run took a scored commit")
	}
	// Before the seed: nothing is wanted yet (commitFragment refuses the
	// commit itself).
	noSeed := scoredRun(10000)
	noSeed.Fragments[0].ScoreSeed = nil
	if noSeed.ScoringOf(0) != nil {
		t.Fatal("scoring header without a seed")
	}
}

// TestSettleScores: a passing score earns N, a failed check earns nothing
// and forfeits k × N × 10000 / rate (k = 3 by default), an evaluator failure neither, an undrawn
// input N; the seal pays max(0, weight − forfeit).
func TestSettleScores(t *testing.T) {
	x := NewMachine(MachineConfig{}).begin(context.Background(), emptyKV{}, Block{Height: 10})
	r := scoredRun(2500)
	fc := &wire.FragmentCommit{Status: wire.FragAggregated, Scoring: r.ScoringOf(0), Inputs: []wire.CommitInput{
		{TrainerDID: "A", Score: &wire.InputScore{Pass: true}},
		{TrainerDID: "B", Score: &wire.InputScore{Pass: false}},
		{TrainerDID: "C", Score: &wire.InputScore{Failed: "out of fuel"}},
		{TrainerDID: "D"},
		{TrainerDID: "E", Rejected: "not finite"},
	}}
	for round := uint64(0); round < 4; round++ {
		if err := x.settleInputs(r, round, fc); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][3]string{ // weight, forfeit, paid weight
		"A": {"400", "", "400"},
		"B": {"", "4800", "0"},
		"C": {"", "", "0"},
		"D": {"400", "", "400"},
		"E": {"", "", "0"},
	}
	for d, w := range want {
		tr := r.Trainer(d)
		if tr.Weight != w[0] || tr.Forfeit != w[1] || tr.PaidWeight().String() != w[2] {
			t.Errorf("%s: weight %q forfeit %q paid weight %s, want %v", d, tr.Weight, tr.Forfeit, tr.PaidWeight(), w)
		}
	}
	if r.Trainer("B").ScoreFails != 4 || r.Trainer("A").ScoreFails != 0 {
		t.Fatalf("score fails: B %d, A %d", r.Trainer("B").ScoreFails, r.Trainer("A").ScoreFails)
	}
	// Expected value at rate p of an input that always fails when drawn:
	// (1 − p)·N − p·N/p = −p·N < 0 per triple.
	b := &RunTrainer{Weight: "300", Forfeit: "400"} // 3 undrawn, 1 drawn of 4 at rate 1/4
	if b.PaidWeight().Sign() != 0 {
		t.Fatal("a negative net weight is paid")
	}
	if got := ScoreForfeit(100, 3, 1); got.String() != "333333" {
		t.Fatalf("ScoreForfeit(100, 3 bps) = %s", got)
	}
	// A free rider that passes drawn checks by chance half the time (noise
	// at the honest norm, bench/results/freeriders): at rate 1 with k = 1 it
	// nets zero, with the default k = 3 it loses; an honest trainer that
	// always passes keeps everything.
	for _, tc := range []struct {
		pass, fail int64
		k          int
		want       int64
	}{
		{1, 1, 1, 0},
		{1, 1, wire.DefaultScoringForfeit, 0}, // floored at zero: −2N
		{3, 1, wire.DefaultScoringForfeit, 0},
		{4, 1, wire.DefaultScoringForfeit, 100},
		{6, 0, wire.DefaultScoringForfeit, 600},
	} {
		tr := &RunTrainer{Weight: fmt.Sprint(100 * tc.pass), Forfeit: new(big.Int).Mul(ScoreForfeit(100, 10000, tc.k), big.NewInt(tc.fail)).String()}
		if got := tr.PaidWeight().Int64(); got != tc.want {
			t.Errorf("%d passed, %d failed, k=%d: paid weight %d, want %d", tc.pass, tc.fail, tc.k, got, tc.want)
		}
	}
}

// runGainRun is scoredRun under test run_mean_gain with spec fields extra
// (e.g. `,"min_gain_ppm":150000`).
func runGainRun(rateBps int, extra string) *Run {
	r := scoredRun(rateBps)
	r.spec.Scoring = json.RawMessage(`{"evaluator":"TimesFMScore","rate_bps":` + itoa(rateBps) + `,"batch":4,"corpus":"` +
		wire.SHA256([]byte("c")).String() + `","test":"run_mean_gain"` + extra + `}`)
	return r
}

// lossScore is a scored check from own_before to own_after (the control
// losses do not matter under run_mean_gain), with pass the recorded
// own_improves verdict.
func lossScore(ob, oa float64) *wire.InputScore {
	return &wire.InputScore{OwnBefore: wire.F64Of(ob), OwnAfter: wire.F64Of(oa), CtlBefore: wire.F64Of(1), CtlAfter: wire.F64Of(1), Pass: ob-oa > 0}
}

// TestSettleRunMeanGain: under run_mean_gain a scored kept input earns N
// whatever its check says, nothing is forfeited, each scored (not failed)
// check adds its GainPPM, and the seal's paid weight is 0 for a trainer
// whose mean is below min_gain_ppm — compared as integers.
func TestSettleRunMeanGain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		extra     string
		rate      int
		rounds    []*wire.InputScore // one input per round for trainer A; nil = not drawn
		checks    uint64
		sum       int64
		weight    string
		paid      int64
		wantFails uint64
	}{
		{"honest passes", "", 10000, []*wire.InputScore{lossScore(1, 0.8), lossScore(1, 0.75), lossScore(1, 0.9), lossScore(1, 1.05)},
			4, 199999 + 250000 + 99999 - 50000, "400", 400, 0}, // 1 − 0.8 is 0.19999999999999996 in f64
		{"one false failure does not cost an honest trainer", "", 10000, []*wire.InputScore{lossScore(1, 0.7), lossScore(1, 0.7), lossScore(1, 1.01), lossScore(1, 0.7)},
			4, 3*300000 - 10000, "400", 400, 0},
		{"noise fails the run", "", 10000, []*wire.InputScore{lossScore(1, 0.99), lossScore(1, 1.005), lossScore(1, 0.99), lossScore(1, 0.996)},
			4, 10000 - 4999 + 10000 + 4000, "400", 0, 0},
		{"zeros fail the run", "", 10000, []*wire.InputScore{lossScore(1, 1), lossScore(2, 2), lossScore(1, 1), lossScore(3, 3)},
			4, 0, "400", 0, 0},
		{"threshold 0 pays a zero mean", `,"min_gain_ppm":0`, 10000, []*wire.InputScore{lossScore(1, 1), lossScore(1, 1)},
			2, 0, "200", 200, 0},
		{"exactly the threshold passes", `,"min_gain_ppm":250000`, 10000, []*wire.InputScore{lossScore(1, 0.75), lossScore(2, 1.5)},
			2, 500000, "200", 200, 0},
		{"one ppm short fails", `,"min_gain_ppm":250001`, 10000, []*wire.InputScore{lossScore(1, 0.75), lossScore(2, 1.5)},
			2, 500000, "200", 0, 0},
		{"never scored is paid as kept", "", 10000, []*wire.InputScore{nil, nil, nil},
			0, 0, "300", 300, 0},
		{"rate < 1: undrawn inputs paid, the drawn ones decide", "", 2500, []*wire.InputScore{nil, lossScore(1, 0.98), nil, nil},
			1, 20000, "400", 0, 0},
		{"rate < 1: one good drawn check pays all", "", 2500, []*wire.InputScore{nil, nil, lossScore(1, 0.8), nil},
			1, 199999, "400", 400, 0},
		{"a failed-to-score check is not counted", "", 10000, []*wire.InputScore{lossScore(1, 0.8), {Failed: "out of fuel"}, {Failed: "out of fuel"}},
			1, 199999, "100", 100, 0},
		{"only failures: never scored", "", 10000, []*wire.InputScore{{Failed: "out of fuel"}},
			0, 0, "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := NewMachine(MachineConfig{}).begin(context.Background(), emptyKV{}, Block{Height: 10})
			r := runGainRun(tc.rate, tc.extra)
			for round, sc := range tc.rounds {
				fc := &wire.FragmentCommit{Status: wire.FragAggregated, Scoring: r.ScoringOf(0), Inputs: []wire.CommitInput{
					{TrainerDID: "A", Score: sc},
					{TrainerDID: "B"},
					{TrainerDID: "E", Rejected: "not finite"},
				}}
				if fc.Scoring.Test != wire.ScoreTestRunMeanGain {
					t.Fatalf("commit test %q", fc.Scoring.Test)
				}
				if err := x.settleInputs(r, uint64(round), fc); err != nil {
					t.Fatal(err)
				}
			}
			a := r.Trainer("A")
			if a.GainChecks != tc.checks || a.GainSumPPM != tc.sum || a.Weight != tc.weight || a.Forfeit != "" || a.ScoreFails != tc.wantFails {
				t.Fatalf("A: checks %d sum %d weight %q forfeit %q fails %d, want %d %d %q \"\" %d",
					a.GainChecks, a.GainSumPPM, a.Weight, a.Forfeit, a.ScoreFails, tc.checks, tc.sum, tc.weight, tc.wantFails)
			}
			if got := r.PaidWeight(a).Int64(); got != tc.paid {
				t.Fatalf("A: paid weight %d, want %d", got, tc.paid)
			}
			if got := r.PaidWeight(r.Trainer("B")).Int64(); got != int64(100*len(tc.rounds)) {
				t.Fatalf("B (never drawn): paid weight %d", got)
			}
			if r.Trainer("E").GainChecks != 0 || r.PaidWeight(r.Trainer("E")).Sign() != 0 {
				t.Fatal("a rejected input counted")
			}
		})
	}
}

// TestRunMeanGainOnlyUnderItsTest: the same scores under the default test
// keep the per-check rule (no gain state, failed checks forfeit), so a run
// without run_mean_gain settles exactly as before; and the commit's
// scoring header names the test.
func TestRunMeanGainOnlyUnderItsTest(t *testing.T) {
	x := NewMachine(MachineConfig{}).begin(context.Background(), emptyKV{}, Block{Height: 10})
	r := scoredRun(10000)
	if sc := r.ScoringOf(0); sc.Test != "" {
		t.Fatalf("default test in the header: %q", sc.Test)
	}
	fc := &wire.FragmentCommit{Status: wire.FragAggregated, Scoring: r.ScoringOf(0), Inputs: []wire.CommitInput{
		{TrainerDID: "A", Score: lossScore(1, 0.8)}, {TrainerDID: "B", Score: lossScore(1, 1.01)}}}
	if err := x.settleInputs(r, 0, fc); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"A", "B"} {
		if tr := r.Trainer(d); tr.GainChecks != 0 || tr.GainSumPPM != 0 {
			t.Fatalf("%s: gain state %d/%d under own_improves", d, tr.GainChecks, tr.GainSumPPM)
		}
	}
	if r.Trainer("B").Forfeit != "300" || r.PaidWeight(r.Trainer("A")).Int64() != 100 {
		t.Fatalf("per-check rule changed: B forfeit %q, A paid %s", r.Trainer("B").Forfeit, r.PaidWeight(r.Trainer("A")))
	}
	b, err := json.Marshal(r.Trainer("A"))
	if err != nil || strings.Contains(string(b), "gain") {
		t.Fatalf("gain fields in another test's state: %s %v", b, err)
	}
	if sc := runGainRun(10000, "").ScoringOf(0); sc.Test != wire.ScoreTestRunMeanGain {
		t.Fatalf("run_mean_gain header test %q", sc.Test)
	}
}
