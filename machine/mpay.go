package machine

import (
	"math/big"

	"github.com/tenzro/train/wire"
)

// Pay for work (issue 23; docs/protocol/copies.md §4): what a fragment
// commit's inputs earn and what they cost.
//
//   - An input the commit kept (rejected empty) earns the fragment's size N
//     of payout weight, whether or not the robust rule selected it: Krum
//     selecting one input of M is not evidence against the others, so
//     "selected" is reported, never paid on.
//   - A rejected input earns nothing: a payload that does not parse, decode
//     or bind to its signer, or that a verifier refused.
//   - In a scored run, a kept input drawn for scoring earns N only when its
//     score passes (s_own > 0 and s_own > s_ctl); a failed check earns
//     nothing and forfeits N × 10000 / rate_bps of weight (ScoreForfeit),
//     taken from the trainer's weight at the seal (floored at zero). An
//     input the run's evaluator could not score (score.failed) earns
//     nothing and forfeits nothing. Undrawn kept inputs earn N.
//   - Under the opt-in test run_mean_gain there is no per-check verdict: a
//     scored kept input earns N like an undrawn one and adds its
//     wire.GainPPM to the trainer's run state (GainSumPPM, GainChecks);
//     at the seal a trainer whose mean is below the spec's min_gain_ppm
//     (wire.RunGainPasses) is paid weight 0 (Run.PaidWeight). It is not
//     slashed: RATIONALE "scoring: a run-level verdict, opt-in". An
//     evaluator failure earns nothing and is not counted.
//   - A copy (copy_of set) earns nothing, and is slashed the spec's
//     copies.slash_bps when the input it names was recorded in a strictly
//     earlier block. Within one block the proposer chose the order, so no
//     one is slashed there.
//   - A replay (stale_of_round set: a copy of the same trainer's own input
//     of an earlier round, copies.md §6) earns nothing, is slashed
//     copies.slash_bps like a copy, and forfeits the fragment's N of
//     payout weight: the original's pay is taken back, so replaying one
//     trained gradient earns what training it once would not.
//
// These apply when the commit's round is final (finalizeRound): with a
// challenge window of 0, in the transaction that closes the round.

// settleInputs applies fragment commit fc of round to the trainers' pay and
// stakes.
func (x *mtx) settleInputs(r *Run, round uint64, fc *wire.FragmentCommit) error {
	n := r.Fragments[fc.Fragment].N
	var forfeit *big.Int // what one failed score check of this fragment takes back
	runGain := fc.Scoring != nil && fc.Scoring.Test == wire.ScoreTestRunMeanGain
	for _, in := range fc.Inputs {
		t := r.Trainer(in.TrainerDID)
		if t == nil || in.Rejected != "" {
			continue
		}
		t.Accepted++
		switch sc := in.Score; {
		case sc == nil: // not drawn (or an unscored run): paid as kept
			t.Weight = new(big.Int).Add(bigOf(t.Weight), big.NewInt(n)).String()
		case sc.Failed != "": // the run's evaluator could not score: neither paid nor penalized
		case runGain: // paid as kept; the run's mean decides at the seal
			t.Weight = new(big.Int).Add(bigOf(t.Weight), big.NewInt(n)).String()
			t.GainChecks++
			t.GainSumPPM += wire.GainPPM(sc.OwnBefore, sc.OwnAfter)
		case sc.Pass:
			t.Weight = new(big.Int).Add(bigOf(t.Weight), big.NewInt(n)).String()
		default: // a failed check forfeits k/rate shares
			t.ScoreFails++
			if forfeit == nil { // the spec's k, parsed once per commit
				k := wire.DefaultScoringForfeit
				if sc, err := r.spec.ScoringRef(); err == nil && sc != nil {
					k = sc.Forfeit
				}
				forfeit = ScoreForfeit(n, fc.Scoring.RateBps, k)
			}
			t.Forfeit = new(big.Int).Add(bigOf(t.Forfeit), forfeit).String()
		}
	}
	copiers, err := x.copiers(r.spec.TaskID, round, fc)
	if err != nil {
		return err
	}
	for _, in := range fc.Inputs {
		if in.StaleOfRound == nil {
			continue
		}
		if t := r.Trainer(in.TrainerDID); t != nil {
			t.Forfeit = new(big.Int).Add(bigOf(t.Forfeit), big.NewInt(n)).String()
			if err := x.slash(r, t, r.spec.CopySlashBps(), "replay of its own earlier input"); err != nil {
				return err
			}
		}
	}
	for _, d := range copiers {
		if t := r.Trainer(d); t != nil {
			if err := x.slash(r, t, r.spec.CopySlashBps(), "copy"); err != nil {
				return err
			}
		}
	}
	return nil
}

