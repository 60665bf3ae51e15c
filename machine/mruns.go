package machine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"

	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Run lifecycle transitions: post, initial weights, election proofs,
// enrolment, leaving, cancellation and expiry, and the start.

// Limits on a posting's layout.
const (
	maxLayoutTensors = 100000
	maxFragmentN     = 1 << 40
)

func (x *mtx) postTask(p *wire.PostTaskTx) (*wire.PostTaskResult, error) {
	if len(p.Spec) == 0 {
		return nil, Errf(KindInvalid, "spec is missing")
	}
	spec, canon, err := wire.ParseSpec(p.Spec)
	if err != nil {
		return nil, Errf(KindInvalid, "%v", err)
	}
	if err := spec.Validate(); err != nil {
		return nil, Errf(KindInvalid, "%v", err)
	}
	if _, err := did.Parse(spec.SponsorDID); err != nil {
		return nil, Errf(KindInvalid, "spec: sponsor_did must be a resolvable DID to sign the posting: %v", err)
	}
	if spec.Tier != wire.TierOpen && len(spec.AttestationPolicy) == 0 {
		return nil, Errf(KindInvalid, "spec: tier %s needs an attestation_policy", spec.Tier)
	}
	if _, err := x.kv.Get(x.ctx, KSRuns, RunKey(spec.TaskID)); err == nil {
		return nil, Errf(KindConflict, "a run with task_id %q already exists", spec.TaskID)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	specHash := wire.SpecHash(canon)
	if err := x.checkRules(spec, p); err != nil {
		return nil, err
	}
	if err := x.checkPostingFloors(spec); err != nil {
		return nil, err
	}
	r := &Run{Spec: canon, SpecHash: specHash, Status: wire.StatusAwaiting, Rule: p.Rule, Verifiers: p.Verifiers, Outer: p.Outer,
		Codec: p.Codec, Scorer: p.Scorer, spec: spec, PostedMs: x.blk.TimeMs, PostedHeight: x.blk.Height, RoundMs: x.blk.TimeMs,
		RoundAnchor: append(wire.HexBytes{}, x.blk.Hash...), Trainers: []*RunTrainer{}, Roots: []wire.Hash{}}
	refs := []RuleRef{p.Rule, p.Outer}
	refs = append(refs, p.Verifiers...)
	if p.Codec != nil {
		refs = append(refs, *p.Codec)
	}
	if p.Scorer != nil {
		refs = append(refs, *p.Scorer)
	}
	r.Plugins = refHashes(refs)
	params, err := x.params()
	if err != nil {
		return nil, err
	}
	r.Window = spec.ChallengeWindow(params.ChallengeWindow())
	switch {
	case p.Init != nil:
		if p.Init.File != p.InitWeightsHash {
			return nil, Errf(KindInvalid, "init.file %s is not the signed init_weights_hash %s", p.Init.File, p.InitWeightsHash)
		}
		if err := x.checkBondCoversReexec(r, p.Init); err != nil {
			return nil, err
		}
		if err := r.setInit(p.Init); err != nil {
			return nil, err
		}
	case !p.InitWeightsHash.IsZero():
		return nil, Errf(KindInvalid, "init_weights_hash %s without the weights' layout (init)", p.InitWeightsHash)
	}
	fee, err := x.fee("posting")
	if err != nil {
		return nil, err
	}
	reward, _ := wire.ParseAmount(spec.RewardPool)
	if err := x.lt.transfer(AcctDID(spec.SponsorDID), acctIssuer, fee, "posting fee (burned)"); err != nil {
		return nil, err
	}
	if err := x.lt.transfer(AcctDID(spec.SponsorDID), AcctEscrow(spec.TaskID), reward, "escrow reward pool"); err != nil {
		return nil, err
	}
	x.set(KSMeta, activeKey(spec.TaskID), []byte{})
	if err := x.putRun(r); err != nil {
		return nil, err
	}
	x.m.log.Info("task posted", "task", spec.TaskID, "M", spec.TrainerCount, "K", spec.Quorum, "F", spec.Architecture.FragmentCount, "rule", p.Rule.Name, "height", x.blk.Height)
	return &wire.PostTaskResult{TaskID: spec.TaskID, SpecHash: specHash, Status: r.Status}, nil
}

func refHashes(refs []RuleRef) []wire.Hash {
	seen := map[wire.Hash]bool{}
	var out []wire.Hash
	for _, r := range refs {
		if !seen[r.Hash] {
			seen[r.Hash] = true
			out = append(out, r.Hash)
		}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i][:], out[j][:]) < 0 })
	return out
}

