package syncer_test

import (
	"context"
	"encoding/json"
	"math/big"
	"testing"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// TestScoredRunMeanGain: a scored run under the opt-in test run_mean_gain
// (min_gain_ppm 1) through the node path, trainer 1 a free rider (all-zero
// gradients). Every kept input is scored; each commit's scoring header
// names the test; nothing is forfeited; each trainer's gain state in the
// run view is the sum of wire.GainPPM over its scored checks in the final
// transcript; and the seal pays each trainer its Σ N exactly when
// wire.RunGainPasses says so, 0 otherwise — the free rider (gain 0 on
// every check) unpaid. The receipt verifies with its transcript and
// replays to the committed final model.
func TestScoredRunMeanGain(t *testing.T) {
	const minGain = 1
	c := newScoredCNetWith(t, `"rate_bps":10000,"test":"run_mean_gain","min_gain_ppm":1`)
	c.zeros = map[int]bool{1: true}
	zero := c.tr[1].DID.String()
	sizes := map[int]int64{}
	for _, f := range c.run().Fragments {
		sizes[f.Index] = f.N
	}
	rc := c.untilSealed()
	final, err := c.syncers[0].GetTranscript(c.ctx, c.task)
	if err != nil {
		t.Fatal(err)
	}
	checkScores(t, final, zero)
	weight, sum, checks := map[string]int64{}, map[string]int64{}, map[string]uint64{}
	for _, rcm := range final {
		for _, fc := range rcm.Fragments {
			if fc.Scoring.Test != wire.ScoreTestRunMeanGain {
				t.Fatalf("round %d fragment %d: scoring test %q", rcm.Round, fc.Fragment, fc.Scoring.Test)
			}
			for _, in := range fc.Inputs {
				weight[in.TrainerDID] += sizes[fc.Fragment]
				sum[in.TrainerDID] += wire.GainPPM(in.Score.OwnBefore, in.Score.OwnAfter)
				checks[in.TrainerDID]++
				if in.TrainerDID == zero && wire.GainPPM(in.Score.OwnBefore, in.Score.OwnAfter) != 0 {
					t.Fatalf("the zero gradient's gain %d", wire.GainPPM(in.Score.OwnBefore, in.Score.OwnAfter))
				}
			}
		}
	}
	m := c.run().TrainerMetrics
	paidHonest := 0
	for _, p := range rc.Rewards {
		d := p.DID
		if m[d].GainChecks != checks[d] || m[d].GainSumPPM != sum[d] || m[d].ScoreFails != 0 {
			t.Fatalf("%s: view gain %d/%d fails %d, transcript %d/%d", d, m[d].GainSumPPM, m[d].GainChecks, m[d].ScoreFails, sum[d], checks[d])
		}
		want := big.NewInt(weight[d])
		if !wire.RunGainPasses(sum[d], checks[d], minGain) {
			want.SetInt64(0)
		}
		if p.WeightSum != want.String() {
			t.Fatalf("%s: paid weight %s, want %s (Σ N %d, gain %d over %d checks)", d, p.WeightSum, want, weight[d], sum[d], checks[d])
		}
		if d == zero && (p.Reward != "0" || p.WeightSum != "0") {
			t.Fatalf("the free rider was paid %s (weight %s)", p.Reward, p.WeightSum)
		}
		if d != zero && want.Sign() > 0 {
			paidHonest++
		}
		t.Logf("%s: Σ N %d, gain %d ppm over %d checks (mean %d), paid weight %s, reward %s", d, weight[d], sum[d], checks[d],
			sum[d]/int64(max(checks[d], 1)), p.WeightSum, p.Reward)
	}
	if paidHonest == 0 {
		t.Fatal("no honest trainer passed the run's mean")
	}
	raw, _ := json.Marshal(rc)
	if err := audit.CheckReceipt(raw, nil); err != nil {
		t.Fatalf("receipt: %v", err)
	}
	blob := c.transcriptBlob(rc)
	if err := audit.CheckReceiptFull(raw, blob); err != nil {
		t.Fatalf("the receipt with its scored transcript: %v", err)
	}
	var nodes []*syncer.Node
	nodes = append(append(nodes, c.syncers...), c.vals...)
	eng, err := plugins.NewEngine(context.Background(), plugins.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(context.Background()) })
	rep, err := syncer.Replay(c.ctx, raw, blob, anySource(nodes), eng, nil)
	if err != nil || !rep.Match {
		t.Fatalf("replay of the receipt: %+v %v", rep, err)
	}
}
