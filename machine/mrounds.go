package machine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"

	"github.com/gowebpki/jcs"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/wire"
)

// Round transitions: submission records, equivocation claims, fragment
// commits by the current syncer, round close, seal and the receipt
// signature.

// Limits on what a fragment commit may carry.
const (
	maxReasonBytes = 4096
	maxEngineBytes = 64 << 10
)

func (x *mtx) submission(p *wire.SubmissionTx) (*wire.SubmitResult, error) {
	if err := parseDIDField("trainer_did", p.TrainerDID); err != nil {
		return nil, err
	}
	if p.PayloadSize == 0 || p.PayloadSize > MaxPayloadBytes {
		return nil, Errf(KindInvalid, "payload_size %d: want 1..%d", p.PayloadSize, MaxPayloadBytes)
	}
	if err := p.Metrics.Validate(); err != nil {
		return nil, Errf(KindInvalid, "%v", err)
	}
	if len(p.Provider) > 256 {
		return nil, Errf(KindInvalid, "provider: %d bytes, limit 256", len(p.Provider))
	}
	// Only the header, this trainer and this fragment: a record's cost does
	// not grow with the run (runstore.go).
	r, err := loadRunFor(x.ctx, x.kv, p.TaskID, p.TrainerDID, p.FragmentIndex)
	if err != nil {
		return nil, err
	}
	fs, err := r.PrecheckRecord(p.TrainerDID, p.Round, p.FragmentIndex, x.blk.ArrivalMs())
	if err != nil {
		return nil, err
	}
	if err := verifySig(p.TrainerDID, p.Preimage(), p.Signature); err != nil {
		return nil, Errf(KindUnauthorized, "submission signature: %v", err)
	}
	if err := r.checkEvidenceRef(p.Evidence); err != nil {
		return nil, err
	}
	f := int(p.FragmentIndex)
	rec := Record{SubmissionTx: *p, Height: x.blk.Height, TimeMs: x.blk.TimeMs}
	var first Record
	ok, err := x.getJSON(KSTranscript, RecordKey(p.TaskID, p.Round, f, p.TrainerDID), &first)
	if err != nil {
		return nil, err
	}
	t := r.Trainer(p.TrainerDID)
	if ok && first.PayloadHash == p.PayloadHash {
		return nil, Errf(KindConflict, "duplicate submission: %s already submitted payload %s for round %d fragment %d", p.TrainerDID, p.PayloadHash, p.Round, p.FragmentIndex)
	}
	shard := uint64(0)
	if len(t.Shards) > 0 {
		shard = uint64(t.Shards[0])
	}
	if err := x.verifyEvidence(r, p.Evidence, p.TrainerDID, shard, r.RoundModel, p.PayloadHash); err != nil {
		return nil, err
	}
	if ok {
		if _, err := x.kv.Get(x.ctx, KSEvidence, claimKey(p.TaskID, p.Round, f, p.TrainerDID)); err == nil {
			return nil, Errf(KindConflict, "equivocation of %s in round %d fragment %d is already claimed", p.TrainerDID, p.Round, p.FragmentIndex)
		} else if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		cl := Claim{First: first, Second: rec}
		cl.Digest = claimDigest(&cl)
		if err := x.putJSON(KSEvidence, claimKey(p.TaskID, p.Round, f, p.TrainerDID), cl); err != nil {
			return nil, err
		}
		t.Submitted++
		if err := x.putRun(r); err != nil {
			return nil, err
		}
		return &wire.SubmitResult{Accepted: false, Round: p.Round, FragmentIndex: p.FragmentIndex, PayloadHash: p.PayloadHash,
			AcceptedCount: fs.accepted(), EquivocationClaim: &cl.Digest}, nil
	}
	if err := x.putJSON(KSTranscript, RecordKey(p.TaskID, p.Round, f, p.TrainerDID), rec); err != nil {
		return nil, err
	}
	fs.Records = append(fs.Records, RecRef{DID: p.TrainerDID, PayloadHash: p.PayloadHash})
	if fs.accepted() == r.spec.Quorum {
		fs.KthMs = x.blk.TimeMs
	}
	t.Submitted++
	if p.Evidence != nil {
		r.Attestations = append(r.Attestations, p.Evidence.Digest)
	}
	if err := x.putRun(r); err != nil {
		return nil, err
	}
	return &wire.SubmitResult{Accepted: true, Round: p.Round, FragmentIndex: p.FragmentIndex, PayloadHash: p.PayloadHash,
		AcceptedCount: fs.accepted(), Finalized: r.allIn(fs)}, nil
}