// checkRules checks a posting's resolved rule references against its spec
// and against what the chain knows: each is a built-in (by module hash and
// name) or a plugin published on chain. Resolving names and probing
// parameters is the receiving node's work (it has the plugin host).
func (x *mtx) checkRules(spec *wire.TaskSpec, p *wire.PostTaskTx) error {
	ref := strings.TrimSpace(spec.AggregationRef())
	head := ref
	if i := strings.IndexByte(ref, '{'); i >= 0 {
		head = strings.TrimSpace(ref[:i])
	}
	if strings.HasPrefix(head, "sha256:") {
		h, err := wire.ParseHash(head)
		if err != nil || h != p.Rule.Hash {
			return Errf(KindInvalid, "rule: the spec names %s, the posting resolved sha256:%s", head, p.Rule.Hash)
		}
	} else if head != p.Rule.Name {
		return Errf(KindInvalid, "rule: the spec names %s, the posting resolved %s", head, p.Rule.Name)
	}
	if err := x.knownPlugin("rule", p.Rule); err != nil {
		return err
	}
	if spec.RobustRequiresVerified && p.Rule.Name != "Mean" && spec.Tier == wire.TierOpen {
		return Errf(KindInvalid, "spec: robust rule %s is marked to require tier Verified or above, tier is Open", p.Rule.Name)
	}
	if len(p.Verifiers) != len(spec.Verification) && len(p.Verifiers) != len(spec.Verification)+1 {
		return Errf(KindInvalid, "verifiers: %d resolved for the spec's %d", len(p.Verifiers), len(spec.Verification))
	}
	finite := false
	for i, v := range p.Verifiers {
		if err := x.knownPlugin(fmt.Sprintf("verifiers[%d]", i), v); err != nil {
			return err
		}
		finite = finite || v.Name == FiniteVerifier
	}
	if !finite {
		return Errf(KindInvalid, "verifiers: the %s verifier is missing (every run has it)", FiniteVerifier)
	}
	if err := x.knownPlugin("outer", p.Outer); err != nil {
		return err
	}
	c, err := spec.CompressionRef()
	if err != nil {
		return Errf(KindInvalid, "%v", err)
	}
	switch {
	case c == nil && p.Codec != nil:
		return Errf(KindInvalid, "codec: the spec has no compression, the posting resolved %s", p.Codec.Name)
	case c != nil && p.Codec == nil:
		return Errf(KindInvalid, "codec: the spec compresses with %s, the posting resolved no codec", c.Codec)
	case c != nil:
		if err := x.knownPlugin("codec", *p.Codec); err != nil {
			return err
		}
	}
	return x.checkScorer(spec, p)
}

