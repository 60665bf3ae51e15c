package syncer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/tenzro/train/dataset/csvcorpus"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// Scoring a fragment commit's inputs (docs/protocol/scoring.md §6–§8): for
// a scored run's aggregated commit, every kept input the chain's draw picks
// (machine.Run.ScoreWanted) is scored by the run's evaluator on the round's
// start weights, with batches drawn from the fragment's scoring seed, and
// the four losses go into the commit (and so into FragmentResultHash).

// resolveScorer resolves a spec's scoring field at posting; nil when the
// spec does not score.
func resolveScorer(ctx context.Context, eng Engine, spec *wire.TaskSpec) (*RuleRef, error) {
	sc, err := spec.ScoringRef()
	if err != nil || sc == nil {
		return nil, err
	}
	if sc.Corpus.IsZero() {
		return nil, errors.New("spec: scoring: corpus is required (the content hash of the CSV corpus the evaluator draws windows from)")
	}
	if _, err := wire.ParseHash(spec.DatasetHash); err != nil {
		return nil, fmt.Errorf("spec: scoring needs the corpus's dataset_hash: %w", err)
	}
	s, ok := eng.(Scorer)
	if !ok {
		return nil, fmt.Errorf("spec: scoring: this node's engine (%s) does not run evaluators", eng.Profile().Engine)
	}
	ref, err := s.ResolveScorer(ctx, sc.Evaluator, sc.Params)
	if err != nil {
		return nil, fmt.Errorf("spec: scoring: %w", err)
	}
	if _, err := scoreWindowLen(ref.Params); err != nil {
		return nil, fmt.Errorf("spec: scoring: %w", err)
	}
	if _, err := specStride(spec); err != nil {
		return nil, fmt.Errorf("spec: scoring: %w", err)
	}
	return &ref, nil
}

// checkScoreCorpus checks at posting that this node holds the scored
// spec's corpus (inline bytes are stored first) and that it is a CSV corpus
// of the spec's dataset_hash, so a run is never posted with data its
// evaluator cannot use.
func (n *Node) checkScoreCorpus(ctx context.Context, spec *wire.TaskSpec, inline []byte) error {
	sc, _ := spec.ScoringRef() // resolveScorer parsed it
	if len(inline) > 0 {
		if int64(len(inline)) > csvcorpus.MaxBytes {
			return machine.Errf(machine.KindInvalid, "score_corpus: %d bytes, limit %d", len(inline), csvcorpus.MaxBytes)
		}
		if h := wire.ContentHash(inline); h != sc.Corpus {
			return machine.Errf(machine.KindInvalid, "score_corpus hashes to %s, the spec's scoring.corpus is %s", h, sc.Corpus)
		}
		if err := n.blobs.Put(ctx, sc.Corpus, inline); err != nil {
			return fmt.Errorf("store the scoring corpus: %w", err)
		}
	}
	b, err := n.blobs.Get(ctx, sc.Corpus)
	if errors.Is(err, machine.ErrNotFound) {
		return machine.Errf(machine.KindInvalid, "spec: scoring: this node does not hold the corpus %s: upload it first (PUT /blobs/<hash>, or tenzro train post-task --corpus FILE)", sc.Corpus)
	}
	if err != nil {
		return fmt.Errorf("scoring corpus %s: %w", sc.Corpus, err)
	}
	c, err := csvcorpus.Parse(bytes.NewReader(b))
	if err != nil {
		return machine.Errf(machine.KindInvalid, "spec: scoring: corpus %s: %v", sc.Corpus, err)
	}
	want, _ := wire.ParseHash(spec.DatasetHash)
	if c.Hash != want {
		return machine.Errf(machine.KindInvalid, "spec: scoring: corpus %s has dataset_hash %s, the spec's is %s: the evaluator must score the training data", sc.Corpus, c.Hash, want)
	}
	return nil
}