// ScoreForfeit is the payout weight a failed score check takes back from an
// input of n values at sampling rate rateBps with the spec's forfeit k:
// k × n × 10000 / rateBps (integer division). An input that passes a drawn
// check with probability q then has expected weight per triple
// n·[(1 − p) + p·q − k·(1 − q)] at rate p, negative whenever
// q < (k − 1 + p)/(k + p) (RATIONALE "scoring: a failed check forfeits k/rate
// shares").
func ScoreForfeit(n int64, rateBps, k int) *big.Int {
	if rateBps < 1 {
		rateBps = 1
	}
	if k < 1 {
		k = 1
	}
	num := new(big.Int).Mul(big.NewInt(n), big.NewInt(10000*int64(k)))
	return num.Div(num, big.NewInt(int64(rateBps)))
}

// PaidWeight is a trainer's payout weight at the seal: its weight less what
// failed score checks forfeited, at least zero.
func (t *RunTrainer) PaidWeight() *big.Int {
	w := new(big.Int).Sub(bigOf(t.Weight), bigOf(t.Forfeit))
	if w.Sign() < 0 {
		w.SetInt64(0)
	}
	return w
}

// PaidWeight is trainer t's payout weight at the seal: t.PaidWeight(),
// or 0 when the run's test is run_mean_gain and t's scored checks' mean
// relative own gain is below the spec's min_gain_ppm (wire.RunGainPasses).
// The seal and the view of a running run's accrued rewards both use it.
func (r *Run) PaidWeight(t *RunTrainer) *big.Int {
	w := t.PaidWeight()
	if t.GainChecks == 0 {
		return w
	}
	sc, err := r.spec.ScoringRef() // the posting checked it
	if err == nil && sc != nil && sc.Test == wire.ScoreTestRunMeanGain && !wire.RunGainPasses(t.GainSumPPM, t.GainChecks, sc.MinGainPPM) {
		w.SetInt64(0)
	}
	return w
}

// recordHeights returns the block height of each input's submission record.
func (x *mtx) recordHeights(task string, round uint64, fc *wire.FragmentCommit) (map[string]int64, error) {
	out := make(map[string]int64, len(fc.Inputs))
	for _, in := range fc.Inputs {
		if in.CopyOf == "" {
			continue
		}
		for _, d := range []string{in.TrainerDID, in.CopyOf} {
			if _, ok := out[d]; ok {
				continue
			}
			var rec Record
			ok, err := x.getJSON(KSTranscript, RecordKey(task, round, fc.Fragment, d), &rec)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, Errf(KindInvalid, "commit: copy verdict names %s, which has no record in round %d fragment %d", d, round, fc.Fragment)
			}
			out[d] = rec.Height
		}
	}
	return out, nil
}

// copiers lists the inputs of fc slashed as copies: copy_of names an input
// recorded in a strictly earlier block.
func (x *mtx) copiers(task string, round uint64, fc *wire.FragmentCommit) ([]string, error) {
	h, err := x.recordHeights(task, round, fc)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, in := range fc.Inputs {
		if in.CopyOf != "" && h[in.CopyOf] < h[in.TrainerDID] {
			out = append(out, in.TrainerDID)
		}
	}
	return out, nil
}