// checkScorer checks a posting's resolved evaluator against the spec's
// scoring field: present exactly when the spec scores, naming the spec's
// evaluator (by id or module hash), a built-in or published plugin.
func (x *mtx) checkScorer(spec *wire.TaskSpec, p *wire.PostTaskTx) error {
	sc, err := spec.ScoringRef()
	if err != nil {
		return Errf(KindInvalid, "%v", err)
	}
	switch {
	case sc == nil && p.Scorer != nil:
		return Errf(KindInvalid, "scorer: the spec does not score, the posting resolved %s", p.Scorer.Name)
	case sc == nil:
		return nil
	case p.Scorer == nil:
		return Errf(KindInvalid, "scorer: the spec scores with %s, the posting resolved no evaluator", sc.Evaluator)
	}
	if h, ok := strings.CutPrefix(sc.Evaluator, "sha256:"); ok {
		if want, err := wire.ParseHash(h); err != nil || want != p.Scorer.Hash {
			return Errf(KindInvalid, "scorer: the spec names %s, the posting resolved sha256:%s", sc.Evaluator, p.Scorer.Hash)
		}
	} else if sc.Evaluator != p.Scorer.Name {
		return Errf(KindInvalid, "scorer: the spec names %s, the posting resolved %s", sc.Evaluator, p.Scorer.Name)
	}
	if sc.Corpus.IsZero() {
		return Errf(KindInvalid, "spec: scoring: corpus is required (the content hash of the CSV corpus the evaluator draws windows from)")
	}
	return x.knownPlugin("scorer", *p.Scorer)
}

// setInit checks an initial-weights layout against the spec and installs it.
func (r *Run) setInit(l *wire.InitLayout) error {
	if l.File.IsZero() {
		return Errf(KindInvalid, "init: the weights file hash is zero")
	}
	if len(l.Fragments) != r.spec.Architecture.FragmentCount {
		return Errf(KindInvalid, "init weights: %d fragments, the spec has fragment_count %d", len(l.Fragments), r.spec.Architecture.FragmentCount)
	}
	prev, n := "", 0
	hashes := make([]wire.Hash, len(l.Fragments))
	frags := make([]*RunFragment, len(l.Fragments))
	var dtype string
	for i, f := range l.Fragments {
		if len(f.Tensors) == 0 {
			return Errf(KindInvalid, "init weights: fragment %d has no tensors", i)
		}
		if f.Dtype != string(F32) && f.Dtype != string(BF16) {
			return Errf(KindInvalid, "init weights: dtype %s unsupported (want F32 or BF16)", f.Dtype)
		}
		if dtype == "" {
			dtype = f.Dtype
		} else if f.Dtype != dtype {
			return Errf(KindInvalid, "init weights: fragment %d is %s, fragment 0 is %s; all tensors must share one dtype", i, f.Dtype, dtype)
		}
		var total int64
		for _, t := range f.Tensors {
			n++
			if n > maxLayoutTensors {
				return Errf(KindInvalid, "init weights: more than %d tensors", maxLayoutTensors)
			}
			if t.Name == "" || (prev != "" && t.Name <= prev) {
				return Errf(KindInvalid, "init weights: tensor %q is out of order (fragments hold tensors sorted by name)", t.Name)
			}
			prev = t.Name
			if t.Dtype != f.Dtype {
				return Errf(KindInvalid, "init weights: tensor %q is %s in a %s fragment", t.Name, t.Dtype, f.Dtype)
			}
			e := int64(1)
			for _, d := range t.Shape {
				if d < 0 || (d > 0 && e > maxFragmentN/d) {
					return Errf(KindInvalid, "init weights: tensor %q has shape %v", t.Name, t.Shape)
				}
				e *= d
			}
			total += e
			if total > maxFragmentN {
				return Errf(KindInvalid, "init weights: fragment %d holds more than %d values", i, int64(maxFragmentN))
			}
		}
		if total != f.N || f.N == 0 {
			return Errf(KindInvalid, "init weights: fragment %d: n %d, its tensors hold %d values", i, f.N, total)
		}
		if f.WeightsHash.IsZero() {
			return Errf(KindInvalid, "init weights: fragment %d has no weights hash", i)
		}
		hashes[i] = f.WeightsHash
		frags[i] = &RunFragment{FragLayout: FragLayout{Tensors: f.Tensors, Dtype: Dtype(f.Dtype), N: f.N}, WeightsHash: f.WeightsHash}
	}
	if m := ModelHash(hashes); m != l.Model {
		return Errf(KindInvalid, "init weights: model hash %s, the fragments give %s", l.Model, m)
	}
	r.Fragments = frags
	r.HasInit = true
	r.InitModel = l.Model
	r.InitFile = l.File
	r.RoundModel = l.Model
	return nil
}

