package syncer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// submissionRecord is what the transcript keeps of each accepted submission
// (and of equivocation evidence): enough for anyone to re-check the signature.
type submissionRecord struct {
	TaskID        string        `json:"task_id"`
	TrainerDID    string        `json:"trainer_did"`
	Round         uint64        `json:"round"`
	FragmentIndex uint64        `json:"fragment_index"`
	PayloadHash   wire.Hash     `json:"payload_hash"`
	Signature     wire.HexBytes `json:"signature"`
	Attestation   wire.Hash     `json:"attestation,omitempty"`
}

// EquivocationEvidence is two signed submissions from one DID for one round
// and fragment with different payloads.
type EquivocationEvidence struct {
	First  submissionRecord `json:"first"`
	Second submissionRecord `json:"second"`
}

// Digest identifies the evidence.
func (e *EquivocationEvidence) Digest() wire.Hash {
	return wire.NewCanon(wire.DomainEquivocate).Str(e.First.TaskID).Str(e.First.TrainerDID).U64(e.First.Round).
		U64(e.First.FragmentIndex).Hash(e.First.PayloadHash).Bytes(e.First.Signature).Hash(e.Second.PayloadHash).Bytes(e.Second.Signature).Sum()
}

// submit is Submit under the lock. Checks run cheapest first (DESIGN §4.2); a
// refused submission changes nothing, except that proven equivocation is
// recorded and slashed.
//
// A submission without gradient_payload refers to a payload already in the
// node's blob store by its payload_hash (uploaded with PUT /blobs/<hash>,
// which hashed it as it arrived): it is read from there (mapped, not
// copied) and not hashed again.
func (n *Node) submit(ctx context.Context, g *wire.OuterGradient) (*wire.SubmitResult, error) {
	if len(g.GradientPayload) > MaxPayloadBytes {
		return nil, Errf(KindInvalid, "gradient_payload: %d bytes, limit %d", len(g.GradientPayload), MaxPayloadBytes)
	}
	// Cheap checks against a snapshot of the run.
	r, err := n.load(ctx, g.TaskID)
	if err != nil {
		return nil, err
	}
	fs, err := n.precheck(r, g)
	if err != nil {
		return nil, err
	}
	stored := false
	if len(g.GradientPayload) == 0 {
		payload, release, err := n.storedPayload(ctx, g.PayloadHash)
		if err != nil {
			return nil, err
		}
		defer release()
		byRef := *g
		byRef.GradientPayload = payload
		byRef.MarkPayloadHashed() // the blob store hashed it when it was written
		g, stored = &byRef, true
	}
	// Payload hash, signature, header, values: no lock held.
	if got, ok := g.CheckPayloadHash(); !ok {
		return nil, Errf(KindInvalid, "payload_hash mismatch: payload hashes to %s, request says %s", got, g.PayloadHash)
	}
	if err := g.Metrics.Validate(); err != nil {
		return nil, Errf(KindInvalid, "%v", err)
	}
	if err := did.Verify(g.TrainerDID, g.Preimage(), g.Signature); err != nil {
		return nil, Errf(KindUnauthorized, "submission signature: %v", err)
	}
	values, _, err := payloadValues(ctx, n.eng, r.Codec, fs, g.GradientPayload)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("decode gradient_payload: %w", err)
		}
		return nil, Errf(KindInvalid, "gradient_payload: %v", err)
	}
	for _, v := range r.Verifiers {
		if v.RoundLevel {
			continue
		}
		out, err := n.eng.Verify(ctx, VerifyInput{Verifier: v, Dtype: fs.Dtype, N: int(fs.N), Input: values})
		if err != nil {
			var rf *RuleFailure
			if errors.As(err, &rf) {
				return nil, Errf(KindInvalid, "verifier %s: %v", v.Name, rf)
			}
			return nil, fmt.Errorf("verifier %s: %w", v.Name, err)
		}
		if !out.Accept {
			return nil, Errf(KindInvalid, "verifier %s rejected the payload (code %d): %s", v.Name, out.Code, out.Reason)
		}
	}
	var attDigest wire.Hash
	if r.spec.Tier != wire.TierOpen {
		t := r.trainer(g.TrainerDID)
		shard := uint64(0)
		if len(t.Shards) > 0 {
			shard = uint64(t.Shards[0])
		}
		attDigest, err = n.checkEvidence(ctx, r, g.Attestation, g.TrainerDID, shard, r.RoundModel)
		if err != nil {
			return nil, err
		}
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	r, err = n.load(ctx, g.TaskID)
	if err != nil {
		return nil, err
	}
	if fs, err = n.precheck(r, g); err != nil {
		return nil, err
	}
	rec := submissionRecord{TaskID: g.TaskID, TrainerDID: g.TrainerDID, Round: g.Round, FragmentIndex: g.FragmentIndex,
		PayloadHash: g.PayloadHash, Signature: g.Signature, Attestation: attDigest}
	sk := subKey(g.TaskID, g.Round, int(g.FragmentIndex), g.TrainerDID)
	if prev, err := n.kv.Get(ctx, KSTranscript, sk); err == nil {
		var first submissionRecord
		if err := json.Unmarshal(prev, &first); err != nil {
			return nil, fmt.Errorf("corrupt submission record: %w", err)
		}
		if first.PayloadHash == g.PayloadHash {
			return nil, Errf(KindConflict, "duplicate submission: %s already submitted payload %s for round %d fragment %d", g.TrainerDID, g.PayloadHash, g.Round, g.FragmentIndex)
		}
		// Equivocation is about content (PROTOCOL §6): the same tensors
		// written with other header bytes, member order or padding are the
		// same submission.
		same, err := n.sameContent(ctx, fs, first.PayloadHash, values)
		if err != nil {
			return nil, err
		}
		if same {
			return nil, Errf(KindConflict, "duplicate submission: %s already submitted the same tensors for round %d fragment %d (payload %s; this payload %s differs only in its encoding)",
				g.TrainerDID, g.Round, g.FragmentIndex, first.PayloadHash, g.PayloadHash)
		}
		return nil, n.equivocation(ctx, r, first, rec)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	t := r.trainer(g.TrainerDID)
	t.Submitted++
	t.Accepted++
	t.RoundAccepted++
	t.Weight = new(big.Int).Add(bigOf(t.Weight), big.NewInt(fs.N)).String()
	fs.Subs = append(fs.Subs, subRef{DID: g.TrainerDID, PayloadHash: g.PayloadHash})
	if len(fs.Subs) == r.spec.Quorum {
		fs.KthMs = n.now().UnixMilli()
	}
	if attDigest != (wire.Hash{}) {
		r.Attestations = append(r.Attestations, attDigest)
	}
	var b Batch
	raw, _ := json.Marshal(rec)
	b.Set(KSTranscript, sk, raw)
	stageMetrics(&b, g)
	res := &wire.SubmitResult{Accepted: true, Round: g.Round, FragmentIndex: g.FragmentIndex, PayloadHash: g.PayloadHash, AcceptedCount: len(fs.Subs)}
	// All active trainers in: finalize without waiting for τ, once this
	// submission is committed and the lock released (Submit, finalize.go).
	res.Finalized = allIn(r, fs)
	// An inline payload is durable in the blob store before the record
	// that refers to it (a payload sent by reference already is), and
	// before anything below reads it back.
	if !stored {
		if err := n.blobs.Put(ctx, g.PayloadHash, g.GradientPayload); err != nil {
			return nil, fmt.Errorf("store payload %s: %w", g.PayloadHash, err)
		}
	}
	if err := n.maybeCloseRound(ctx, &b, r, false); err != nil {
		return nil, err
	}
	n.putRun(&b, r)
	if err := n.kv.Commit(ctx, &b); err != nil {
		return nil, err
	}
	n.announce(ctx, Event{TaskID: g.TaskID, Kind: "submission", Round: g.Round, Detail: rec})
	return res, nil
}

// sameContent says whether the stored payload first decodes to exactly the
// values (in the fragment's tensor order, bit for bit) that values holds.
// Names, dtypes and shapes are already equal: both payloads passed the
// fragment's layout check.
func (n *Node) sameContent(ctx context.Context, fs *fragState, first wire.Hash, values []byte) (bool, error) {
	payload, release, err := loadBlob(ctx, n.blobs, first)
	if err != nil {
		return false, fmt.Errorf("stored payload %s: %w", first, err)
	}
	defer release()
	v, err := fragmentValues(fs, payload)
	if err != nil {
		return false, fmt.Errorf("stored payload %s: %w", first, err)
	}
	return bytes.Equal(v, values), nil
}

// storedPayload returns a payload submitted by reference from the blob
// store, and the function that releases it.
func (n *Node) storedPayload(ctx context.Context, h wire.Hash) ([]byte, func(), error) {
	if h.IsZero() {
		return nil, nil, Errf(KindInvalid, "gradient_payload is missing and payload_hash is zero: send the payload (base64) or upload it with PUT /blobs/<payload_hash> and name its hash")
	}
	payload, release, err := loadBlob(ctx, n.blobs, h)
	if errors.Is(err, ErrNotFound) {
		return nil, nil, Errf(KindNotFound, "payload %s is not stored on this node: upload it first (PUT /blobs/%s on the RPC port) or send gradient_payload", h, h)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("stored payload %s: %w", h, err)
	}
	if len(payload) > MaxPayloadBytes {
		release()
		return nil, nil, Errf(KindInvalid, "payload %s: %d bytes, limit %d", h, len(payload), MaxPayloadBytes)
	}
	return payload, release, nil
}

// precheck runs the cheap checks: run state, enrolment, round, fragment, window.
func (n *Node) precheck(r *runState, g *wire.OuterGradient) (*fragState, error) {
	if r.Status != wire.StatusRunning {
		return nil, Errf(KindConflict, "run %s is %s, not running", g.TaskID, r.Status)
	}
	t := r.trainer(g.TrainerDID)
	if t == nil {
		return nil, Errf(KindNotFound, "unknown DID: %s is not enrolled in %s", g.TrainerDID, g.TaskID)
	}
	if t.Status != wire.TrainerActive {
		if t.Status == wire.TrainerJoining {
			return nil, Errf(KindConflict, "%s joins %s from round %d; the current round is %d", g.TrainerDID, g.TaskID, t.JoinedRound, r.Round)
		}
		return nil, Errf(KindConflict, "%s is %s in %s", g.TrainerDID, t.Status, g.TaskID)
	}
	if g.Round != r.Round {
		return nil, Errf(KindConflict, "wrong round: submission is for round %d, the current round of %s is %d", g.Round, g.TaskID, r.Round)
	}
	if g.FragmentIndex >= uint64(len(r.Fragments)) {
		return nil, Errf(KindInvalid, "wrong fragment: fragment_index %d, the model has %d fragments (0..%d)", g.FragmentIndex, len(r.Fragments), len(r.Fragments)-1)
	}
	fs := r.Fragments[g.FragmentIndex]
	if fs.Committed {
		return nil, Errf(KindConflict, "after the grace window: fragment %d of round %d is already committed", g.FragmentIndex, g.Round)
	}
	if fs.KthMs > 0 && n.now().UnixMilli() > fs.KthMs+r.spec.GraceWindowMs {
		return nil, Errf(KindConflict, "after the grace window: fragment %d of round %d reached quorum at %d ms and its %d ms window has closed", g.FragmentIndex, g.Round, fs.KthMs, r.spec.GraceWindowMs)
	}
	return fs, nil
}

// fragmentValues checks a payload against the fragment's layout and returns
// its values concatenated in the fragment's tensor order.
func fragmentValues(fs *fragState, payload []byte) ([]byte, error) {
	tensors, _, err := safetensors.Parse(payload, safetensors.DefaultLimits)
	if err != nil {
		return nil, err
	}
	if len(tensors) != len(fs.Tensors) {
		return nil, fmt.Errorf("%d tensors, the fragment has %d", len(tensors), len(fs.Tensors))
	}
	byName := make(map[string]safetensors.Tensor, len(tensors))
	for _, t := range tensors {
		byName[t.Name] = t
	}
	var out []byte
	if len(fs.Tensors) > 1 {
		out = make([]byte, 0, fs.N*int64(fs.Dtype.Size()))
	}
	for _, want := range fs.Tensors {
		t, ok := byName[want.Name]
		if !ok {
			return nil, fmt.Errorf("tensor %q is missing", want.Name)
		}
		if t.Dtype != want.Dtype {
			return nil, fmt.Errorf("tensor %q has dtype %s, the fragment's is %s", want.Name, t.Dtype, want.Dtype)
		}
		if !equalShape(t.Shape, want.Shape) {
			return nil, fmt.Errorf("tensor %q has shape %v, the fragment's is %v", want.Name, t.Shape, want.Shape)
		}
		if len(fs.Tensors) == 1 {
			return t.Data, nil // the payload's own bytes: no copy of a large single tensor
		}
		out = append(out, t.Data...)
	}
	return out, nil
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// equivocation records evidence, slashes, and commits; the second payload is refused.
func (n *Node) equivocation(ctx context.Context, r *runState, first, second submissionRecord) error {
	ev := EquivocationEvidence{First: first, Second: second}
	dg := ev.Digest()
	var b Batch
	raw, _ := json.Marshal(ev)
	b.Set(KSEvidence, append([]byte("equivocation/"), dg[:]...), raw)
	lt := newLedgerTx(ctx, n.kv)
	t := r.trainer(first.TrainerDID)
	if err := n.slash(lt, r, t, r.spec.Slash().EquivocationBps, "equivocation"); err != nil {
		return err
	}
	if err := lt.flush(&b); err != nil {
		return err
	}
	r.Equivocations = append(r.Equivocations, dg)
	t.Submitted++
	n.putRun(&b, r)
	if err := n.kv.Commit(ctx, &b); err != nil {
		return err
	}
	return Errf(KindConflict, "equivocation: %s already submitted a different payload (%s) for round %d fragment %d; evidence %s recorded and stake slashed",
		first.TrainerDID, first.PayloadHash, first.Round, first.FragmentIndex, dg)
}

// FinalizeRound implements Service. Only the run's elected syncer may ask
// (a signed request), and it can never shorten the grace window τ for
// trainers that are still active: a fragment with K accepted commits now
// only when every active trainer has submitted for it or its window has
// closed, and the round closes early only at its deadline. So the request
// does exactly what the node's own timers would do at their next tick, and
// for the others says per fragment why not (and when its window closes).
func (n *Node) FinalizeRound(ctx context.Context, p *wire.FinalizeParams) (*wire.FinalizeResult, error) {
	if p.TaskID == "" {
		return nil, Errf(KindInvalid, "task_id is empty")
	}
	if _, err := did.Parse(p.SyncerDID); err != nil {
		return nil, Errf(KindInvalid, "syncer_did: %v", err)
	}
	// Cheap checks before any plugin runs: only a request signed by the
	// elected syncer for the current round makes the node compute (the
	// nonce is checked under the lock below).
	n.mu.Lock()
	snap, err := n.load(ctx, p.TaskID)
	n.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var pre map[wire.Hash]*fragResult
	if snap.Status == wire.StatusRunning && p.SyncerDID == snap.Syncer && p.Round == snap.Round {
		if err := did.Verify(p.SyncerDID, p.Preimage(), p.Signature); err != nil {
			return nil, Errf(KindUnauthorized, "bad signature: does not verify against %s", p.SyncerDID)
		}
		if pre, err = n.precompute(ctx, p.TaskID); err != nil { // plugins run outside the lock (finalize.go)
			return nil, err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	r, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	r.pre = pre
	if r.Status != wire.StatusRunning {
		return nil, Errf(KindConflict, "run %s is %s, not running", p.TaskID, r.Status)
	}
	if p.SyncerDID != r.Syncer {
		return nil, Errf(KindUnauthorized, "finalizeRound must be signed by run %s's elected syncer %s, not %s", p.TaskID, r.Syncer, p.SyncerDID)
	}
	var b Batch
	if err := n.checkSigned(ctx, &b, p.SyncerDID, p.Nonce, p.Signature, p.Preimage()); err != nil {
		return nil, err
	}
	if p.Round != r.Round {
		return nil, Errf(KindConflict, "wrong round: finalizeRound is for round %d, the current round of %s is %d", p.Round, p.TaskID, r.Round)
	}
	round := r.Round
	staged := b.Len()
	now := n.now().UnixMilli()
	active := r.count(wire.TrainerActive)
	res := &wire.FinalizeResult{TaskID: p.TaskID, Round: round}
	for i, fs := range r.Fragments {
		st := wire.FragmentStatus{Index: i, Accepted: len(fs.Subs), Committed: fs.Committed}
		switch {
		case fs.Committed:
		case len(fs.Subs) >= r.spec.Quorum && (len(fs.Subs) >= active || now > fs.KthMs+r.spec.GraceWindowMs):
			if err := n.finalizeFragment(ctx, &b, r, i, true); err != nil {
				return nil, changedConflict(err)
			}
			st.Committed = true
		case len(fs.Subs) >= r.spec.Quorum:
			st.WindowClosesMs = fs.KthMs + r.spec.GraceWindowMs
			st.Reason = fmt.Sprintf("%d of K=%d accepted, %d active trainers have not submitted; its grace window closes in %d ms",
				len(fs.Subs), r.spec.Quorum, active-len(fs.Subs), st.WindowClosesMs-now)
		default:
			st.Reason = fmt.Sprintf("%d of K=%d submissions accepted", len(fs.Subs), r.spec.Quorum)
		}
		res.Fragments = append(res.Fragments, st)
	}
	if err := n.maybeCloseRound(ctx, &b, r, now >= r.RoundMs+r.spec.RoundDeadline()); err != nil {
		return nil, err
	}
	res.Advanced = r.Round != round || r.Status != wire.StatusRunning
	res.Status = r.Status
	if b.Len() > staged {
		// Something committed; the nonce is used with it. A request that
		// changes nothing leaves no trace (it may be sent again).
		n.putRun(&b, r)
		if err := n.kv.Commit(ctx, &b); err != nil {
			return nil, err
		}
	}
	if !res.Advanced {
		return res, Errf(KindConflict, "round %d of %s cannot be finalized yet: %s", round, p.TaskID, whyNot(res.Fragments))
	}
	return res, nil
}

func whyNot(fs []wire.FragmentStatus) string {
	var parts []string
	for _, f := range fs {
		if !f.Committed {
			parts = append(parts, fmt.Sprintf("fragment %d has %s", f.Index, f.Reason))
		}
	}
	if len(parts) == 0 {
		return "all fragments committed"
	}
	return fmt.Sprint(parts)
}

// maybeCloseRound closes the round when every fragment is committed, or at
// the deadline (fragments with K commit, the rest record no-quorum).
func (n *Node) maybeCloseRound(ctx context.Context, b *Batch, r *runState, deadline bool) error {
	if r.Status != wire.StatusRunning {
		return nil
	}
	all := true
	for _, fs := range r.Fragments {
		if !fs.Committed {
			all = false
		}
	}
	if !all && !deadline {
		return nil
	}
	for i, fs := range r.Fragments {
		if fs.Committed {
			continue
		}
		if len(fs.Subs) >= r.spec.Quorum {
			if err := n.finalizeFragment(ctx, b, r, i, false); err != nil {
				return err
			}
			continue
		}
		fs.Committed = true
		fs.Commit = baseCommit(r, i)
		fs.Commit.Status = wire.FragNoQuorum
		fs.Commit.Reason = fmt.Sprintf("round deadline passed with %d of K=%d submissions accepted", len(fs.Subs), r.spec.Quorum)
		fs.Commit.Inputs = commitInputs(sortedSubs(fs.Subs))
		n.observeFragment(r, i, wire.FragNoQuorum)
	}
	return n.closeRound(ctx, b, r)
}

// baseCommit is fragment i's transcript entry before anything is decided:
// the rule and outer step that would run, weights unchanged.
func baseCommit(r *runState, i int) *wire.FragmentCommit {
	w := r.Fragments[i].WeightsHash
	return &wire.FragmentCommit{Fragment: i, Rule: r.Rule.Name, RuleHash: r.Rule.Hash, RuleParams: r.Rule.Params, OuterHash: r.Outer.Hash,
		WeightsBefore: w, WeightsAfter: w, Codec: codecRef(r.Codec)}
}

// commitInputs lists accepted submissions (already in DID order) as commit inputs.
func commitInputs(subs []subRef) []wire.CommitInput {
	out := make([]wire.CommitInput, len(subs))
	for k, s := range subs {
		out[k] = wire.CommitInput{TrainerDID: s.DID, PayloadHash: s.PayloadHash}
	}
	return out
}

func sortedSubs(s []subRef) []subRef {
	out := append([]subRef(nil), s...)
	sort.Slice(out, func(a, c int) bool { return out[a].DID < out[c].DID })
	return out
}

// closeRound writes the round commit, applies missed rounds, evictions and
// membership changes, and opens the next round or seals the run.
func (n *Node) closeRound(ctx context.Context, b *Batch, r *runState) error {
	task := r.spec.TaskID
	sl := r.spec.Slash()
	lt := newLedgerTx(ctx, n.kv)
	rc := wire.RoundCommit{TaskID: task, Round: r.Round, Missed: []string{}, Evicted: []string{}, Joined: orStrs(r.Joined), Left: orStrs(r.Left),
		Equivocations: orHashes(r.Equivocations)}
	hashes := make([]wire.Hash, len(r.Fragments))
	me, ticket := n.committer(r)
	for i, fs := range r.Fragments {
		fc := fs.Commit
		fc.Syncer, fc.Ticket = me, ticket
		if fc.Inputs == nil {
			fc.Inputs = []wire.CommitInput{}
		}
		if fc.RuleParams == nil {
			fc.RuleParams = json.RawMessage(`{}`)
		}
		rc.Fragments = append(rc.Fragments, *fc)
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
		t.MissedRounds++
		t.ConsecMissed++
		rc.Missed = append(rc.Missed, t.DID)
		if err := n.slash(lt, r, t, sl.MissedRoundBps, "missed round"); err != nil {
			return err
		}
		if t.ConsecMissed >= uint64(sl.MaxMissedRounds) {
			if err := n.slash(lt, r, t, sl.EvictionBps, "eviction"); err != nil {
				return err
			}
			if err := n.refundStake(lt, r, t); err != nil {
				return err
			}
			t.Status = wire.TrainerEvicted
			rc.Evicted = append(rc.Evicted, t.DID)
		}
	}
	ch, err := RoundCommitHash(&rc)
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(rc)
	b.Set(KSTranscript, commitKey(task, r.Round), raw)
	r.Roots = append(r.Roots, ch)
	n.log.Info("round committed", "task", task, "round", r.Round, "model", rc.ModelHash.String()[:12], "missed", len(rc.Missed), "evicted", len(rc.Evicted))
	// Next round.
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
		fs.Subs, fs.KthMs, fs.Committed, fs.Commit = nil, 0, false, nil
	}
	if r.Round+1 >= uint64(r.spec.MaxRounds) {
		if err := n.seal(ctx, b, r, lt, rc.ModelHash); err != nil {
			return err
		}
	} else {
		r.Round++
		r.RoundMs = n.now().UnixMilli()
		r.RoundModel = rc.ModelHash
		r.Joined = joinedNext // recorded in the next round's commit
		r.assignShards()
	}
	if err := lt.flush(b); err != nil {
		return err
	}
	n.announce(ctx, Event{TaskID: task, Kind: "round_committed", Round: rc.Round, ModelHash: rc.ModelHash, Detail: ch})
	n.observeRound(task, rc.Round)
	return nil
}

func orStrs(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

func orHashes(v []wire.Hash) []wire.Hash {
	if v == nil {
		return []wire.Hash{}
	}
	return v
}

// RoundCommitHash is SHA-256(Str(DomainRoundCommit) ‖ Bytes(JCS(commit JSON)))
// (CanonicalRoundCommit gives the JCS bytes).
func RoundCommitHash(rc *wire.RoundCommit) (wire.Hash, error) {
	canon, err := CanonicalRoundCommit(rc)
	if err != nil {
		return wire.Hash{}, err
	}
	return wire.NewCanon(wire.DomainRoundCommit).Bytes(canon).Sum(), nil
}
