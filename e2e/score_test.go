package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/internal/scoretest"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// scoredRun is a scored run's files on disk: the TimesFM-class "odd" test
// model of plugins/testdata/score as initial weights, the CSV corpus and
// the spec (TimesFMScore on batches of 4 windows, 2 fragments, 2 trainers,
// one round, the scoring fields in extra) with a challenge window of
// window blocks.
type scoredRun struct {
	spec, weights, corpus string
}

func writeScoredRun(t *testing.T, dir, task string, sponsor *did.Key, window int, scoring string) scoredRun {
	t.Helper()
	sc, err := scoretest.Load(scoring)
	if err != nil {
		t.Fatal(err)
	}
	spec := fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":%s,
 "tier":"Open","aggregation":"Mean","trainer_count":2,"quorum":2,"inner_steps":4,"max_rounds":1,"grace_window_ms":0,
 "reward_pool":"2000000000000000000","dataset_ref":"ipfs://QmScore","dataset_hash":%q,"min_throughput":null,"created_at":1761350400,
 "challenge_window_blocks":%d,"vote_window_blocks":80,"challenge_bond":"200000000000000000","syncer_slash":"5000bps",
 "scoring":%s}`, task, sponsor.DID, sc.Architecture, sc.DatasetHash, window, sc.Scoring)
	r := scoredRun{spec: filepath.Join(dir, task+".json"), weights: filepath.Join(dir, task+"-init.safetensors"), corpus: filepath.Join(dir, task+"-corpus.csv")}
	for p, b := range map[string][]byte{r.spec: []byte(spec), r.weights: sc.Model, r.corpus: sc.Corpus} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// zeroGradient is an all-zero gradient shaped like the fragment weights in w.
func zeroGradient(t *testing.T, w string) []byte {
	t.Helper()
	raw, err := os.ReadFile(w)
	if err != nil {
		t.Fatal(err)
	}
	ts, _, err := safetensors.Parse(raw, safetensors.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	var out []safetensors.Tensor
	for _, x := range ts {
		v, _ := safetensors.F32Values(x)
		out = append(out, safetensors.FromF32(x.Name, x.Shape, make([]float32, len(v))))
	}
	b, err := safetensors.Encode(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// submitScored has trainer i submit every fragment of round through
// validator 3: a pseudo-gradient (gradientFrom), or zeros when zero.
func (c *challengeNet) submitScored(task string, trainer *did.Key, i, round, fragments int, zero bool) {
	c.t.Helper()
	for f := 0; f < fragments; f++ {
		w := filepath.Join(c.dir, fmt.Sprintf("%s-w%d-%d-%d.safetensors", task, i, round, f))
		c.mustCLI(3, "train", "get-weights", "--task-id", task, "--fragment", fmt.Sprint(f), "--out", w)
		g := gradientFrom(c.t, w, i, round, f)
		if zero {
			g = zeroGradient(c.t, w)
		}
		p := filepath.Join(c.dir, fmt.Sprintf("%s-g%d-%d-%d.safetensors", task, i, round, f))
		if err := os.WriteFile(p, g, 0o600); err != nil {
			c.t.Fatal(err)
		}
		c.mustCLI(3, "train", "submit-gradient", "--task-id", task, "--round", fmt.Sprint(round), "--fragment", fmt.Sprint(f), "--payload", p,
			"--key", c.keyFile(trainer))
	}
}

// account is the balance of a ledger account on validator 0.
func (c *challengeNet) account(name string) *big.Int {
	c.t.Helper()
	raw, _ := query(c.t, c.nodes[0], chain.QueryBalanceAcct, name)
	v, ok := new(big.Int).SetString(raw, 10)
	if !ok {
		c.t.Fatalf("balance of %s: %q", name, raw)
	}
	return v
}

// roundCommit is a round's commit as the chain holds it.
func (c *challengeNet) roundCommit(task string, round int) wire.RoundCommit {
	c.t.Helper()
	raw, _ := query(c.t, c.nodes[0], chain.QueryCommit, fmt.Sprintf("%s/%d", task, round))
	var rc wire.RoundCommit
	if err := json.Unmarshal([]byte(raw), &rc); err != nil {
		c.t.Fatalf("round %d commit %q: %v", round, raw, err)
	}
	return rc
}

// TestChallengeWrongScoreFourValidators is issue 23's Must-show, with real
// processes: on 4 validators (the wasm engine: evaluators are plugins) a
// scored run — every input scored by TimesFMScore, one honest trainer and
// one free rider sending zeros — whose first elected syncer commits round 0
// fragment 0 with its first scored input's pay verdict inverted (fault
// build, --fault-wrong-score). The --watch node re-executes the scores and
// challenges; every validator re-executes and votes the same result hash,
// bit for bit (the challenger's); the challenge is upheld, the syncer's
// candidate stake loses exactly the spec's syncer_slash (50 %), it is
// excluded, and the next syncer redoes the fragment on a fresh scoring
// seed. Asserted on chain state: the challenge record, the syncer-stake
// account, the run, the redone round commit's scores.
func TestChallengeWrongScoreFourValidators(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process chain test")
	}
	t0 := time.Now()
	watcher, sponsor := chainKey(t, did.KindHuman, 61), chainKey(t, did.KindHuman, 62)
	honest, rider := chainKey(t, did.KindMachine, 63), chainKey(t, did.KindMachine, 64)
	c := newChallengeNetOn(t, "wasm", []string{"--fault-wrong-score", "0:0"}, watcher, sponsor, honest, rider)
	t.Logf("4 validators and a watcher up after %s", time.Since(t0).Round(time.Millisecond))
	const task = "wrong-score-run"
	// A long challenge window (5 min of 200 ms blocks): the watcher's
	// replay of the redone commit below needs it not final yet.
	sr := writeScoredRun(t, c.dir, task, sponsor, 1500, "")
	c.mustCLI(0, "train", "post-task", "--spec", sr.spec, "--init-weights", sr.weights, "--corpus", sr.corpus, "--key", c.keyFile(sponsor))
	c.waitFor("every candidate's election proof", 60*time.Second, func() bool {
		for _, n := range c.nodes {
			if !logHas(n, "entered a run's syncer election", "task="+task) {
				return false
			}
		}
		return true
	})
	for _, k := range []*did.Key{honest, rider} {
		c.mustCLI(2, "train", "enroll-trainer", "--task-id", task, "--did", k.DID.String(), "--stake", "100000000000000000", "--key", c.keyFile(k))
	}
	c.waitFor("the run starts", 60*time.Second, func() bool { return c.run(task).Status == wire.StatusRunning })
	var view struct {
		Syncer string `json:"syncer"`
	}
	if err := json.Unmarshal([]byte(c.mustCLI(0, "train", "get-run", "--task-id", task, "--format", "json")), &view); err != nil {
		t.Fatal(err)
	}
	stake0 := c.account("syncer-stake:" + view.Syncer)
	if stake0.Sign() == 0 {
		t.Fatalf("the elected syncer %s has no candidate stake", view.Syncer)
	}
	c.submitScored(task, honest, 0, 0, 2, false)
	c.submitScored(task, rider, 1, 0, 2, true)

	var ch wire.ChallengeRecord
	c.waitFor("the wrong score is challenged and decided", 180*time.Second, func() bool {
		chs := c.challenges(task)
		if len(chs) > 0 && chs[0].Outcome != wire.ChallengeOpen {
			ch = chs[0]
			return true
		}
		return false
	})
	if ch.Outcome != wire.ChallengeUpheld || ch.Round != 0 || ch.Fragment != 0 || ch.Challenger != watcher.DID.String() || ch.Syncer != view.Syncer || ch.Ticket != 0 {
		t.Fatalf("challenge: %+v", ch)
	}
	if ch.Claimed == ch.Committed || ch.Result != ch.Claimed {
		t.Fatalf("challenge decided %s: committed %s, claimed %s", ch.Result, ch.Committed, ch.Claimed)
	}
	// Every vote in is the challenger's result hash: the validators'
	// re-executed scores are bit-identical to the watcher's.
	if len(ch.Votes) < 3 {
		t.Fatalf("%d votes, want at least 2/3 of 4", len(ch.Votes))
	}
	for _, v := range ch.Votes {
		if v.Unavailable || v.ResultHash != ch.Claimed {
			t.Fatalf("validator %s voted %s (unavailable %v), the challenger claimed %s", v.Validator, v.ResultHash, v.Unavailable, ch.Claimed)
		}
	}
	// The slash: half the candidate stake (syncer_slash 5000bps), taken
	// from the syncer-stake account.
	want := new(big.Int).Div(new(big.Int).Mul(stake0, big.NewInt(5000)), big.NewInt(10000))
	if ch.SyncerSlashed != want.String() {
		t.Fatalf("slashed %s of a stake of %s, want %s", ch.SyncerSlashed, stake0, want)
	}
	if got := c.account("syncer-stake:" + view.Syncer); new(big.Int).Sub(stake0, got).Cmp(want) != 0 {
		t.Fatalf("syncer stake %s → %s, want %s less", stake0, got, want)
	}
	if r := c.run(task); len(r.Excluded) != 1 || r.Excluded[0] != view.Syncer {
		t.Fatalf("excluded syncers %v, want the slashed %s", r.Excluded, view.Syncer)
	}
	t.Logf("wrong score (height %d) → slash (height %d): %s of block time, %d votes; syncer %s slashed %s",
		ch.CommitHeight, ch.Decided, c.blockTime(ch.Decided).Sub(c.blockTime(ch.CommitHeight)), len(ch.Votes), ch.Syncer, ch.SyncerSlashed)

	// The next syncer redoes round 0 fragment 0: the round's commit on
	// chain scores both inputs of both fragments, fragment 0 on a new seed, each verdict is the pay rule
	// on its losses, and the zero gradient changes no loss and is not paid.
	c.waitFor("round 0 redone", 120*time.Second, func() bool {
		r := c.run(task)
		return r.Round == 1 || len(r.Fragments) == 2 && r.Fragments[0].Closed && r.Fragments[1].Closed
	})
	rc := c.roundCommit(task, 0)
	if len(rc.Fragments) != 2 {
		t.Fatalf("redone round 0: %d fragment commits", len(rc.Fragments))
	}
	for _, fc := range rc.Fragments {
		// Fragment 0 is the next syncer's; fragment 1's honest commit by
		// the first syncer stands (the rollback redoes only the fragment
		// proven wrong).
		if fc.Fragment == 0 && fc.Syncer == view.Syncer || fc.Status != wire.FragAggregated || fc.Scoring == nil || fc.Scoring.Evaluator != "TimesFMScore" || fc.Scoring.RateBps != 10000 {
			t.Fatalf("redone fragment %d: syncer %s status %s scoring %+v", fc.Fragment, fc.Syncer, fc.Status, fc.Scoring)
		}
		if len(fc.Inputs) != 2 {
			t.Fatalf("redone fragment %d: %d inputs", fc.Fragment, len(fc.Inputs))
		}
		for _, in := range fc.Inputs {
			s := in.Score
			if s == nil || s.Failed != "" {
				t.Fatalf("redone fragment %d %s: score %+v", fc.Fragment, in.TrainerDID, s)
			}
			if s.Pass != wire.ScorePassesTest(fc.Scoring.Test, s.OwnBefore.Float(), s.OwnAfter.Float(), s.CtlBefore.Float(), s.CtlAfter.Float()) {
				t.Fatalf("redone fragment %d %s: pass %v disagrees with its losses %+v", fc.Fragment, in.TrainerDID, s.Pass, s)
			}
			if in.TrainerDID == rider.DID.String() && (s.Pass || s.OwnBefore != s.OwnAfter || s.CtlBefore != s.CtlAfter) {
				t.Fatalf("redone fragment %d: the zero gradient scored %+v", fc.Fragment, s)
			}
			if b := s.OwnBefore.Float(); math.IsNaN(b) || b <= 0 {
				t.Fatalf("redone fragment %d: loss before %v", fc.Fragment, b)
			}
		}
	}
	// rc.Fragments is in commit order: fragment 1's commit stood, so the
	// redone fragment 0 may come after it.
	f0 := -1
	for i := range rc.Fragments {
		if rc.Fragments[i].Fragment == 0 {
			f0 = i
		}
	}
	if f0 < 0 {
		t.Fatalf("redone round 0 has no fragment 0 commit: %+v", rc.Fragments)
	}
	redone := wire.FragmentResultHash(&rc.Fragments[f0])
	if redone == ch.Committed || redone == ch.Claimed {
		t.Fatalf("the redone fragment 0 (%s) has the rolled-back commit's scores (committed %s, claimed %s): not a new seed", redone, ch.Committed, ch.Claimed)
	}
	// The watcher re-executes the redone commit and agrees (once its own
	// chain state has the redone commit: it may lag the validators).
	// Until then its replay is refused ("no challengeable commit": the
	// fragment is still the discarded one there), so a refusal is retried.
	var rf wire.ReplayFragmentResult
	last := ""
	c.waitFor("the watcher holds the redone commit", 60*time.Second, func() bool {
		rf = wire.ReplayFragmentResult{}
		out, err := c.cli(-1, "receipt", "replay", "--task-id", task, "--round", "0", "--fragment", "0", "--format", "json")
		if err != nil {
			if msg := strings.TrimSpace(out); msg != last {
				t.Logf("the watcher's replay, not yet: %v: %s", err, msg)
				last = msg
			}
			return false
		}
		if json.Unmarshal([]byte(out), &rf) != nil {
			return false
		}
		if msg := fmt.Sprintf("committed %s", rf.Committed); rf.Committed != redone && msg != last {
			t.Logf("the watcher's replay, not yet: %s, want %s", msg, redone)
			last = msg
		}
		return rf.Committed == redone
	})
	if !rf.Agrees || rf.Result != redone {
		t.Fatalf("the watcher's replay of the redone fragment: %+v, chain has %s", rf, redone)
	}
	t.Logf("done after %s", time.Since(t0).Round(time.Millisecond))
}