func (x *mtx) setInitWeights(p *wire.SetInitWeightsTx) (*wire.PostTaskResult, error) {
	r, err := loadRunBeforeStart(x.ctx, x.kv, p.TaskID, "", true)
	if err != nil {
		return nil, err
	}
	if r.HasInit {
		return nil, Errf(KindConflict, "run %s already has initial weights (model %s)", p.TaskID, r.InitModel)
	}
	if r.Status != wire.StatusAwaiting {
		return nil, Errf(KindConflict, "run %s is %s: initial weights can only be set before it starts", p.TaskID, r.Status)
	}
	if err := x.checkBondCoversReexec(r, &p.Init); err != nil {
		return nil, err
	}
	if err := r.setInit(&p.Init); err != nil {
		return nil, err
	}
	if err := x.maybeStart(r); err != nil {
		return nil, err
	}
	if err := x.putRun(r); err != nil {
		return nil, err
	}
	return &wire.PostTaskResult{TaskID: p.TaskID, SpecHash: r.SpecHash, Status: r.Status}, nil
}

func (x *mtx) enroll(p *wire.EnrollTx) (*wire.EnrollResult, error) {
	if err := parseDIDField("trainer_did", p.TrainerDID); err != nil {
		return nil, err
	}
	stake, err := parseAmountField("stake", p.Stake)
	if err != nil {
		return nil, err
	}
	if stake.Sign() == 0 {
		return nil, Errf(KindInvalid, "stake is \"0\": a trainer must lock a positive stake (slashing is a fraction of it)")
	}
	r, err := loadRunBeforeStart(x.ctx, x.kv, p.TaskID, p.TrainerDID, false)
	if err != nil {
		return nil, err
	}
	if r.Status == wire.StatusSealed || r.Status == wire.StatusCancelled {
		return nil, Errf(KindConflict, "run %s is %s", p.TaskID, r.Status)
	}
	if t := r.Trainer(p.TrainerDID); t != nil && (t.Status == wire.TrainerActive || t.Status == wire.TrainerJoining) {
		return nil, Errf(KindConflict, "%s is already enrolled in %s", p.TrainerDID, p.TaskID)
	} else if t != nil && t.Status == wire.TrainerEvicted {
		return nil, Errf(KindConflict, "%s was evicted from %s and cannot rejoin", p.TrainerDID, p.TaskID)
	}
	if c := r.enrolled(); c >= r.spec.TrainerCount {
		return nil, Errf(KindConflict, "run %s is full: %d of M=%d trainers enrolled", p.TaskID, c, r.spec.TrainerCount)
	}
	if r.Trainer(p.TrainerDID) == nil {
		n, err := r.settlementLines(x.ctx, x.kv)
		if err != nil {
			return nil, err
		}
		if n >= wire.MaxTrainers {
			return nil, Errf(KindConflict, "run %s has settlement lines for %d trainers (those enrolled and those who left), the most a receipt holds: no new trainer can join", p.TaskID, n)
		}
	}
	if err := x.checkStakeFloor(stake); err != nil {
		return nil, err
	}
	if r.spec.MinStake != "" {
		if ms, _ := wire.ParseAmount(r.spec.MinStake); stake.Cmp(ms) < 0 {
			return nil, Errf(KindInvalid, "stake %s is below the run's min_stake %s", stake, ms)
		}
	}
	if err := x.verifyEvidence(r, p.Evidence, p.TrainerDID, 0, r.InitModel, wire.Hash{}); err != nil {
		return nil, err
	}
	if p.Evidence != nil {
		r.Attestations = append(r.Attestations, p.Evidence.Digest)
	}
	if err := x.lt.transfer(AcctDID(p.TrainerDID), acctStake(p.TaskID, p.TrainerDID), stake, "enrolment stake"); err != nil {
		return nil, err
	}
	t := r.Trainer(p.TrainerDID)
	if t == nil {
		t = &RunTrainer{DID: p.TrainerDID, Weight: "0", Reward: "0", Slashed: "0", Stake: "0"}
		r.addTrainer(t)
	}
	// The stake account was emptied when the trainer left, so the stake of
	// this enrolment is exactly what is locked now.
	t.Stake = stake.String()
	if r.Status == wire.StatusAwaiting {
		t.Status = wire.TrainerActive
		t.JoinedRound = 0
		if r.part {
			r.nActive++ // t was new or had left: the header's count (putRun)
		}
	} else {
		t.Status = wire.TrainerJoining
		t.JoinedRound = r.Round + 1
	}
	if err := x.maybeStart(r); err != nil {
		return nil, err
	}
	if err := x.putRun(r); err != nil {
		return nil, err
	}
	return enrollResult(r, t), nil
}