// checkCopyVerdicts checks the copy verdicts of a commit against the chain:
// each names another input of the same commit, is on a rejected input, and
// never names an input recorded after its own (the original is the earlier
// record). Whether the two are similar is for re-execution to judge.
func (x *mtx) checkCopyVerdicts(task string, round uint64, fc *wire.FragmentCommit) error {
	in := make(map[string]bool, len(fc.Inputs))
	for _, c := range fc.Inputs {
		in[c.TrainerDID] = true
	}
	for j, c := range fc.Inputs {
		switch {
		case c.CopyOf == "":
			continue
		case c.CopyOf == c.TrainerDID:
			return Errf(KindInvalid, "commit: input %d (%s) is named a copy of itself", j, c.TrainerDID)
		case !in[c.CopyOf]:
			return Errf(KindInvalid, "commit: input %d is named a copy of %s, which is not an input of this fragment", j, c.CopyOf)
		case c.Rejected == "":
			return Errf(KindInvalid, "commit: input %d is a copy of %s but not rejected", j, c.CopyOf)
		}
	}
	h, err := x.recordHeights(task, round, fc)
	if err != nil {
		return err
	}
	for j, c := range fc.Inputs {
		if c.CopyOf != "" && h[c.CopyOf] > h[c.TrainerDID] {
			return Errf(KindInvalid, "commit: input %d (%s, height %d) is named a copy of %s's later record (height %d)", j, c.TrainerDID, h[c.TrainerDID], c.CopyOf, h[c.CopyOf])
		}
	}
	return nil
}

// checkStaleVerdicts checks the stale verdicts of a commit of round against
// the chain (copies.md §6): each is on a rejected input without copy_of and
// names one of the StaleLookbackRounds rounds before round in which the
// same trainer has a record for the same fragment — or, with the input
// sketch on (sketchDim > 0, copies.md §7), any older round whose commit
// gave that trainer's input to the fragment a sketch. Whether the values
// are similar is for re-execution to judge.
func (x *mtx) checkStaleVerdicts(task string, round uint64, sketchDim int, fc *wire.FragmentCommit) error {
	for j, c := range fc.Inputs {
		if c.StaleOfRound == nil {
			continue
		}
		q := *c.StaleOfRound
		switch {
		case c.CopyOf != "":
			return Errf(KindInvalid, "commit: input %d (%s) is named both a copy of %s and a replay of round %d", j, c.TrainerDID, c.CopyOf, q)
		case c.Rejected == "":
			return Errf(KindInvalid, "commit: input %d (%s) is a replay of round %d but not rejected", j, c.TrainerDID, q)
		case q >= round || (round-q > wire.StaleLookbackRounds && sketchDim == 0):
			return Errf(KindInvalid, "commit: input %d (%s) of round %d is named a replay of round %d; the stale rule compares rounds %d..%d only",
				j, c.TrainerDID, round, q, max(int64(round)-wire.StaleLookbackRounds, 0), int64(round)-1)
		case round-q > wire.StaleLookbackRounds:
			ok, err := x.olderSketch(task, q, fc.Fragment, c.TrainerDID)
			if err != nil {
				return err
			}
			if !ok {
				return Errf(KindInvalid, "commit: input %d (%s) is named a replay of round %d, where its input to fragment %d has no sketch", j, c.TrainerDID, q, fc.Fragment)
			}
			continue
		}
		ok, err := x.getJSON(KSTranscript, RecordKey(task, q, fc.Fragment, c.TrainerDID), &Record{})
		if err != nil {
			return err
		}
		if !ok {
			return Errf(KindInvalid, "commit: input %d (%s) is named a replay of round %d, where it has no record for fragment %d", j, c.TrainerDID, q, fc.Fragment)
		}
	}
	return nil
}
