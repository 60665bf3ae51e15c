package syncer_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/tenzro/train/dataset"
	"github.com/tenzro/train/internal/scoretest"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// TestScoredRunChronosBolt: a chronos-bolt run scored by the built-in
// ChronosBoltScore through the node path — the challenge network of
// newScoredCNet with the ragged Chronos-Bolt model of plugins/testdata/score
// (chronos_odd), every input scored on batches of 4 windows of the shared
// CSV corpus, trainer 1 a free rider (all-zero gradients). Round 0 commits
// with a score for every input from the Chronos-Bolt evaluator (its module hash
// in the commit), the zero gradient's losses unchanged and its check
// failed, every verdict the pay rule on its losses; a validator
// re-executes a scored commit bit for bit.
func TestScoredRunChronosBolt(t *testing.T) {
	ctx := context.Background()
	model, err := os.ReadFile("../plugins/testdata/score/chronos_odd/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	ts, _, err := safetensors.Parse(model, safetensors.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, x := range ts {
		k := int64(1)
		for _, d := range x.Shape {
			k *= d
		}
		n += k
	}
	corpus := scoretest.Corpus()
	dh, err := dataset.CorpusHashCSV(bytes.NewReader(corpus))
	if err != nil {
		t.Fatal(err)
	}
	params := `{"context_len":23,"horizon":5,"patch_len":4,"d_model":10,"d_ff":14,"num_layers":2,"num_decoder_layers":2,"num_heads":3,"d_kv":5}`
	arch := fmt.Sprintf(`{"family":"chronos-bolt","param_count":%d,"modality":"Timeseries","fragment_count":2,"dtype":"f32","metadata":%s}`, n, params)
	extra := fmt.Sprintf(`,"scoring":{"evaluator":"ChronosBoltScore","params":%s,"batch":4,"rate_bps":10000,"corpus":%q}`, params, wire.ContentHash(corpus).String())
	e, err := plugins.NewEngine(ctx, plugins.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	ev, err := e.ResolveScorer(ctx, "ChronosBoltScore", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCNetWith(t, cnetOpts{extra: extra, arch: arch, datasetHash: fmt.Sprintf("0x%x", dh[:]), weights: model, blobs: [][]byte{corpus},
		engine: func(int) syncer.Engine { return e }})
	c.zeros = map[int]bool{1: true}
	zero := c.tr[1].DID.String()
	c.submitRound()
	c.tickSyncers()
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
	for _, fc := range tr[0].Fragments {
		if fc.Status != wire.FragAggregated || fc.Scoring == nil || fc.Scoring.Evaluator != "ChronosBoltScore" || fc.Scoring.Hash != ev.Hash || fc.Scoring.Seed.IsZero() {
			t.Fatalf("fragment %d: status %s scoring %+v (module %s)", fc.Fragment, fc.Status, fc.Scoring, ev.Hash)
		}
		if len(fc.Inputs) != 2 {
			t.Fatalf("fragment %d: %d inputs", fc.Fragment, len(fc.Inputs))
		}
		for _, in := range fc.Inputs {
			s := in.Score
			if s == nil || s.Failed != "" {
				t.Fatalf("fragment %d %s: score %+v", fc.Fragment, in.TrainerDID, s)
			}
			if s.Pass != wire.ScorePassesTest(fc.Scoring.Test, s.OwnBefore.Float(), s.OwnAfter.Float(), s.CtlBefore.Float(), s.CtlAfter.Float()) {
				t.Fatalf("fragment %d %s: pass %v disagrees with the losses %+v", fc.Fragment, in.TrainerDID, s.Pass, s)
			}
			for _, l := range []float64{s.OwnBefore.Float(), s.OwnAfter.Float(), s.CtlBefore.Float(), s.CtlAfter.Float()} {
				if math.IsNaN(l) || math.IsInf(l, 0) || l <= 0 {
					t.Fatalf("fragment %d %s: loss %v", fc.Fragment, in.TrainerDID, l)
				}
			}
			if in.TrainerDID == zero && (s.OwnBefore != s.OwnAfter || s.CtlBefore != s.CtlAfter || s.Pass) {
				t.Fatalf("fragment %d: the zero gradient scored %+v", fc.Fragment, s)
			}
			if in.TrainerDID != zero && s.OwnBefore == s.OwnAfter {
				t.Fatalf("fragment %d %s: a non-zero gradient left the own loss unchanged %+v", fc.Fragment, in.TrainerDID, s)
			}
		}
	}
	re, err := c.vals[1].Reexecute(c.ctx, c.task, 0, 1)
	if err != nil || !re.Agrees() || re.Commit.Inputs[0].Score == nil || *re.Commit.Inputs[0].Score != *tr[0].Fragments[1].Inputs[0].Score {
		t.Fatalf("a validator re-executing the scored commit: %+v %v", re, err)
	}
}
