package syncer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/internal/scoretest"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// newScoredCNet is the challenge network (2 syncer candidates, 4
// validators, the first watching, 2 trainers) running a scored run: the
// TimesFM-class "odd" model of plugins/testdata/score, every input scored
// (rate 10000) by TimesFMScore on batches of 4 windows of a CSV corpus.
// Every node has its own plugin engine; validator 1's runs wazero's
// interpreter.
func newScoredCNet(t *testing.T) *cnet { return newScoredCNetWith(t, `"rate_bps":10000`) }

// newScoredCNetWith is newScoredCNet with more members of the spec's
// scoring field (rate_bps, forfeit, test).
func newScoredCNetWith(t *testing.T, scoring string) *cnet {
	c, _ := newScoredCNetOf(t, scoretest.TimesFM, scoring, true)
	return c
}

// newScoredCNetOf is the challenge network of newScoredCNet running a
// scored run of model m (scoretest.LoadModel; scoring as for
// newScoredCNetWith). With interp, validator 1 runs its own engine on
// wazero's interpreter and the other nodes share one compiled engine;
// without, every node shares the compiled one. It also gives the compiled
// engine.
func newScoredCNetOf(t *testing.T, m scoretest.Model, scoring string, interp bool) (*cnet, *plugins.Engine) {
	t.Helper()
	ctx := context.Background()
	if scoring != "" {
		scoring = "," + scoring
	}
	sc, err := scoretest.LoadModel(m, scoring)
	if err != nil {
		t.Fatal(err)
	}
	var engines [2]*plugins.Engine
	get := func(i int) *plugins.Engine {
		if engines[i] == nil {
			e, err := plugins.NewEngine(ctx, plugins.Config{Interpreter: i == 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close(ctx) })
			engines[i] = e
		}
		return engines[i]
	}
	arch, extra := string(sc.Architecture), `,"scoring":`+string(sc.Scoring)
	c := newCNetWith(t, cnetOpts{extra: extra, arch: arch, datasetHash: sc.DatasetHash, weights: sc.Model, blobs: [][]byte{sc.Corpus},
		engine: func(node int) syncer.Engine {
			// nodes: 2 syncers, then 4 validators; validator 1 (node 3)
			// runs on wazero's interpreter when interp.
			if interp && node == 3 {
				return get(1)
			}
			return get(0)
		}})
	return c, get(0)
}

// checkScores checks every score of a transcript: a scored aggregated
// commit scores every kept input (rate 1) and each score passes
// checkInputScore.
func checkScores(t *testing.T, tr []wire.RoundCommit, zero string) {
	t.Helper()
	for _, rc := range tr {
		for _, fc := range rc.Fragments {
			if fc.Status != wire.FragAggregated {
				continue
			}
			if fc.Scoring == nil || fc.Scoring.Evaluator != scoretest.TimesFM.Evaluator || fc.Scoring.Seed.IsZero() {
				t.Fatalf("round %d fragment %d: scoring %+v", rc.Round, fc.Fragment, fc.Scoring)
			}
			for _, in := range fc.Inputs {
				checkInputScore(t, fmt.Sprintf("round %d fragment %d %s", rc.Round, fc.Fragment, in.TrainerDID), fc.Scoring, in, zero)
			}
		}
	}
}