// checkEvidenceRef: Verified and Confidential runs need evidence (verified
// by every validator: verifyEvidence), Open runs take none.
func (r *Run) checkEvidenceRef(e *wire.EvidenceRef) error {
	if r.spec.Tier == wire.TierOpen {
		if e != nil {
			return Errf(KindInvalid, "evidence: run %s is tier Open and takes no attestation evidence", r.spec.TaskID)
		}
		return nil
	}
	if e == nil {
		return Errf(KindAttestation, "tier %s: attestation evidence is required", r.spec.Tier)
	}
	if e.Hash.IsZero() || e.Digest.IsZero() || e.Size == 0 {
		return Errf(KindInvalid, "evidence: hash, size and digest are required")
	}
	return nil
}

func enrollResult(r *Run, t *RunTrainer) *wire.EnrollResult {
	shards := orEmpty(t.Shards)
	res := &wire.EnrollResult{TaskID: r.spec.TaskID, TrainerDID: t.DID, Status: t.Status, Shards: shards, FromRound: t.JoinedRound,
		RunStatus: r.Status, ShardAssignments: shards, ShardsFromRound: r.shardsFrom(t)}
	if len(shards) == 0 {
		switch {
		case r.Status == wire.StatusAwaiting:
			res.ShardsNote = fmt.Sprintf("shards are dealt when the run starts (%d of M=%d trainers enrolled); poll get-run", r.enrolled(), r.spec.TrainerCount)
		case t.Status == wire.TrainerJoining:
			res.ShardsNote = fmt.Sprintf("shards are dealt when you become active at round %d; poll get-run", t.JoinedRound)
		}
	}
	return res
}

// shardsFrom is the round from which t's shard assignment applies.
func (r *Run) shardsFrom(t *RunTrainer) uint64 {
	switch {
	case r.Status == wire.StatusAwaiting:
		return 0
	case t.Status == wire.TrainerJoining:
		return t.JoinedRound
	default:
		return r.Round
	}
}