// claimDigest identifies an equivocation claim (PROTOCOL §6):
// SHA-256(Str(DomainEquivocate) ‖ Str(task) ‖ Str(DID) ‖ U64(round) ‖
// U64(fragment) ‖ Hash(first payload) ‖ Bytes(first signature) ‖
// Hash(second payload) ‖ Bytes(second signature)).
func claimDigest(c *Claim) wire.Hash {
	return wire.NewCanon(wire.DomainEquivocate).Str(c.First.TaskID).Str(c.First.TrainerDID).U64(c.First.Round).
		U64(c.First.FragmentIndex).Hash(c.First.PayloadHash).Bytes(c.First.Signature).Hash(c.Second.PayloadHash).Bytes(c.Second.Signature).Sum()
}

// PrecheckRecord runs the state checks of a submission at block time now:
// run running, trainer active, current round, fragment open and inside its
// grace window. The receiving node runs the same checks on the committed
// state before it does anything costly.
func (r *Run) PrecheckRecord(trainer string, round, fragment uint64, now int64) (*RunFragment, error) {
	task := r.spec.TaskID
	if r.Status != wire.StatusRunning {
		return nil, Errf(KindConflict, "run %s is %s, not running", task, r.Status)
	}
	if r.AwaitingFinal {
		return nil, Errf(KindConflict, "run %s committed its last round; it seals once every round is final", task)
	}
	t := r.Trainer(trainer)
	if t == nil {
		return nil, Errf(KindNotFound, "unknown DID: %s is not enrolled in %s", trainer, task)
	}
	if t.Status != wire.TrainerActive {
		if t.Status == wire.TrainerJoining {
			return nil, Errf(KindConflict, "%s joins %s from round %d; the current round is %d", trainer, task, t.JoinedRound, r.Round)
		}
		return nil, Errf(KindConflict, "%s is %s in %s", trainer, t.Status, task)
	}
	if round != r.Round {
		return nil, Errf(KindConflict, "wrong round: submission is for round %d, the current round of %s is %d", round, task, r.Round)
	}
	if fragment >= uint64(len(r.Fragments)) {
		return nil, Errf(KindInvalid, "wrong fragment: fragment_index %d, the model has %d fragments (0..%d)", fragment, len(r.Fragments), len(r.Fragments)-1)
	}
	fs := r.Fragments[fragment]
	if fs.Closed {
		return nil, Errf(KindConflict, "after the grace window: fragment %d of round %d is already committed", fragment, round)
	}
	if fs.KthMs > 0 && now > fs.KthMs+r.spec.GraceWindowMs {
		return nil, Errf(KindConflict, "after the grace window: fragment %d of round %d reached quorum at %d ms and its %d ms window has closed", fragment, round, fs.KthMs, r.spec.GraceWindowMs)
	}
	return fs, nil
}

// BaseCommit is fragment i's transcript entry before anything is decided:
// the rule and outer step that would run, weights unchanged.
func BaseCommit(r *Run, i int) *wire.FragmentCommit {
	w := r.Fragments[i].WeightsHash
	return &wire.FragmentCommit{Fragment: i, Rule: r.Rule.Name, RuleHash: r.Rule.Hash, RuleParams: orJSON(r.Rule.Params), OuterHash: r.Outer.Hash,
		WeightsBefore: w, WeightsAfter: w, Codec: CodecRefOf(r.Codec), Inputs: []wire.CommitInput{}}
}

func orJSON(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage(`{}`)
	}
	return v
}

// RecordInputs lists a fragment's records in DID order as commit inputs.
func RecordInputs(recs []RecRef) []wire.CommitInput {
	s := append([]RecRef(nil), recs...)
	sort.Slice(s, func(a, b int) bool { return s[a].DID < s[b].DID })
	out := make([]wire.CommitInput, len(s))
	for k, x := range s {
		out[k] = wire.CommitInput{TrainerDID: x.DID, PayloadHash: x.PayloadHash}
	}
	return out
}