// checkInputScore checks one kept input's score: present and not failed,
// its pass verdict the pay rule on its losses, every loss finite and
// positive; the all-zero gradient's (trainer DID zero) step changes no
// loss and fails, any other input's changes its own loss.
func checkInputScore(t *testing.T, at string, sc *wire.CommitScoring, in wire.CommitInput, zero string) {
	t.Helper()
	s := in.Score
	if s == nil || s.Failed != "" {
		t.Fatalf("%s: score %+v", at, s)
	}
	if s.Pass != wire.ScorePassesTest(sc.Test, s.OwnBefore.Float(), s.OwnAfter.Float(), s.CtlBefore.Float(), s.CtlAfter.Float()) {
		t.Fatalf("%s: pass %v disagrees with the losses %+v", at, s.Pass, s)
	}
	for _, l := range []float64{s.OwnBefore.Float(), s.OwnAfter.Float(), s.CtlBefore.Float(), s.CtlAfter.Float()} {
		if math.IsNaN(l) || math.IsInf(l, 0) || l <= 0 {
			t.Fatalf("%s: loss %v", at, l)
		}
	}
	if in.TrainerDID == zero && (s.OwnBefore != s.OwnAfter || s.CtlBefore != s.CtlAfter || s.Pass) {
		t.Fatalf("%s: the zero gradient scored %+v", at, s)
	}
	if in.TrainerDID != zero && s.OwnBefore == s.OwnAfter {
		t.Fatalf("%s: a non-zero gradient left the own loss unchanged %+v", at, s)
	}
}

// runScoredModel: a run of model m scored by its built-in evaluator through
// the node path — newScoredCNetOf's network, every node on one compiled
// engine, every input scored on batches of 4 windows of the shared CSV
// corpus, trainer 1 a free rider (all-zero gradients). Round 0 commits with
// a score for every input from m's evaluator (its module hash in the
// commit), each passing checkInputScore (the zero gradient's losses
// unchanged and its check failed, every verdict the pay rule on its
// losses); a validator re-executes a scored commit bit for bit.
func runScoredModel(t *testing.T, m scoretest.Model) {
	c, e := newScoredCNetOf(t, m, `"rate_bps":10000`, false)
	ev, err := e.ResolveScorer(c.ctx, m.Evaluator, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.zeros = map[int]bool{1: true}
	zero := c.tr[1].DID.String()
	tr := c.commitRoundZero(t)
	for _, fc := range tr[0].Fragments {
		if fc.Status != wire.FragAggregated || fc.Scoring == nil || fc.Scoring.Evaluator != m.Evaluator || fc.Scoring.Hash != ev.Hash || fc.Scoring.Seed.IsZero() {
			t.Fatalf("fragment %d: status %s scoring %+v (module %s)", fc.Fragment, fc.Status, fc.Scoring, ev.Hash)
		}
		if len(fc.Inputs) != 2 {
			t.Fatalf("fragment %d: %d inputs", fc.Fragment, len(fc.Inputs))
		}
		for _, in := range fc.Inputs {
			checkInputScore(t, fmt.Sprintf("fragment %d %s", fc.Fragment, in.TrainerDID), fc.Scoring, in, zero)
		}
	}
	re, err := c.vals[1].Reexecute(c.ctx, c.task, 0, 1)
	if err != nil || !re.Agrees() || re.Commit.Inputs[0].Score == nil || *re.Commit.Inputs[0].Score != *tr[0].Fragments[1].Inputs[0].Score {
		t.Fatalf("a validator re-executing the scored commit: %+v %v", re, err)
	}
}

// commitRoundZero submits round 0 of a scored two-fragment run, lets the
// syncers commit it (a scored fragment waits for its scoring seed, drawn at
// the next block: checked) and returns the transcript: round 0, both
// fragments.
func (c *cnet) commitRoundZero(t *testing.T) []wire.RoundCommit {
	t.Helper()
	c.submitRound()
	// Every record is in: the last fragment is due, but not committed
	// before the chain drew its scoring seed at the next block.
	c.tickSyncers()
	if r := c.run(); r.Round != 0 || r.Fragments[1].Committed {
		t.Fatalf("committed before the scoring seed existed: %+v", r.Fragments)
	}
	c.block()
	c.tickSyncers()
	if r := c.run(); r.Round != 1 {
		t.Fatalf("round %d after the commits, want 1", r.Round)
	}
	tr, err := c.syncers[0].GetTranscript(c.ctx, c.task)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr) != 1 || len(tr[0].Fragments) != 2 {
		t.Fatalf("transcript %+v", tr)
	}
	return tr
}