func (x *mtx) leave(p *wire.LeaveParams) (*wire.EnrollResult, error) {
	r, err := loadRunWithTrainer(x.ctx, x.kv, p.TaskID, p.TrainerDID)
	if err != nil {
		return nil, err
	}
	t := r.Trainer(p.TrainerDID)
	if t == nil || (t.Status != wire.TrainerActive && t.Status != wire.TrainerJoining) {
		return nil, Errf(KindNotFound, "%s is not enrolled in %s", p.TrainerDID, p.TaskID)
	}
	if r.Status == wire.StatusSealed || r.Status == wire.StatusCancelled {
		return nil, Errf(KindConflict, "run %s is %s", p.TaskID, r.Status)
	}
	if r.Status == wire.StatusRunning {
		why, err := x.pendingPenalty(r, t.DID)
		if err != nil {
			return nil, err
		}
		if why != "" {
			return nil, Errf(KindConflict, "%s cannot leave %s yet: %s", t.DID, p.TaskID, why)
		}
	}
	if err := x.refund(r, t, "stake refund"); err != nil {
		return nil, err
	}
	if r.part && t.Status == wire.TrainerActive {
		r.nActive-- // the header's count (putRun)
	}
	t.Status = wire.TrainerLeft
	t.Shards = nil
	if r.Status == wire.StatusRunning {
		r.Left = append(r.Left, t.DID)
	}
	if err := x.putRun(r); err != nil {
		return nil, err
	}
	return &wire.EnrollResult{TaskID: p.TaskID, TrainerDID: p.TrainerDID, Status: t.Status, Shards: []int{}, ShardAssignments: []int{},
		FromRound: r.Round, RunStatus: r.Status}, nil
}

func (x *mtx) refund(r *Run, t *RunTrainer, memo string) error {
	bal, err := x.lt.balance(acctStake(r.spec.TaskID, t.DID))
	if err != nil {
		return err
	}
	return x.lt.transfer(acctStake(r.spec.TaskID, t.DID), AcctDID(t.DID), new(big.Int).Set(bal), memo)
}

// slash moves bps of a trainer's enrolled stake (capped at what is left)
// from its stake account into the run's escrow, where it joins the pool.
func (x *mtx) slash(r *Run, t *RunTrainer, b int, why string) error {
	if b <= 0 {
		return nil
	}
	amt := bps(bigOf(t.Stake), b)
	left, err := x.lt.balance(acctStake(r.spec.TaskID, t.DID))
	if err != nil {
		return err
	}
	if amt.Cmp(left) > 0 {
		amt = new(big.Int).Set(left)
	}
	if err := x.lt.transfer(acctStake(r.spec.TaskID, t.DID), AcctEscrow(r.spec.TaskID), amt, "slash: "+why); err != nil {
		return err
	}
	t.Slashed = new(big.Int).Add(bigOf(t.Slashed), amt).String()
	x.m.log.Info("trainer slashed", "task", r.spec.TaskID, "trainer", t.DID, "amount", amt, "why", why)
	return nil
}

func (x *mtx) cancelRun(p *wire.CancelRunParams) (*wire.CancelRunResult, error) {
	r, err := LoadRun(x.ctx, x.kv, p.TaskID)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusAwaiting {
		return nil, Errf(KindConflict, "run %s is %s: only a run still awaiting enrolment can be cancelled", p.TaskID, r.Status)
	}
	return x.endUnstarted(r, CancelBySponsor)
}

// endUnstarted refunds the escrow and every enrolled stake of a run that
// never started and marks it cancelled.
func (x *mtx) endUnstarted(r *Run, why string) (*wire.CancelRunResult, error) {
	esc, err := x.lt.balance(AcctEscrow(r.spec.TaskID))
	if err != nil {
		return nil, err
	}
	refunded := new(big.Int).Set(esc)
	if err := x.lt.transfer(AcctEscrow(r.spec.TaskID), AcctDID(r.spec.SponsorDID), refunded, "run cancelled: escrow refund"); err != nil {
		return nil, err
	}
	stakes := 0
	for _, t := range r.Trainers {
		if t.Status != wire.TrainerActive && t.Status != wire.TrainerJoining {
			continue
		}
		if err := x.refund(r, t, "stake refund"); err != nil {
			return nil, err
		}
		t.Status = wire.TrainerLeft
		t.Shards = nil
		stakes++
	}
	r.Status = wire.StatusCancelled
	r.CancelReason = why
	x.del(KSMeta, activeKey(r.spec.TaskID))
	if err := x.putRun(r); err != nil {
		return nil, err
	}
	return &wire.CancelRunResult{TaskID: r.spec.TaskID, Status: r.Status, Refunded: refunded.String(), StakesRefunded: stakes}, nil
}