// scoreWindowLen is the evaluator's window: context_len + horizon of its
// resolved parameters.
func scoreWindowLen(params json.RawMessage) (int, error) {
	var p struct {
		ContextLen *float64 `json:"context_len"`
		Horizon    *float64 `json:"horizon"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return 0, fmt.Errorf("evaluator parameters: %w", err)
	}
	if p.ContextLen == nil || p.Horizon == nil {
		return 0, errors.New("the evaluator has no context_len and horizon parameters to cut windows with")
	}
	c, h := *p.ContextLen, *p.Horizon
	if c < 1 || h < 1 || c != math.Trunc(c) || h != math.Trunc(h) || c+h > 1<<20 {
		return 0, fmt.Errorf("context_len %v + horizon %v: want positive integers of at most 2^20 together", c, h)
	}
	return int(c + h), nil
}

// specStride is the spec's metadata stride (the trainer's loader's; 1 when
// unset).
func specStride(spec *wire.TaskSpec) (int, error) {
	if len(bytes.TrimSpace(spec.Architecture.Metadata)) == 0 {
		return 1, nil
	}
	var md map[string]json.RawMessage
	if err := json.Unmarshal(spec.Architecture.Metadata, &md); err != nil {
		return 1, nil // free-form metadata that is not an object: no stride
	}
	raw, ok := md["stride"]
	if !ok {
		return 1, nil
	}
	var s int
	if err := json.Unmarshal(raw, &s); err != nil || s < 1 {
		return 0, fmt.Errorf("metadata stride %s: want an integer >= 1", raw)
	}
	return s, nil
}

// scoreCorpus is a parsed corpus: its series rounded to f32, their lengths
// and whether its dataset_hash is the spec's.
type scoreCorpus struct {
	series [][]float32
	lens   []int
	hash   wire.Hash
}

// corpusCache keeps the parsed corpora of scored runs by content hash.
type corpusCache struct {
	mu sync.Mutex
	m  map[wire.Hash]*scoreCorpus
}

func (c *corpusCache) get(h wire.Hash) *scoreCorpus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[h]
}

func (c *corpusCache) put(h wire.Hash, v *scoreCorpus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= 4 {
		c.m = map[wire.Hash]*scoreCorpus{}
	}
	c.m[h] = v
}

// loadCorpus returns the corpus blob h parsed (fetched when this node lacks
// it: a corpus the network does not give is a local failure).
func (n *Node) loadCorpus(ctx context.Context, h wire.Hash) (*scoreCorpus, error) {
	if c := n.corpora.get(h); c != nil {
		return c, nil
	}
	b, release, _, _, err := n.storedBlob(ctx, h, csvcorpus.MaxBytes, "")
	if err != nil {
		return nil, errLocal{fmt.Errorf("scoring corpus %s: %w", h, err)}
	}
	defer release()
	parsed, err := csvcorpus.Parse(bytes.NewReader(b))
	c := &scoreCorpus{}
	if err == nil {
		c.hash = parsed.Hash
		for _, s := range parsed.Series {
			f := make([]float32, len(s))
			for k, v := range s {
				f[k] = float32(v)
			}
			c.series = append(c.series, f)
			c.lens = append(c.lens, len(s))
		}
	}
	n.corpora.put(h, c)
	return c, nil
}

// startWeights returns the hash of fragment f's weights as the round
// started: a fragment already committed this round moved on, and its
// commit names what it started from.
func startWeights(fs *machine.RunFragment) wire.Hash {
	if fs.Closed && fs.Commit != nil {
		return fs.Commit.WeightsBefore
	}
	return fs.WeightsHash
}

// scoreInputs scores the sampled kept inputs of fragment i's aggregated
// commit fc; values[k] holds fc.Inputs[idx[k]]'s decoded values. A
// deterministic failure (the corpus is not the spec's dataset, a pool too
// small for a batch, the evaluator's RuleFailure) is recorded as the
// score's Failed; anything else is a local error.
func (n *Node) scoreInputs(ctx context.Context, s *snapshot, i int, fc *wire.FragmentCommit, values []Values, idx []int) error {
	r := s.r
	sc := r.ScoringOf(i)
	if sc == nil || fc.Status != wire.FragAggregated {
		return nil
	}
	fc.Scoring = sc
	var wanted []int // positions in values
	for k, j := range idx {
		if r.ScoreWanted(i, fc.Status, &fc.Inputs[j]) {
			wanted = append(wanted, k)
		}
	}
	if len(wanted) == 0 {
		return nil
	}
	scorer, ok := n.eng.(Scorer)
	if !ok {
		return errLocal{fmt.Errorf("this node's engine (%s) does not run evaluators; run %s scores its inputs", n.eng.Profile().Engine, r.TaskSpec().TaskID)}
	}
	fail := func(why string) {
		for _, k := range wanted {
			fc.Inputs[idx[k]].Score = &wire.InputScore{Failed: why}
		}
	}
	spec := r.TaskSpec()
	ref, _ := spec.ScoringRef() // the chain checked it at posting
	corpus, err := n.loadCorpus(ctx, ref.Corpus)
	if err != nil {
		return err
	}
	want, _ := wire.ParseHash(spec.DatasetHash)
	if corpus.hash != want || corpus.hash.IsZero() {
		fail(fmt.Sprintf("scoring corpus %s is not a CSV corpus of the spec's dataset_hash", ref.Corpus))
		return nil
	}
	wl, err := scoreWindowLen(r.Scorer.Params)
	if err != nil {
		fail(err.Error())
		return nil
	}
	stride, err := specStride(spec)
	if err != nil {
		fail(err.Error())
		return nil
	}
	wi, err := NewWindowIndex(corpus.lens, wl, stride)
	if err != nil {
		fail(err.Error())
		return nil
	}
	// The whole model at the round's start, fragment after fragment.
	fs := r.Fragments[i]
	in := ScoreInput{Evaluator: *r.Scorer, Dtype: fs.Dtype, Batches: 2, BatchSize: sc.Batch, WindowLen: wl, Fuel: ref.Fuel}
	o := spec.Outer()
	in.LR, in.Beta, in.Nesterov = o.LR, o.Momentum, o.Nesterov
	for f, g := range r.Fragments {
		if f == i {
			in.FragFirst, in.FragCount = len(in.Tensors), len(g.Tensors)
		}
		in.Tensors = append(in.Tensors, g.Tensors...)
		h := startWeights(g)
		if f == i {
			h = fs.WeightsHash // what the commit starts from (weights_before)
		}
		v, release, err := n.storedValues(ctx, h, g.Tensors)
		if err != nil {
			return fmt.Errorf("scoring: weights of fragment %d (%s): %w", f, h, err)
		}
		defer release()
		in.Weights = append(in.Weights, v)
	}
	for _, k := range wanted {
		cin := &fc.Inputs[idx[k]]
		grad, err := values[k].Bytes(fs.N * int64(fs.Dtype.Size()))
		if err != nil {
			return errLocal{fmt.Errorf("scoring: input of %s: %w", cin.TrainerDID, err)}
		}
		draw := BatchDraw{Randomness: sc.Seed, TaskID: spec.TaskID, Round: r.Round, Fragment: uint64(i), Trainer: cin.TrainerDID}
		own, ctl, err := scoreWindows(spec, wi, draw, s.shardsOf(cin.TrainerDID), sc.Batch)
		if err != nil {
			cin.Score = &wire.InputScore{Failed: err.Error()}
			continue
		}
		win, err := wi.AppendWindows(nil, corpus.series, own)
		if err == nil {
			win, err = wi.AppendWindows(win, corpus.series, ctl)
		}
		if err != nil {
			cin.Score = &wire.InputScore{Failed: err.Error()}
			continue
		}
		call := in
		call.Gradient, call.Windows = grad, win
		out, err := scorer.Score(ctx, call)
		var rf *RuleFailure
		switch {
		case errors.As(err, &rf):
			cin.Score = &wire.InputScore{Failed: rf.Error()}
			continue
		case err != nil:
			return fmt.Errorf("scoring the input of %s: %w", cin.TrainerDID, err)
		case len(out.Before) != 2 || len(out.After) != 2:
			return fmt.Errorf("scoring the input of %s: %d and %d losses for 2 batches", cin.TrainerDID, len(out.Before), len(out.After))
		}
		fc.Fuel += out.Fuel
		cin.Score = &wire.InputScore{OwnBefore: wire.F64Of(out.Before[0]), OwnAfter: wire.F64Of(out.After[0]),
			CtlBefore: wire.F64Of(out.Before[1]), CtlAfter: wire.F64Of(out.After[1]),
			Pass: wire.ScorePassesTest(sc.Test, out.Before[0], out.After[0], out.Before[1], out.After[1])}
	}
	return nil
}

// scoreWindows draws the own and control batches of one scored input over
// the spec's shard layout (shard_split: contiguous blocks by default,
// series-balanced with "series"; scoring.md §3).
func scoreWindows(spec *wire.TaskSpec, wi *WindowIndex, d BatchDraw, shards []int, batch int) (own, ctl []int, err error) {
	layout, err := wi.Layout(spec.Split(), spec.Shards())
	if err != nil {
		return nil, nil, err
	}
	return PickScoreWindowsIn(d, layout, shards, batch)
}