// TestScoredRunWrongScoreChallenged: in a scored run where trainer 1 is a
// free rider (all-zero gradients), the elected syncer commits fragment 0
// of round 0 with a pay verdict inverted. The watcher re-executes — the
// scores are in FragmentResultHash — and challenges; two validators on
// different wazero engines compute the same result hash (and agree with
// the honest fragment 1 commit bit for bit); the challenge is upheld, the
// syncer slashed, the round redone with a fresh scoring seed, and the run
// seals with the free rider unpaid and its failed checks counted. Its
// process-level twin is e2e TestChallengeWrongScoreFourValidators (real
// nodes, every one on wazero's compiler); this one keeps what that cannot
// show cheaply: a validator on the interpreter agreeing bit for bit, and the
// seal with the scored transcript in the receipt.
func TestScoredRunWrongScoreChallenged(t *testing.T) {
	c := newScoredCNet(t)
	c.zeros = map[int]bool{1: true}
	zero := c.tr[1].DID.String()
	bad := c.syncerIndex()
	c.faults[bad].WrongScore = &syncer.FaultAt{Round: 0, Fragment: 0}
	tr := c.commitRoundZero(t)
	committed := tr[0].Fragments[0]
	if committed.Inputs[0].Score == nil {
		t.Fatalf("no score in the commit: %+v", committed.Inputs)
	}
	stake0 := c.stake(bad)
	// Two validators, compiler and interpreter, re-score the honest
	// fragment 1 commit bit for bit and agree with it.
	for _, v := range []int{1, 2} {
		re, err := c.vals[v].Reexecute(c.ctx, c.task, 0, 1)
		if err != nil || !re.Agrees() {
			t.Fatalf("validator %d re-executing the honest scored commit: %+v %v", v, re, err)
		}
		if re.Commit.Inputs[0].Score == nil || *re.Commit.Inputs[0].Score != *tr[0].Fragments[1].Inputs[0].Score {
			t.Fatalf("validator %d re-scored %+v, the commit has %+v", v, re.Commit.Inputs[0].Score, tr[0].Fragments[1].Inputs[0].Score)
		}
	}
	// The watcher re-executes: fragment 0's wrong verdict is challenged.
	if err := c.vals[0].Tick(c.ctx); err != nil {
		t.Fatal(err)
	}
	chs := c.challenges()
	if len(chs) != 1 || chs[0].Round != 0 || chs[0].Fragment != 0 || chs[0].Syncer != c.cands[bad].DID.String() {
		t.Fatalf("challenges after the watcher: %+v", chs)
	}
	r1, err1 := c.vals[1].Reexecute(c.ctx, c.task, 0, 0)
	r2, err2 := c.vals[3].Reexecute(c.ctx, c.task, 0, 0)
	if err1 != nil || err2 != nil || r1.Agrees() || r1.Result != chs[0].Claimed || r2.Result != r1.Result {
		t.Fatalf("validators' re-executions: %+v %v / %+v %v, claimed %s", r1, err1, r2, err2, chs[0].Claimed)
	}
	c.tickVals()
	ch := c.challenges()[0]
	if ch.Outcome != wire.ChallengeUpheld {
		t.Fatalf("after the votes: %s with %d votes", ch.Outcome, len(ch.Votes))
	}
	if got := c.stake(bad); new(big.Int).Sub(stake0, got).String() != ch.SyncerSlashed || ch.SyncerSlashed == "0" {
		t.Fatalf("syncer stake %s → %s, slashed %s", stake0, got, ch.SyncerSlashed)
	}
	if r := c.run(); r.Round != 0 || c.ticketOf[r.Syncer] == bad {
		t.Fatalf("after the rollback: round %d, syncer %s", r.Round, r.Syncer)
	}
	rc := c.untilSealed()
	raw, _ := json.Marshal(rc)
	if err := audit.CheckReceipt(raw, nil); err != nil {
		t.Fatalf("receipt: %v", err)
	}
	final, err := c.syncers[0].GetTranscript(c.ctx, c.task)
	if err != nil {
		t.Fatal(err)
	}
	checkScores(t, final, zero)
	if final[0].Fragments[0].Scoring.Seed == committed.Scoring.Seed {
		t.Fatal("the redone fragment kept the rolled-back commit's scoring seed")
	}
	fails := uint64(0)
	for _, rc := range final {
		for _, fc := range rc.Fragments {
			for _, in := range fc.Inputs {
				if in.TrainerDID == zero && in.Score != nil && !in.Score.Pass {
					fails++
				}
			}
		}
	}
	if got := c.run().TrainerMetrics[zero].ScoreFails; got != fails || fails == 0 {
		t.Fatalf("the free rider's score_fails %d, its failed checks in the transcript %d", got, fails)
	}
	for _, p := range rc.Rewards {
		if p.DID == zero && (p.Reward != "0" || p.WeightSum != "0") {
			t.Fatalf("the free rider was paid %s (weight %s)", p.Reward, p.WeightSum)
		}
	}
	blob := c.transcriptBlob(rc)
	if !strings.Contains(string(blob), `"score":{"ctl_after":"`) {
		t.Fatal("the receipt's transcript does not carry the scores")
	}
	if err := audit.CheckReceiptFull(raw, blob); err != nil {
		t.Fatalf("the receipt with its scored transcript: %v", err)
	}
}