func (x *mtx) electionProof(p *wire.ElectionProofParams) (*wire.ElectionProofResult, error) {
	d, err := did.Parse(p.DID)
	if err != nil {
		return nil, Errf(KindInvalid, "did: %v", err)
	}
	r, err := loadRunBeforeStart(x.ctx, x.kv, p.TaskID, "", false)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusAwaiting {
		return nil, Errf(KindConflict, "run %s is %s: its election is over", p.TaskID, r.Status)
	}
	c, err := x.candidate(p.DID)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, Errf(KindNotFound, "%s is not a registered syncer candidate (tenzro syncer register)", p.DID)
	}
	out, err := vrf.Verify(d.Key, p.Proof, election.Alpha(r.spec.TaskID, r.SpecHash))
	if err != nil {
		return nil, Errf(KindInvalid, "election proof does not verify for %s over run %s's alpha: %v", p.DID, p.TaskID, err)
	}
	x.set(KSMeta, ProofKey(p.TaskID, p.DID), append([]byte(nil), p.Proof...))
	if err := x.maybeStart(r); err != nil {
		return nil, err
	}
	if r.Status == wire.StatusRunning {
		if err := x.putRun(r); err != nil {
			return nil, err
		}
	}
	return &wire.ElectionProofResult{TaskID: p.TaskID, DID: p.DID, Output: out}, nil
}

// maybeStart starts the run when M trainers are enrolled, the initial
// weights are known and at least one registered candidate sent a proof:
// the election over the proofs, the shards, round 0 at this block.
func (x *mtx) maybeStart(r *Run) error {
	if r.Status != wire.StatusAwaiting || !r.HasInit || r.activeTrainers() < r.spec.TrainerCount {
		return nil
	}
	if r.part {
		// loadRunBeforeStart loads the whole run whenever this may be reached.
		return fmt.Errorf("run %s would start from a partial load", r.spec.TaskID)
	}
	alpha := election.Alpha(r.spec.TaskID, r.SpecHash)
	var es []election.Entrant
	err := x.kv.Scan(x.ctx, KSMeta, []byte("cand/"), func(k, v []byte) error {
		var c wire.SyncerCandidate
		if err := json.Unmarshal(v, &c); err != nil {
			return fmt.Errorf("candidate %q: %w", k, err)
		}
		if c.Unbonding {
			return nil
		}
		proof, err := x.kv.Get(x.ctx, KSMeta, ProofKey(r.spec.TaskID, c.DID))
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		stake := bigOf(c.Stake)
		if stake.Sign() <= 0 {
			return nil
		}
		es = append(es, election.Entrant{DID: c.DID, Stake: stake, Proof: proof})
		return nil
	})
	if err != nil {
		return err
	}
	if len(es) == 0 {
		x.m.log.Info("run has M trainers but no syncer candidate with a proof yet; waiting", "task", r.spec.TaskID)
		return nil
	}
	el, err := election.Record(alpha, es)
	if err != nil {
		return fmt.Errorf("election of %s: %w", r.spec.TaskID, err)
	}
	_, ts, err := election.Elect(alpha, es)
	if err != nil {
		return fmt.Errorf("election of %s: %w", r.spec.TaskID, err)
	}
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Less(ts[j]) })
	r.Succession = make([]string, len(ts))
	for i, t := range ts {
		r.Succession[i] = t.DID
	}
	r.Election = &el
	r.Syncer = el.Winner
	r.Status = wire.StatusRunning
	r.Round = 0
	r.RoundMs = x.blk.TimeMs
	r.RoundAnchor = append(wire.HexBytes{}, x.blk.Hash...)
	r.RoundModel = r.InitModel
	r.assignShards()
	if err := x.snapshotRound(r); err != nil {
		return err
	}
	x.m.log.Info("run started", "task", r.spec.TaskID, "syncer", r.Syncer, "entrants", len(es), "height", x.blk.Height)
	return nil
}