// FragmentClaims returns the equivocation claims of a fragment in DID order.
func FragmentClaims(ctx context.Context, kv KV, task string, round uint64, f int) ([]Claim, error) {
	var out []Claim
	err := kv.Scan(ctx, KSEvidence, claimPrefix(task, round, f), func(_, v []byte) error {
		var c Claim
		if err := json.Unmarshal(v, &c); err != nil {
			return fmt.Errorf("equivocation claim of %s: %w", task, err)
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// CommitJCS is the RFC 8785 form of a fragment commit (what its signature
// covers).
func CommitJCS(c *wire.FragmentCommit) ([]byte, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(raw)
}

func sameJSONBytes(a, b json.RawMessage) bool {
	ca, errA := jcs.Transform(orJSON(a))
	cb, errB := jcs.Transform(orJSON(b))
	return errA == nil && errB == nil && bytes.Equal(ca, cb)
}

func (x *mtx) commitFragment(p *wire.CommitFragmentTx) (*wire.CommitFragmentResult, error) {
	if err := parseDIDField("syncer_did", p.SyncerDID); err != nil {
		return nil, err
	}
	// The header and this fragment with its records; the whole run only
	// when the commit may change more (commitNeedsWholeRun): a commit's
	// cost does not grow with the run's other fragments and records.
	r, err := loadRunForCommit(x.ctx, x.kv, p.TaskID, p.Fragment)
	if err != nil {
		return nil, err
	}
	task := r.spec.TaskID
	if r.Status != wire.StatusRunning {
		return nil, Errf(KindConflict, "run %s is %s, not running", task, r.Status)
	}
	if p.Round != r.Round {
		return nil, Errf(KindConflict, "wrong round: the commit is for round %d, the current round of %s is %d", p.Round, task, r.Round)
	}
	if p.Fragment >= uint64(len(r.Fragments)) {
		return nil, Errf(KindInvalid, "wrong fragment: fragment %d, the model has %d fragments", p.Fragment, len(r.Fragments))
	}
	i := int(p.Fragment)
	fs := r.Fragments[i]
	if fs.Closed {
		return nil, Errf(KindConflict, "fragment %d of round %d of %s is already committed", i, r.Round, task)
	}
	now := x.blk.TimeMs
	want, k := r.SyncerAt(now)
	if want == "" {
		return nil, Errf(KindConflict, "run %s has no elected syncer", task)
	}
	if p.SyncerDID != want {
		return nil, Errf(KindUnauthorized, "round %d of %s may be committed only by %s (ticket %d at block time %d ms), not %s", r.Round, task, want, k, now, p.SyncerDID)
	}
	if !r.Due(fs, now) {
		return nil, Errf(KindConflict, "fragment %d of round %d is not due: %d of K=%d records, %d active trainers, grace window closes at %d ms",
			i, r.Round, len(fs.Records), r.spec.Quorum, r.activeTrainers(), fs.KthMs+r.spec.GraceWindowMs)
	}
	if whole, err := r.commitNeedsWholeRun(x.ctx, x.kv, i, k, x.blk.Height); err != nil {
		return nil, err
	} else if whole {
		// Attestations only for a round snapshot (a challengeable run's).
		if r, err = loadRun(x.ctx, x.kv, p.TaskID, r.Challengeable() || alwaysWholeRun); err != nil {
			return nil, err
		}
		fs = r.Fragments[i]
	}
	if r.Scorer != nil && fs.ScoreSeed == nil {
		return nil, Errf(KindConflict, "fragment %d of round %d has no scoring seed yet: the chain draws it at the first block after the fragment is due", i, r.Round)
	}
	c := p.Commit
	if err := r.checkCommit(i, &c, p.SyncerDID, uint64(k)); err != nil {
		return nil, err
	}
	if err := x.checkCopyVerdicts(task, r.Round, &c); err != nil {
		return nil, err
	}
	if err := checkSketches(r.spec, &c); err != nil {
		return nil, err
	}
	if err := x.checkStaleVerdicts(task, r.Round, r.spec.SketchDim(), &c); err != nil {
		return nil, err
	}
	claims, err := FragmentClaims(x.ctx, x.kv, task, r.Round, i)
	if err != nil {
		return nil, err
	}
	if len(p.Verdicts) != len(claims) {
		return nil, Errf(KindInvalid, "verdicts: %d given, fragment %d has %d equivocation claims", len(p.Verdicts), i, len(claims))
	}
	for j, v := range p.Verdicts {
		if v.TrainerDID != claims[j].First.TrainerDID {
			return nil, Errf(KindInvalid, "verdicts[%d] is for %s; the claims in DID order give %s", j, v.TrainerDID, claims[j].First.TrainerDID)
		}
		switch v.Verdict {
		case wire.VerdictEquivocation, wire.VerdictDuplicate, wire.VerdictUnavailable:
		default:
			return nil, Errf(KindInvalid, "verdicts[%d]: %q is not equivocation, duplicate or unavailable", j, v.Verdict)
		}
	}
	// The trainers this commit pays (its inputs are the fragment's
	// records) and those its verdicts name.
	dids := make([]string, 0, len(c.Inputs)+len(p.Verdicts))
	for _, in := range c.Inputs {
		dids = append(dids, in.TrainerDID)
	}
	for _, v := range p.Verdicts {
		dids = append(dids, v.TrainerDID)
	}
	if err := loadTrainers(x.ctx, x.kv, r, dids); err != nil {
		return nil, err
	}
	round := r.Round
	momentumBefore := fs.MomentumHash
	r.noteTurn(k)
	if err := x.closeFragment(r, i, &c); err != nil {
		return nil, err
	}
	var equivocators []string
	var digests []wire.Hash
	for j, v := range p.Verdicts {
		if v.Verdict != wire.VerdictEquivocation {
			continue
		}
		t := r.Trainer(v.TrainerDID)
		if t == nil {
			continue
		}
		equivocators = append(equivocators, t.DID)
		digests = append(digests, claims[j].Digest)
		r.Equivocations = append(r.Equivocations, claims[j].Digest)
	}
	if err := x.recordCommit(r, i, &c, momentumBefore, false, equivocators, digests); err != nil {
		return nil, err
	}
	r.LastSyncer = p.SyncerDID
	if !r.part { // a run loaded in part has another fragment open
		if err := x.maybeCloseRound(r); err != nil {
			return nil, err
		}
	}
	if _, err := x.advanceFinality(r); err != nil {
		return nil, err
	}
	if err := x.putRun(r); err != nil {
		return nil, err
	}
	return &wire.CommitFragmentResult{TaskID: task, Round: round, Fragment: p.Fragment, Status: c.Status,
		RoundClosed: r.Round != round || r.Status != wire.StatusRunning, RunStatus: r.Status}, nil
}

// checkCommit checks a syncer's fragment commit against the chain: its
// numbering, syncer and ticket, the run's rules, the weights before, the
// inputs (exactly the fragment's records in DID order) and that its status
// agrees with its content.
func (r *Run) checkCommit(i int, c *wire.FragmentCommit, syncer string, ticket uint64) error {
	fs := r.Fragments[i]
	switch {
	case c.Fragment != i:
		return Errf(KindInvalid, "commit: fragment %d, the transaction says %d", c.Fragment, i)
	case c.Syncer != syncer || c.Ticket != ticket:
		return Errf(KindInvalid, "commit: syncer %s ticket %d, the chain's current syncer is %s ticket %d", c.Syncer, c.Ticket, syncer, ticket)
	case c.Rule != r.Rule.Name || c.RuleHash != r.Rule.Hash || !sameJSONBytes(c.RuleParams, r.Rule.Params) || c.OuterHash != r.Outer.Hash:
		return Errf(KindInvalid, "commit: rule %s (sha256:%s) and outer step sha256:%s are not the run's %s (sha256:%s) and sha256:%s",
			c.Rule, c.RuleHash, c.OuterHash, r.Rule.Name, r.Rule.Hash, r.Outer.Hash)
	case !sameCodec(c.Codec, CodecRefOf(r.Codec)):
		return Errf(KindInvalid, "commit: codec %s is not the run's %s", CodecText(c.Codec), CodecText(CodecRefOf(r.Codec)))
	case c.WeightsBefore != fs.WeightsHash:
		return Errf(KindInvalid, "commit: weights_before %s, the chain's current weights of fragment %d are %s", c.WeightsBefore, i, fs.WeightsHash)
	case len(c.Reason) > maxReasonBytes:
		return Errf(KindInvalid, "commit: reason of %d bytes, limit %d", len(c.Reason), maxReasonBytes)
	}
	want := RecordInputs(fs.Records)
	if len(c.Inputs) != len(want) {
		return Errf(KindInvalid, "commit: %d inputs, fragment %d has %d records this round", len(c.Inputs), i, len(want))
	}
	kept := 0
	for j, in := range c.Inputs {
		if in.TrainerDID != want[j].TrainerDID || in.PayloadHash != want[j].PayloadHash {
			return Errf(KindInvalid, "commit: input %d is %s %s; the records in DID order give %s %s", j, in.TrainerDID, in.PayloadHash, want[j].TrainerDID, want[j].PayloadHash)
		}
		if len(in.Rejected) > maxReasonBytes {
			return Errf(KindInvalid, "commit: input %d: rejection reason of %d bytes, limit %d", j, len(in.Rejected), maxReasonBytes)
		}
		if in.Rejected != "" && in.Selected {
			return Errf(KindInvalid, "commit: input %d is both rejected and selected", j)
		}
		if in.Rejected == "" {
			kept++
		}
	}
	if err := r.checkScores(i, c); err != nil {
		return err
	}
	switch c.Status {
	case wire.FragAggregated:
		if kept < r.spec.Quorum {
			return Errf(KindInvalid, "commit: aggregated with %d inputs kept, K=%d", kept, r.spec.Quorum)
		}
		if c.WeightsAfter.IsZero() || c.MomentumAfter.IsZero() || c.AggregateHash.IsZero() {
			return Errf(KindInvalid, "commit: an aggregated fragment needs weights_after, momentum_after and aggregate_hash")
		}
	case wire.FragNoQuorum, wire.FragRuleFailed:
		if c.Status == wire.FragNoQuorum && kept >= r.spec.Quorum {
			return Errf(KindInvalid, "commit: no_quorum with %d of K=%d inputs kept", kept, r.spec.Quorum)
		}
		if c.WeightsAfter != c.WeightsBefore || !c.MomentumAfter.IsZero() || (c.Status == wire.FragNoQuorum && !c.AggregateHash.IsZero()) {
			return Errf(KindInvalid, "commit: a %s fragment keeps its weights (weights_after = weights_before, no momentum)", c.Status)
		}
	default:
		return Errf(KindInvalid, "commit: status %q (want aggregated, no_quorum or rule_failed)", c.Status)
	}
	return nil
}

// ScoringOf is the scoring header a commit of fragment i must carry: nil
// for an unscored run, or before the fragment's seed exists.
func (r *Run) ScoringOf(i int) *wire.CommitScoring {
	fs := r.Fragments[i]
	if r.Scorer == nil || fs.ScoreSeed == nil {
		return nil
	}
	sc, _ := r.spec.ScoringRef() // the posting checked it
	if sc == nil {
		return nil
	}
	out := &wire.CommitScoring{Evaluator: r.Scorer.Name, Hash: r.Scorer.Hash, Params: orJSON(r.Scorer.Params), RateBps: sc.RateBps,
		Batch: sc.Batch, Seed: *fs.ScoreSeed}
	if sc.Test != wire.ScoreTestOwnImproves {
		out.Test = sc.Test
	}
	return out
}

// ScoreWanted says whether input in of fragment i's commit must carry a
// score: the run scores, the commit aggregated, the input was kept and the
// draw (wire.ScoreSampled) picked it.
func (r *Run) ScoreWanted(i int, status string, in *wire.CommitInput) bool {
	sc := r.ScoringOf(i)
	return sc != nil && status == wire.FragAggregated && in.Rejected == "" &&
		wire.ScoreSampled(sc.Seed, r.spec.TaskID, r.Round, uint64(i), in.TrainerDID, sc.RateBps)
}

// checkScores checks a commit's scoring against the chain: an aggregated
// commit of a scored run carries the run's evaluator, rate, batch and the
// fragment's seed, and a score on exactly the kept inputs the draw picked;
// any other commit carries none. The scores' values are for re-execution
// to judge.
func (r *Run) checkScores(i int, c *wire.FragmentCommit) error {
	want := r.ScoringOf(i)
	if c.Status != wire.FragAggregated {
		want = nil
	}
	switch {
	case want == nil && c.Scoring != nil:
		return Errf(KindInvalid, "commit: scoring given, but this commit carries no scores (unscored run or not aggregated)")
	case want != nil && c.Scoring == nil:
		return Errf(KindInvalid, "commit: the run scores its inputs (%s); the commit has no scoring", want.Evaluator)
	case want != nil && (c.Scoring.Evaluator != want.Evaluator || c.Scoring.Hash != want.Hash || !sameJSONBytes(c.Scoring.Params, want.Params) ||
		c.Scoring.RateBps != want.RateBps || c.Scoring.Batch != want.Batch || c.Scoring.Seed != want.Seed || c.Scoring.Test != want.Test):
		return Errf(KindInvalid, "commit: scoring %s (sha256:%s) rate %d batch %d seed %s is not the run's %s (sha256:%s) rate %d batch %d seed %s",
			c.Scoring.Evaluator, c.Scoring.Hash, c.Scoring.RateBps, c.Scoring.Batch, c.Scoring.Seed, want.Evaluator, want.Hash, want.RateBps, want.Batch, want.Seed)
	}
	for j := range c.Inputs {
		in := &c.Inputs[j]
		wanted := want != nil && r.ScoreWanted(i, c.Status, in)
		switch {
		case wanted && in.Score == nil:
			return Errf(KindInvalid, "commit: input %d (%s) is drawn for scoring and has no score", j, in.TrainerDID)
		case !wanted && in.Score != nil:
			return Errf(KindInvalid, "commit: input %d (%s) has a score but is not a kept input drawn for scoring", j, in.TrainerDID)
		case in.Score != nil && len(in.Score.Failed) > maxReasonBytes:
			return Errf(KindInvalid, "commit: input %d: evaluator failure of %d bytes, limit %d", j, len(in.Score.Failed), maxReasonBytes)
		case in.Score != nil && in.Score.Failed != "" && (in.Score.Pass || in.Score.OwnBefore|in.Score.OwnAfter|in.Score.CtlBefore|in.Score.CtlAfter != 0):
			return Errf(KindInvalid, "commit: input %d: an evaluator failure has zero losses and does not pass", j)
		}
	}
	return nil
}

func sameCodec(a, b *wire.CodecRef) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Name == b.Name && a.Hash == b.Hash && sameJSONBytes(a.Params, b.Params)
}

// closeFragment records fragment i's commit: the fragment is closed, its
// weights move on when aggregated, and every input that was not rejected
// counts for the round; pay and copy slashes follow settleInputs (mpay.go).
func (x *mtx) closeFragment(r *Run, i int, c *wire.FragmentCommit) error {
	fs := r.Fragments[i]
	if c.Inputs == nil {
		c.Inputs = []wire.CommitInput{}
	}
	c.RuleParams = orJSON(c.RuleParams)
	fs.Closed = true
	fs.Commit = c
	r.noteCommitTicket(c.Ticket)
	if c.Status == wire.FragAggregated {
		fs.WeightsHash = c.WeightsAfter
		fs.MomentumHash = c.MomentumAfter
	}
	for _, in := range c.Inputs {
		if in.Rejected != "" {
			continue
		}
		t := r.Trainer(in.TrainerDID)
		if t == nil {
			continue
		}
		t.RoundAccepted++
	}
	return nil
}

// maybeCloseRound closes the round once every fragment is closed.
func (x *mtx) maybeCloseRound(r *Run) error {
	if r.Status != wire.StatusRunning {
		return nil
	}
	for _, fs := range r.Fragments {
		if !fs.Closed {
			return nil
		}
	}
	return x.closeRound(r)
}

// closeRound writes the round commit from the fragment commits, applies
// missed rounds, evictions and membership changes, and opens the next
// round at this block or seals the run.
func (x *mtx) closeRound(r *Run) error {
	task := r.spec.TaskID
	sl := r.spec.Slash()
	rc := wire.RoundCommit{TaskID: task, Round: r.Round, Missed: []string{}, Evicted: []string{}, Joined: orStrs(r.Joined), Left: orStrs(r.Left),
		Equivocations: orHashes(r.Equivocations)}
	hashes := make([]wire.Hash, len(r.Fragments))
	for i, fs := range r.Fragments {
		rc.Fragments = append(rc.Fragments, *fs.Commit)
		hashes[i] = fs.WeightsHash
	}
	rc.ModelHash = ModelHash(hashes)
	for _, t := range r.Trainers {
		if t.Status != wire.TrainerActive {
			continue
		}
		if t.RoundAccepted > 0 {
			t.ConsecMissed = 0
			continue
		}
		t.ConsecMissed++
		rc.Missed = append(rc.Missed, t.DID)
		if t.ConsecMissed >= uint64(sl.MaxMissedRounds) {
			t.Status = wire.TrainerEvicted
			t.Shards = nil
			rc.Evicted = append(rc.Evicted, t.DID)
		}
	}
	ch, err := audit.RoundCommitHash(&rc)
	if err != nil {
		return err
	}
	if err := x.putJSON(KSTranscript, commitKey(task, r.Round), rc); err != nil {
		return err
	}
	r.Roots = append(r.Roots, ch)
	x.m.log.Info("round committed", "task", task, "round", r.Round, "model", rc.ModelHash.String()[:12], "missed", len(rc.Missed), "evicted", len(rc.Evicted), "height", x.blk.Height)
	// The round's effects wait for it to be final (advanceFinality, which
	// every caller runs next in the same transaction: a run without a
	// challenge window settles the round there, before the block ends).
	r.Pending = append(r.Pending, pendingRound{Round: r.Round, FinalAt: x.blk.Height + r.Window})
	last := r.Round+1 >= uint64(r.spec.MaxRounds)
	if last {
		// The run seals once every round is final (advanceFinality).
		r.AwaitingFinal = true
		if r.Challengeable() {
			// Its fragments stay as committed until then (as they always
			// have on a network: the sealed state keeps them).
			return nil
		}
	}
	var joinedNext []string
	for _, t := range r.Trainers {
		t.RoundAccepted = 0
		if t.Status == wire.TrainerJoining {
			t.Status = wire.TrainerActive
			joinedNext = append(joinedNext, t.DID)
		}
	}
	r.Joined, r.Left, r.Equivocations = nil, nil, nil
	for _, fs := range r.Fragments {
		fs.Records, fs.KthMs, fs.Closed, fs.Commit, fs.ScoreSeed = nil, 0, false, nil, nil
	}
	if last {
		return nil
	}
	r.foldTurns()
	r.Round++
	r.RoundMs = x.blk.TimeMs
	r.RoundAnchor = append(wire.HexBytes{}, x.blk.Hash...)
	r.RoundModel = rc.ModelHash
	r.Joined = joinedNext // recorded in the next round's commit
	r.assignShards()
	return x.snapshotRound(r)
}

// seal settles the run: each trainer gets its rewardShares share of the
// escrowed pool and its stake back, the rest returns to the sponsor; the
// run root goes into the run log. The receipt is then fully determined by
// chain state except the syncer's signature (signReceipt).
func (x *mtx) seal(r *Run, finalModel wire.Hash) error {
	task := r.spec.TaskID
	pool, err := x.lt.balance(AcctEscrow(task))
	if err != nil {
		return err
	}
	pool = new(big.Int).Set(pool)
	weights := make([]*big.Int, len(r.Trainers))
	for i, t := range r.Trainers {
		weights[i] = r.PaidWeight(t)
	}
	shares := PayoutShares(pool, weights)
	payouts := []wire.Payout{}
	paid := new(big.Int)
	for i, t := range r.Trainers { // sorted by DID
		if err := x.lt.transfer(AcctEscrow(task), AcctDID(t.DID), shares[i], "reward"); err != nil {
			return err
		}
		paid.Add(paid, shares[i])
		t.Reward = shares[i].String()
		refund, err := x.lt.balance(acctStake(task, t.DID))
		if err != nil {
			return err
		}
		refund = new(big.Int).Set(refund)
		if err := x.lt.transfer(acctStake(task, t.DID), AcctDID(t.DID), refund, "stake refund at seal"); err != nil {
			return err
		}
		payouts = append(payouts, wire.Payout{DID: t.DID, Reward: shares[i].String(), Refund: refund.String(), Slashed: orDefault(t.Slashed, "0"), WeightSum: weights[i].String()})
	}
	rest := new(big.Int).Sub(pool, paid)
	if err := x.lt.transfer(AcctEscrow(task), AcctDID(r.spec.SponsorDID), rest, "unpaid remainder back to sponsor"); err != nil {
		return err
	}
	root := audit.RunRoot(r.SpecHash, r.Roots, finalModel)
	idx, err := RunLogSize(x.ctx, x.kv)
	if err != nil {
		return err
	}
	x.set(KSMeta, runLogKey(idx), RunLogLeaf(task, root))
	x.set(KSMeta, keyRunLogN, u64Bytes(idx+1))
	r.Seal = &sealState{FinalModel: finalModel, RunRoot: root, TimeMs: x.blk.TimeMs, Height: x.blk.Height, RunLogIndex: idx,
		Payouts: payouts, SponsorRefund: rest.String()}
	r.Status = wire.StatusSealed
	x.del(KSMeta, activeKey(task))
	x.set(KSMeta, unsignedKey(task), []byte{})
	x.m.log.Info("run sealed", "task", task, "run_root", root, "final_model", finalModel, "height", x.blk.Height)
	return nil
}

// PayoutShares is the settlement rule of the reward pool: each trainer gets
// pool × weight / Σweight (integer division, the remainder back to the
// sponsor), weight being the summed fragment size of its accepted inputs.
func PayoutShares(pool *big.Int, weights []*big.Int) []*big.Int {
	total := new(big.Int)
	for _, w := range weights {
		total.Add(total, w)
	}
	out := make([]*big.Int, len(weights))
	for i, w := range weights {
		share := new(big.Int)
		if total.Sign() > 0 {
			share.Mul(pool, w).Div(share, total)
		}
		out[i] = share
	}
	return out
}

// unsignedSealedRun loads run task for a receipt signature: only a sealed
// run whose receipt is not signed yet (the ante's signer table asks; the
// handler stores the run the ante loaded).
func (x *mtx) unsignedSealedRun(task string) (*Run, error) {
	r, err := LoadRun(x.ctx, x.kv, task)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusSealed || r.Seal == nil {
		return nil, Errf(KindConflict, "run %s is %s: only a sealed run's receipt is signed", task, r.Status)
	}
	if r.Seal.Signed {
		return nil, Errf(KindConflict, "the receipt of %s is already signed by %s", task, r.Seal.SignedBy)
	}
	return r, nil
}

// signReceipt stores the receipt the ante built (b: the run, the chain
// receipt and the preimage whose signature the ante verified; see txAuth)
// with its signature. The ante refused what its entry checks (a run that
// is not sealed or already signed, a bad syncer_did, a receipt that cannot
// be built, a bad signature) before this runs; what is left is the
// engine's bounds and who may sign at this block's time.
func (x *mtx) signReceipt(p *wire.SignReceiptTx, b *builtReceipt) (*wire.SignReceiptResult, error) {
	if b == nil {
		return nil, fmt.Errorf("sign_receipt %s: the ante built no receipt", p.TaskID)
	}
	if len(p.Engine) > maxEngineBytes || !json.Valid(p.Engine) {
		return nil, Errf(KindInvalid, "engine: want a JSON value of at most %d bytes", maxEngineBytes)
	}
	r, rc := b.run, b.rc
	if want := r.ReceiptSignerAt(x.blk.TimeMs); p.SyncerDID != want {
		return nil, Errf(KindUnauthorized, "the receipt of %s may be signed only by %s at block time %d ms, not %s", p.TaskID, want, x.blk.TimeMs, p.SyncerDID)
	}
	rc.Signature = append(wire.HexBytes{}, p.Signature...)
	if err := x.putJSON(KSReceipts, RunKey(p.TaskID), rc); err != nil {
		return nil, err
	}
	r.Seal.Signed, r.Seal.SignedBy = true, p.SyncerDID
	x.del(KSMeta, unsignedKey(p.TaskID))
	if err := x.putRun(r); err != nil {
		return nil, err
	}
	return &wire.SignReceiptResult{TaskID: p.TaskID, RunRoot: r.Seal.RunRoot, SyncerDID: p.SyncerDID}, nil
}

// ChainReceipt is the receipt of a sealed run as the chain's state gives it
// (BuildReceipt over the run's transcript, settlement and election), for
// signer with its engine profile and evidence digest, unsigned, with its
// transcript and attestation-list blobs. The signing syncer's node and the
// chain build it with this one function.
func ChainReceipt(ctx context.Context, kv KV, task, signer string, engine json.RawMessage, evidenceDigest *wire.Hash) (*wire.Receipt, []byte, []byte, error) {
	r, err := LoadRun(ctx, kv, task)
	if err != nil {
		return nil, nil, nil, err
	}
	if r.Seal == nil {
		return nil, nil, nil, Errf(KindConflict, "run %s is %s, not sealed", task, r.Status)
	}
	return chainReceipt(ctx, kv, r, signer, engine, evidenceDigest)
}

func chainReceipt(ctx context.Context, kv KV, r *Run, signer string, engine json.RawMessage, evidenceDigest *wire.Hash) (*wire.Receipt, []byte, []byte, error) {
	task := r.spec.TaskID
	transcript := make([]wire.RoundCommit, 0, len(r.Roots))
	for round := uint64(0); round < uint64(len(r.Roots)); round++ {
		raw, err := kv.Get(ctx, KSTranscript, commitKey(task, round))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("transcript of %s round %d: %w", task, round, err)
		}
		var rc wire.RoundCommit
		if err := json.Unmarshal(raw, &rc); err != nil {
			return nil, nil, nil, fmt.Errorf("transcript of %s round %d: %w", task, round, err)
		}
		transcript = append(transcript, rc)
	}
	chs, err := RunChallenges(ctx, kv, task)
	if err != nil {
		return nil, nil, nil, err
	}
	var entries []wire.ReceiptChallenge
	for i := range chs {
		entries = append(entries, chs[i].ReceiptEntry())
	}
	atts := append([]wire.Hash{}, r.Attestations...)
	if evidenceDigest != nil {
		atts = append(atts, *evidenceDigest)
	}
	rc, blob, err := audit.BuildReceipt(audit.ReceiptInput{TaskSpec: r.Spec, InitModelHash: r.InitModel, InitWeightsHash: r.InitFile, FinalModelHash: r.Seal.FinalModel,
		Rounds: transcript, RoundRoots: r.Roots, PluginHashes: r.Plugins, Engine: append(json.RawMessage(nil), engine...), AttestationDigests: atts,
		Election: r.Election, Rewards: r.Seal.Payouts, SponsorRefund: r.Seal.SponsorRefund, SyncerDID: signer, Challenges: entries})
	if err != nil {
		return nil, nil, nil, Errf(KindInvalid, "%v", err)
	}
	list, _ := audit.AttestationList(atts)
	return rc, blob, list, nil
}

// ChainChallengeList is the challenge list blob of a run's receipt (the
// JCS array of its challenges' receipt entries), as the chain's state gives
// it; the signing node keeps it as a blob (getPayload serves it).
func ChainChallengeList(ctx context.Context, kv KV, task string) ([]byte, error) {
	chs, err := RunChallenges(ctx, kv, task)
	if err != nil {
		return nil, err
	}
	entries := make([]wire.ReceiptChallenge, len(chs))
	for i := range chs {
		entries[i] = chs[i].ReceiptEntry()
	}
	list, _, _, err := audit.ChallengeList(entries)
	return list, err
}