func (c *cnet) transcriptBlob(rc *wire.Receipt) []byte {
	c.t.Helper()
	var nodes []*syncer.Node
	nodes = append(append(nodes, c.syncers...), c.vals...)
	b, err := anySource(nodes).GetPayload(c.ctx, rc.TranscriptHash)
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

// TestScoredRunSampled: sampling below rate 1 through the node path. A
// scored run at rate_bps 5000 with forfeit k = 1, trainer 1 a free rider
// (all-zero gradients). The chain refuses the elected syncer's commit of
// round 0 fragment 0 whose scored set is not the draw (fault:
// WrongScoredSet drops a drawn input's score), and takes the same
// fragment recomputed honestly. In the sealed run every kept input carries
// a score exactly when wire.ScoreSampled drew it (some drawn, some not),
// and each trainer's paid weight is the pay rule on the transcript: N per
// undrawn or passing input, minus k × N × 10⁴ / rate_bps per failed one,
// floored at zero (the free rider's failures forfeit what its undrawn
// inputs earned).
func TestScoredRunSampled(t *testing.T) {
	const rate, k = 5000, 1
	c := newScoredCNetWith(t, fmt.Sprintf(`"rate_bps":%d,"forfeit":%d`, rate, k))
	c.zeros = map[int]bool{1: true}
	zero := c.tr[1].DID.String()
	bad := c.syncerIndex()
	c.faults[bad].WrongScoredSet = &syncer.FaultAt{Round: 0, Fragment: 0}
	c.submitRound()
	// Fragment 0 is due and has its scoring seed (fragment 1's records
	// came in later blocks); fragment 1 gets its seed at the next block.
	c.block()
	err := c.syncers[bad].Tick(c.ctx)
	if err == nil || !strings.Contains(err.Error(), "is drawn for scoring and has no score") && !strings.Contains(err.Error(), "has a score but is not a kept input drawn for scoring") {
		t.Fatalf("a commit whose scored set is not the draw: %v", err)
	}
	if r := c.run(); r.Round != 0 || r.Fragments[0].Committed || !r.Fragments[1].Committed {
		t.Fatalf("after the refused commit: round %d, fragments %+v", r.Round, r.Fragments)
	}
	c.faults[bad].WrongScoredSet = nil
	c.block()
	c.tickSyncers()
	if r := c.run(); r.Round != 1 {
		t.Fatalf("round %d after the honest commit, want 1", r.Round)
	}
	sizes := map[int]int64{}
	for _, f := range c.run().Fragments {
		sizes[f.Index] = f.N
	}
	rc := c.untilSealed()
	final, err := c.syncers[0].GetTranscript(c.ctx, c.task)
	if err != nil {
		t.Fatal(err)
	}
	weight, forfeit := map[string]*big.Int{}, map[string]*big.Int{}
	fails := map[string]uint64{}
	var drawn, spared, zeroFails, zeroSpared int
	for _, tr := range c.tr {
		weight[tr.DID.String()], forfeit[tr.DID.String()] = new(big.Int), new(big.Int)
	}
	for _, rcm := range final {
		for _, fc := range rcm.Fragments {
			if fc.Status != wire.FragAggregated || fc.Scoring == nil || fc.Scoring.RateBps != rate {
				t.Fatalf("round %d fragment %d: status %s scoring %+v", rcm.Round, fc.Fragment, fc.Status, fc.Scoring)
			}
			n := sizes[fc.Fragment]
			for _, in := range fc.Inputs {
				if in.Rejected != "" {
					t.Fatalf("round %d fragment %d: %s rejected: %s", rcm.Round, fc.Fragment, in.TrainerDID, in.Rejected)
				}
				d := in.TrainerDID
				want := wire.ScoreSampled(fc.Scoring.Seed, c.task, rcm.Round, uint64(fc.Fragment), d, rate)
				if (in.Score != nil) != want {
					t.Fatalf("round %d fragment %d %s: scored %v, the draw says %v", rcm.Round, fc.Fragment, d, in.Score != nil, want)
				}
				switch s := in.Score; {
				case s == nil:
					spared++
					weight[d].Add(weight[d], big.NewInt(n))
					if d == zero {
						zeroSpared++
					}
				case s.Failed != "":
					t.Fatalf("round %d fragment %d %s: the evaluator failed: %s", rcm.Round, fc.Fragment, d, s.Failed)
				case s.Pass != wire.ScorePassesTest(fc.Scoring.Test, s.OwnBefore.Float(), s.OwnAfter.Float(), s.CtlBefore.Float(), s.CtlAfter.Float()):
					t.Fatalf("round %d fragment %d %s: pass %v disagrees with the losses %+v", rcm.Round, fc.Fragment, d, s.Pass, s)
				case d == zero && (s.Pass || s.OwnBefore != s.OwnAfter):
					t.Fatalf("round %d fragment %d: the zero gradient scored %+v", rcm.Round, fc.Fragment, s)
				case s.Pass:
					drawn++
					weight[d].Add(weight[d], big.NewInt(n))
				default:
					drawn++
					fails[d]++
					forfeit[d].Add(forfeit[d], big.NewInt(k*n*10000/rate))
					if d == zero {
						zeroFails++
					}
				}
			}
		}
	}
	// The draw at this rate must have both scored and spared inputs, and
	// the free rider both (else the forfeit arithmetic is not exercised).
	if drawn == 0 || spared == 0 || zeroFails == 0 || zeroSpared == 0 {
		t.Fatalf("draw: %d scored, %d spared; the free rider failed %d and was spared %d", drawn, spared, zeroFails, zeroSpared)
	}
	m := c.run().TrainerMetrics
	for _, p := range rc.Rewards {
		want := new(big.Int).Sub(weight[p.DID], forfeit[p.DID])
		if want.Sign() < 0 {
			want.SetInt64(0)
		}
		if p.WeightSum != want.String() {
			t.Fatalf("%s: paid weight %s, want %s − %s = %s", p.DID, p.WeightSum, weight[p.DID], forfeit[p.DID], want)
		}
		if m[p.DID].ScoreFails != fails[p.DID] {
			t.Fatalf("%s: score_fails %d, failed checks in the transcript %d", p.DID, m[p.DID].ScoreFails, fails[p.DID])
		}
		t.Logf("%s: weight %s, forfeit %s (%d failed), paid weight %s, reward %s", p.DID, weight[p.DID], forfeit[p.DID], fails[p.DID], p.WeightSum, p.Reward)
	}
	t.Logf("%d inputs scored, %d spared by the draw at rate %d bps", drawn, spared, rate)
}
