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
