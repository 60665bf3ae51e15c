package syncer

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"

	"github.com/tenzro/train/dataset/synth"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// The writes of the Service: the receiving node runs every check that needs
// the bytes (payload hash, layout, codec decode, verifiers, attestation,
// rule resolution) and stores the bytes before it broadcasts the
// transaction; the chain's machine then applies every state rule. A refusal
// from either reaches the caller with its kind and message.

// broadcast encodes a transaction, waits for its block, decodes its result
// into out (when not nil) and returns the height.
func (n *Node) broadcast(ctx context.Context, typ string, params, out any) (int64, error) {
	raw, err := wire.EncodeTx(typ, params)
	if err != nil {
		return 0, machine.Errf(machine.KindInvalid, "%v", err)
	}
	res, err := Broadcast(ctx, n.chain, raw)
	if err != nil {
		return 0, err
	}
	if out != nil {
		if err := json.Unmarshal(res.Data, out); err != nil {
			return res.Height, fmt.Errorf("result of %s at height %d: %w", typ, res.Height, err)
		}
	}
	return res.Height, nil
}

// submitSigned admits a transaction signed by this node's key with its
// next nonce (build signs the params for a nonce). Nonces are assigned and
// transactions admitted under one lock, so they enter blocks in nonce
// order; a stale nonce (another transaction of this key landed first) is
// retried with the next.
func (n *Node) submitSigned(ctx context.Context, typ string, build func(nonce uint64) (any, error)) (machine.Pending, error) {
	for attempt := 0; ; attempt++ {
		n.txMu.Lock()
		nonce, err := n.nextNonce(ctx)
		if err != nil {
			n.txMu.Unlock()
			return nil, err
		}
		params, err := build(nonce)
		if err != nil {
			n.txMu.Unlock()
			return nil, err
		}
		raw, err := wire.EncodeTx(typ, params)
		if err != nil {
			n.txMu.Unlock()
			return nil, fmt.Errorf("encode %s: %w", typ, err)
		}
		p, err := n.chain.Submit(ctx, raw)
		if err == nil {
			n.lastNonce = nonce
		}
		n.txMu.Unlock()
		if errors.Is(err, machine.ErrStaleNonce) && attempt < 3 {
			continue
		}
		if errors.Is(err, machine.ErrSenderBusy) && attempt < 64 {
			// This key has its share of the mempool waiting (a syncer
			// committing many fragments at once): the next block takes
			// some, then the same transaction is admitted.
			select {
			case <-n.chain.Changed():
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("%s: %w (waiting for a block: %w)", typ, err, ctx.Err())
			}
		}
		return p, err
	}
}

// nextNonce is above both this node's last and the chain's last nonce of
// its key, and at least the Unix time in nanoseconds (the clients'
// convention, so a client signing with the same key stays ordered).
func (n *Node) nextNonce(ctx context.Context) (uint64, error) {
	var last uint64
	err := n.view(ctx, func(v machine.View) error {
		var err error
		last, _, err = machine.LastNonce(ctx, v.KV, n.cfg.Signer.DID())
		return err
	})
	if err != nil {
		return 0, err
	}
	next := max(last, n.lastNonce) + 1
	if t := uint64(n.now().UnixNano()); t > next {
		next = t
	}
	return next, nil
}

// resolveVerifiers resolves the spec's verifiers and puts the finite-values
// verifier first when the spec does not list it.
func (n *Node) resolveVerifiers(ctx context.Context, refs []string) ([]RuleRef, error) {
	verifiers := []RuleRef{}
	hasFinite := false
	for _, v := range refs {
		ref, err := n.eng.ResolveVerifier(ctx, v)
		if err != nil {
			return nil, machine.Errf(machine.KindInvalid, "spec: verification %q: %v", v, err)
		}
		hasFinite = hasFinite || ref.Name == machine.FiniteVerifier
		verifiers = append(verifiers, ref)
	}
	if !hasFinite {
		ref, err := n.eng.ResolveVerifier(ctx, machine.FiniteVerifier)
		if err != nil {
			return nil, fmt.Errorf("resolve the mandatory %s verifier: %w", machine.FiniteVerifier, err)
		}
		verifiers = append([]RuleRef{ref}, verifiers...)
	}
	return verifiers, nil
}

// storeLayout keeps an initial-weights file and its fragments' encodings
// (synced) before the transaction that names them is broadcast.
func (n *Node) storeLayout(ctx context.Context, raw []byte, l *wire.InitLayout, encs [][]byte) error {
	if err := n.blobs.Put(ctx, l.File, raw); err != nil {
		return fmt.Errorf("store initial weights: %w", err)
	}
	for i, e := range encs {
		if err := n.blobs.Put(ctx, l.Fragments[i].WeightsHash, e); err != nil {
			return fmt.Errorf("store fragment %d's initial weights: %w", i, err)
		}
	}
	return nil
}

// PostTask implements Service: the spec, rules and weights are checked and
// resolved here, the weights stored, and the posting broadcast.
func (n *Node) PostTask(ctx context.Context, p *wire.PostTaskParams) (*wire.PostTaskResult, error) {
	if len(p.Spec) == 0 {
		return nil, machine.Errf(machine.KindInvalid, "spec is missing")
	}
	spec, canon, err := wire.ParseSpec(p.Spec)
	if err != nil {
		return nil, machine.Errf(machine.KindInvalid, "%v", err)
	}
	if err := spec.Validate(); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "%v", err)
	}
	if err := synth.CheckRef(spec.DatasetRef, spec.DatasetHash); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "spec: dataset: %v", err)
	}
	if _, err := did.Parse(spec.SponsorDID); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "spec: sponsor_did must be a resolvable DID to sign the posting: %v", err)
	}
	if spec.Tier != wire.TierOpen && n.cfg.Attestor == nil {
		return nil, machine.Errf(machine.KindInvalid, "spec: tier %s needs attestation, which this node is not configured for", spec.Tier)
	}
	if spec.Tier == wire.TierConfidential && n.cfg.DatasetKeys == nil {
		return nil, machine.Errf(machine.KindInvalid, "spec: tier Confidential needs a key broker, which runs only in an enclave: start the node with --enclave (auto on TEE hardware, simulated-* for development)")
	}
	if spec.Tier != wire.TierOpen && len(spec.AttestationPolicy) == 0 {
		return nil, machine.Errf(machine.KindInvalid, "spec: tier %s needs an attestation_policy", spec.Tier)
	}
	if p.DatasetKey != nil {
		if spec.Tier != wire.TierConfidential {
			return nil, machine.Errf(machine.KindInvalid, "dataset_key: only a Confidential run has a dataset key, tier is %s", spec.Tier)
		}
		if len(p.DatasetKey) != 32 {
			return nil, machine.Errf(machine.KindInvalid, "dataset_key: %d bytes, want 32 (an AES-256 key)", len(p.DatasetKey))
		}
	}
	reward, _ := wire.ParseAmount(spec.RewardPool)
	specHash := wire.SpecHash(canon)
	var layout *wire.InitLayout
	var encs [][]byte
	var wh wire.Hash
	raw, release, err := n.initWeightsFrom(ctx, p.InitWeights, p.InitWeightsHash, "init_weights")
	if err != nil {
		return nil, err
	}
	defer release()
	if raw != nil {
		if layout, encs, err = machine.InitLayoutOf(raw, spec.Architecture.FragmentCount); err != nil {
			return nil, err
		}
		if err := CheckInit(spec, layout); err != nil {
			return nil, err
		}
		wh = layout.File
	}
	// Cheap gates before anything costly (resolving the rule runs its
	// probe): the signature, the funds for the fee and the reward, and the
	// sponsor's rate limit. The chain checks the nonce.
	if err := did.Verify(spec.SponsorDID, p.Preimage(spec.SponsorDID, specHash, wh), p.Signature); err != nil {
		return nil, machine.Errf(machine.KindUnauthorized, "bad signature: does not verify against %s", spec.SponsorDID)
	}
	fee, err := n.fee(ctx, "posting")
	if err != nil {
		return nil, err
	}
	if err := n.needFunds(ctx, spec.SponsorDID, new(big.Int).Add(fee, reward), "the posting fee plus the reward pool"); err != nil {
		return nil, err
	}
	if err := n.limit(n.postLimit, "postTask", spec.SponsorDID); err != nil {
		return nil, err
	}
	rule, err := n.eng.ResolveRule(ctx, spec.AggregationRef(), spec.AggregationParams, spec.Quorum, spec.TrainerCount)
	if err != nil {
		return nil, machine.Errf(machine.KindInvalid, "spec: aggregation: %v", err)
	}
	if spec.RobustRequiresVerified && rule.Name != "Mean" && spec.Tier == wire.TierOpen {
		return nil, machine.Errf(machine.KindInvalid, "spec: robust rule %s is marked to require tier Verified or above, tier is Open", rule.Name)
	}
	verifiers, err := n.resolveVerifiers(ctx, spec.Verification)
	if err != nil {
		return nil, err
	}
	outer, err := n.eng.ResolveOuter(ctx)
	if err != nil {
		return nil, fmt.Errorf("resolve outer step: %w", err)
	}
	codec, err := resolveCodec(ctx, n.eng, spec)
	if err != nil {
		return nil, machine.Errf(machine.KindInvalid, "%v", err)
	}
	scorer, err := resolveScorer(ctx, n.eng, spec)
	if err != nil {
		return nil, machine.Errf(machine.KindInvalid, "%v", err)
	}
	if scorer != nil {
		if err := n.checkScoreCorpus(ctx, spec, p.ScoreCorpus); err != nil {
			return nil, err
		}
	} else if len(p.ScoreCorpus) > 0 {
		return nil, machine.Errf(machine.KindInvalid, "score_corpus given, but the spec does not score")
	}
	if _, _, err := n.load(ctx, spec.TaskID); err == nil {
		return nil, machine.Errf(machine.KindConflict, "a run with task_id %q already exists", spec.TaskID)
	} else if machine.KindOf(err) != machine.KindNotFound {
		return nil, err
	}
	if layout != nil {
		if err := n.storeLayout(ctx, raw, layout, encs); err != nil {
			return nil, err
		}
	}
	var datasetKey []byte
	if spec.Tier == wire.TierConfidential {
		key, sealed, err := n.cfg.DatasetKeys.NewDatasetKey(spec.TaskID, spec.Tier, spec.AttestationPolicy, p.DatasetKey)
		if err != nil {
			return nil, fmt.Errorf("dataset key for %s: %w", spec.TaskID, err)
		}
		datasetKey = key
		var b machine.Batch
		b.Set(machine.KSMeta, datasetKeyKey(spec.TaskID), sealed)
		if err := n.cfg.Local.Commit(ctx, &b); err != nil {
			return nil, fmt.Errorf("store the dataset key record of %s: %w", spec.TaskID, err)
		}
	}
	tx := wire.PostTaskTx{Spec: canon, InitWeightsHash: wh, Init: layout, Rule: rule, Verifiers: verifiers, Outer: outer, Codec: codec, Scorer: scorer, Signed: p.Signed}
	var res wire.PostTaskResult
	h, err := n.broadcast(ctx, wire.TxPostTask, tx, &res)
	if err != nil {
		return nil, err
	}
	res.Height, res.DatasetKey = h, datasetKey
	n.log.Info("task posted", "task", spec.TaskID, "height", h, "rule", rule.Name)
	n.w.poke()
	return &res, nil
}

// CheckInit refuses initial weights that are not the model the spec states:
// their element count must be architecture.param_count and their dtype
// architecture.dtype's (RATIONALE "models: param_count picks the preset,
// and must be exact"). It runs before anything is stored.
func CheckInit(spec *wire.TaskSpec, l *wire.InitLayout) error {
	if err := checkParamCount(spec, l); err != nil {
		return err
	}
	return checkInitDtype(spec, l)
}

// checkInitDtype refuses initial weights whose dtype is not the spec's
// architecture.dtype (f32: F32, bf16: BF16). Payloads must then be in the
// weights' dtype (machine.FragmentValues), so a run's weights, payloads and
// spec agree; the CLI converts F32 files to BF16 for a bf16 spec before it
// signs them, the node never converts.
func checkInitDtype(spec *wire.TaskSpec, l *wire.InitLayout) error {
	want, err := spec.Architecture.TensorDtype()
	if err != nil {
		return machine.Errf(machine.KindInvalid, "%v", err)
	}
	for i, f := range l.Fragments {
		if f.Dtype == want {
			continue
		}
		hint := "the node never converts weights"
		if want == string(machine.BF16) && f.Dtype == string(machine.F32) {
			hint = "round them to BF16 before signing; tenzro train post-task does"
		}
		return machine.Errf(machine.KindInvalid, "spec: architecture.dtype is %s, so the initial weights must be %s, but they are %s (fragment %d, tensor %q): %s",
			spec.Architecture.Dtype, want, f.Dtype, i, f.Tensors[0].Name, hint)
	}
	return nil
}

// checkParamCount refuses initial weights whose element count is not the
// spec's architecture.param_count: the count a spec states is the model it
// trains (the trainer picks its preset by it), never a label.
func checkParamCount(spec *wire.TaskSpec, l *wire.InitLayout) error {
	var n, tensors int64
	for _, f := range l.Fragments {
		n += f.N
		tensors += int64(len(f.Tensors))
	}
	if spec.Architecture.ParamCount != n {
		return machine.Errf(machine.KindInvalid, "spec: architecture.param_count is %d but the initial weights hold %d parameters (%d tensors)", spec.Architecture.ParamCount, n, tensors)
	}
	return nil
}

// SetInitWeights implements Service: the sponsor supplies weights after posting.
func (n *Node) SetInitWeights(ctx context.Context, p *wire.SetInitWeightsParams) (*wire.PostTaskResult, error) {
	r, _, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	if r.HasInit {
		return nil, machine.Errf(machine.KindConflict, "run %s already has initial weights (model %s)", p.TaskID, r.InitModel)
	}
	if r.Status != wire.StatusAwaiting {
		return nil, machine.Errf(machine.KindConflict, "run %s is %s: initial weights can only be set before it starts", p.TaskID, r.Status)
	}
	if err := did.Verify(r.TaskSpec().SponsorDID, p.Preimage(r.TaskSpec().SponsorDID), p.Signature); err != nil {
		return nil, machine.Errf(machine.KindUnauthorized, "bad signature: does not verify against %s", r.TaskSpec().SponsorDID)
	}
	raw, release, err := n.initWeightsFrom(ctx, p.Weights, p.WeightsHash, "weights")
	if err != nil {
		return nil, err
	}
	defer release()
	if raw == nil {
		return nil, machine.Errf(machine.KindInvalid, "weights are missing: send weights (base64) or the weights_hash of an uploaded blob")
	}
	layout, encs, err := machine.InitLayoutOf(raw, r.TaskSpec().Architecture.FragmentCount)
	if err != nil {
		return nil, err
	}
	if err := CheckInit(r.TaskSpec(), layout); err != nil {
		return nil, err
	}
	if err := n.storeLayout(ctx, raw, layout, encs); err != nil {
		return nil, err
	}
	var res wire.PostTaskResult
	h, err := n.broadcast(ctx, wire.TxSetInitWeights, wire.SetInitWeightsTx{TaskID: p.TaskID, Init: *layout, Signed: p.Signed}, &res)
	if err != nil {
		return nil, err
	}
	res.Height = h
	return &res, nil
}

// checkEvidence runs the attestor on a Verified/Confidential claim: its
// nonce must be the round's (PROTOCOL §8) and its evidence must bind
// AttestReportData of the claimed program, the trainer's shard, the
// round's model, that nonce and the payload it accompanies (zero for an
// enrolment). It returns the digest and the claim's bytes, which the
// transaction carries inline: every validator verifies them again at the
// block's time (machine.EvidenceVerifier, the same attest rules).
func (n *Node) checkEvidence(ctx context.Context, r *machine.Run, raw json.RawMessage, trainer string, shard uint64, model, payload wire.Hash) (*wire.EvidenceRef, error) {
	if n.cfg.Attestor == nil {
		return nil, machine.Errf(machine.KindAttestation, "tier %s needs attestation, which this node is not configured for", r.TaskSpec().Tier)
	}
	if len(raw) == 0 {
		return nil, machine.Errf(machine.KindAttestation, "tier %s: attestation evidence is required", r.TaskSpec().Tier)
	}
	var claim wire.AttestationClaim
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&claim); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "attestation: %v", err)
	}
	if want := machine.AttestNonce(r.TaskSpec().TaskID, trainer, r.Round, r.RoundAnchor); !bytes.Equal(claim.Nonce, want) {
		return nil, machine.Errf(machine.KindAttestation, "attestation refused: check binding.nonce failed: the nonce is not round %d's for %s (get it from tenzro_attest_getNonce)", r.Round, trainer)
	}
	rd := wire.AttestReportData(claim.ProgramHash, shard, model, trainer, claim.Nonce, payload)
	dg, err := n.cfg.Attestor.CheckEvidence(ctx, r.TaskSpec().Tier, r.TaskSpec().AttestationPolicy, claim.Envelope, rd)
	if err != nil {
		if machine.KindOf(err) == machine.KindAttestation {
			return nil, err
		}
		return nil, machine.Errf(machine.KindAttestation, "attestation refused: %v", err)
	}
	if len(raw) > wire.MaxClaimBytes {
		return nil, machine.Errf(machine.KindInvalid, "attestation: claim is %d bytes, limit %d", len(raw), wire.MaxClaimBytes)
	}
	claimBytes := append([]byte(nil), raw...)
	return &wire.EvidenceRef{Hash: wire.ContentHash(claimBytes), Size: uint64(len(claimBytes)), Digest: dg, Claim: claimBytes}, nil
}

// Enroll implements Service.
func (n *Node) Enroll(ctx context.Context, p *wire.EnrollParams) (*wire.EnrollResult, error) {
	if _, err := did.Parse(p.TrainerDID); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "trainer_did: %v", err)
	}
	stake, err := wire.ParseAmount(p.Stake)
	if err != nil {
		return nil, machine.Errf(machine.KindInvalid, "stake: %v", err)
	}
	if stake.Sign() == 0 {
		return nil, machine.Errf(machine.KindInvalid, "stake is \"0\": a trainer must lock a positive stake (slashing is a fraction of it)")
	}
	r, _, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	if r.Status == wire.StatusSealed || r.Status == wire.StatusCancelled {
		return nil, machine.Errf(machine.KindConflict, "run %s is %s", p.TaskID, r.Status)
	}
	tx := wire.EnrollTx{TaskID: p.TaskID, TrainerDID: p.TrainerDID, Stake: p.Stake, Signed: p.Signed}
	if r.TaskSpec().Tier != wire.TierOpen {
		if _, err := p.EvidenceRef(); err != nil {
			return nil, machine.Errf(machine.KindInvalid, "attestation: %v", err)
		}
		if err := did.Verify(p.TrainerDID, p.Preimage(), p.Signature); err != nil {
			return nil, machine.Errf(machine.KindUnauthorized, "bad signature: does not verify against %s (the enrolment preimage covers the evidence digest)", p.TrainerDID)
		}
		if tx.Evidence, err = n.checkEvidence(ctx, r, p.Attestation, p.TrainerDID, 0, r.InitModel, wire.Hash{}); err != nil {
			return nil, err
		}
	}
	var res wire.EnrollResult
	h, err := n.broadcast(ctx, wire.TxEnroll, tx, &res)
	if err != nil {
		return nil, err
	}
	res.Height = h
	n.log.Info("trainer enrolled", "task", p.TaskID, "trainer", p.TrainerDID, "status", res.Status, "run", res.RunStatus, "height", h)
	n.w.poke()
	return &res, nil
}

// Leave implements Service: the stake is refunded (minus slashes) at once;
// accepted work still earns its share at seal.
func (n *Node) Leave(ctx context.Context, p *wire.LeaveParams) (*wire.EnrollResult, error) {
	var res wire.EnrollResult
	h, err := n.broadcast(ctx, wire.TxLeave, p, &res)
	if err != nil {
		return nil, err
	}
	res.Height = h
	return &res, nil
}

// CancelRun implements Service.
func (n *Node) CancelRun(ctx context.Context, p *wire.CancelRunParams) (*wire.CancelRunResult, error) {
	var res wire.CancelRunResult
	h, err := n.broadcast(ctx, wire.TxCancelRun, p, &res)
	if err != nil {
		return nil, err
	}
	res.Height = h
	return &res, nil
}

// Faucet implements Service; the chain has one only when its genesis says
// so (--dev).
func (n *Node) Faucet(ctx context.Context, p wire.FaucetParams) (*wire.Balance, error) {
	if _, err := did.Parse(p.DID); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "did: %v", err)
	}
	if _, err := wire.ParseAmount(p.Amount); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "amount: %v", err)
	}
	var salt [8]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return nil, err
	}
	var res wire.Balance
	h, err := n.broadcast(ctx, wire.TxFaucet, wire.FaucetTx{DID: p.DID, Amount: p.Amount, Salt: binary.BigEndian.Uint64(salt[:])}, &res)
	if err != nil {
		return nil, err
	}
	res.Height = h
	return &res, nil
}

// Transfer implements Service: a signed transfer, answered once committed
// with the sender's balance after it. Every check is the machine's.
func (n *Node) Transfer(ctx context.Context, p *wire.TransferParams) (*wire.Balance, error) {
	var res wire.Balance
	h, err := n.broadcast(ctx, wire.TxTransfer, p, &res)
	if err != nil {
		return nil, err
	}
	res.Height = h
	return &res, nil
}

// RegisterSyncer implements Service: a candidate locks stake for elections.
func (n *Node) RegisterSyncer(ctx context.Context, p *wire.RegisterSyncerParams) (*wire.SyncerCandidate, error) {
	amt, err := wire.ParseAmount(p.Stake)
	if err != nil {
		return nil, machine.Errf(machine.KindInvalid, "stake: %v", err)
	}
	if amt.Sign() == 0 {
		return nil, machine.Errf(machine.KindInvalid, "stake must be positive: the election weights candidates by stake")
	}
	var res wire.SyncerCandidate
	h, err := n.broadcast(ctx, wire.TxRegisterCandidate, p, &res)
	if err != nil {
		return nil, err
	}
	res.Height = h
	return &res, nil
}

// Unbond implements Service.
func (n *Node) Unbond(ctx context.Context, p *wire.UnbondParams) (*wire.SyncerCandidate, error) {
	if _, err := did.Parse(p.DID); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "did: %v", err)
	}
	var res wire.SyncerCandidate
	h, err := n.broadcast(ctx, wire.TxUnbond, p, &res)
	if err != nil {
		return nil, err
	}
	res.Height = h
	return &res, nil
}

// SubmitElectionProof implements Service: a registered candidate enters a
// run's election by sending its VRF proof before the run starts.
func (n *Node) SubmitElectionProof(ctx context.Context, p *wire.ElectionProofParams) (*wire.ElectionProofResult, error) {
	if _, err := did.Parse(p.DID); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "did: %v", err)
	}
	var res wire.ElectionProofResult
	h, err := n.broadcast(ctx, wire.TxElectionProof, p, &res)
	if err != nil {
		return nil, err
	}
	res.Height = h
	return &res, nil
}

// Submit implements Service. The receiving node checks the submission
// against the committed state (cheapest first), then the payload (hash,
// signature, layout, codec decode, per-submission verifiers, attestation),
// keeps the payload in its blob store (synced) and only then broadcasts
// the record, so an acknowledged submission is never lost.
//
// A submission without gradient_payload refers to a payload already in the
// blob store by its payload_hash (uploaded with PUT /blobs/<hash>, which
// hashed it as it arrived): it is read from there (mapped, not copied) and
// not hashed again.
func (n *Node) Submit(ctx context.Context, g *wire.OuterGradient) (*wire.SubmitResult, error) {
	if len(g.GradientPayload) > machine.MaxPayloadBytes {
		return nil, machine.Errf(machine.KindInvalid, "gradient_payload: %d bytes, limit %d", len(g.GradientPayload), machine.MaxPayloadBytes)
	}
	r, blk, err := n.load(ctx, g.TaskID)
	if err != nil {
		return nil, err
	}
	fs, err := r.PrecheckRecord(g.TrainerDID, g.Round, g.FragmentIndex, blk.TimeMs)
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
	if got, ok := g.CheckPayloadHash(); !ok {
		return nil, machine.Errf(machine.KindInvalid, "payload_hash mismatch: payload hashes to %s, request says %s", got, g.PayloadHash)
	}
	if err := g.Metrics.Validate(); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "%v", err)
	}
	if err := did.Verify(g.TrainerDID, g.Preimage(), g.Signature); err != nil {
		return nil, machine.Errf(machine.KindUnauthorized, "submission signature: %v", err)
	}
	values, _, err := payloadValues(ctx, n.eng, r.Codec, &fs.FragLayout, g.GradientPayload)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("decode gradient_payload: %w", err)
		}
		return nil, machine.Errf(machine.KindInvalid, "gradient_payload: %v", err)
	}
	if err := checkPayloadBinding(g.GradientPayload, g.TaskID, g.TrainerDID, g.Round, g.FragmentIndex); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "%v", err)
	}
	// The copy rule's read pass runs here, once (inputcache.go): the commit
	// continues it instead of reading the payload again, and the values it
	// found finite need no second scan by the built-in Finite verifier.
	facts, finite := ingestFacts(r, fs, binding{g.TaskID, g.TrainerDID, g.Round, g.FragmentIndex}, values)
	if err := n.verifyPayload(ctx, r, fs, values, finite); err != nil {
		return nil, err
	}
	facts.verified = verifiersKey(r)
	// A second submission of this round and fragment: the same payload is a
	// duplicate; the same tensors in another encoding too (equivocation is
	// about content, PROTOCOL §6), which this node can tell when it holds
	// the first payload.
	var first *machine.Record
	err = n.view(ctx, func(v machine.View) error {
		var rec machine.Record
		raw, err := v.KV.Get(ctx, machine.KSTranscript, machine.RecordKey(g.TaskID, g.Round, int(g.FragmentIndex), g.TrainerDID))
		if errors.Is(err, machine.ErrNotFound) {
			return nil
		}
		if err == nil {
			err = json.Unmarshal(raw, &rec)
		}
		first = &rec
		return err
	})
	if err != nil {
		return nil, err
	}
	if first != nil {
		if first.PayloadHash == g.PayloadHash {
			return nil, machine.Errf(machine.KindConflict, "duplicate submission: %s already submitted payload %s for round %d fragment %d", g.TrainerDID, g.PayloadHash, g.Round, g.FragmentIndex)
		}
		if prev, release, err := loadBlob(ctx, n.blobs, first.PayloadHash); err == nil {
			defer release()
			if pv, _, err := payloadValues(ctx, n.eng, r.Codec, &fs.FragLayout, prev); err == nil && bytes.Equal(pv, values) {
				return nil, machine.Errf(machine.KindConflict, "duplicate submission: %s already submitted the same tensors for round %d fragment %d (payload %s; this payload %s differs only in its encoding)",
					g.TrainerDID, g.Round, g.FragmentIndex, first.PayloadHash, g.PayloadHash)
			}
		}
	}
	tx := wire.SubmissionTx{TaskID: g.TaskID, TrainerDID: g.TrainerDID, Round: g.Round, FragmentIndex: g.FragmentIndex, PayloadHash: g.PayloadHash,
		PayloadSize: uint64(len(g.GradientPayload)), ChainID: g.ChainID, Signature: g.Signature, Metrics: g.Metrics, Provider: n.cfg.Provider}
	if r.TaskSpec().Tier != wire.TierOpen {
		shard := uint64(0)
		if t := r.Trainer(g.TrainerDID); t != nil && len(t.Shards) > 0 {
			shard = uint64(t.Shards[0])
		}
		if tx.Evidence, err = n.checkEvidence(ctx, r, g.Attestation, g.TrainerDID, shard, r.RoundModel, g.PayloadHash); err != nil {
			return nil, err
		}
	}
	if !stored { // a payload sent by reference is in the store already
		if err := n.blobs.Put(ctx, g.PayloadHash, g.GradientPayload); err != nil {
			return nil, fmt.Errorf("store payload: %w", err)
		}
	}
	// Kept before the record is broadcast: its block may start the commit.
	n.inputs.put(g.PayloadHash, layoutKey(r, fs), facts)
	var res wire.SubmitResult
	h, err := n.broadcast(ctx, wire.TxSubmission, tx, &res)
	if err != nil {
		return nil, err
	}
	res.Height = h
	if res.EquivocationClaim != nil {
		return nil, machine.Errf(machine.KindConflict, "equivocation: %s already submitted a different payload (%s) for round %d fragment %d; claim %s recorded: the round's syncer compares the two and slashes equivocation_bps of the stake when they differ",
			g.TrainerDID, first.PayloadHash, g.Round, g.FragmentIndex, *res.EquivocationClaim)
	}
	if res.Finalized {
		n.w.poke()
	}
	return &res, nil
}

// verifyPayload runs the run's per-submission verifiers on a payload's
// values; finite says the values are known to be finite (a read pass
// found so), which is the built-in Finite verifier's whole verdict.
func (n *Node) verifyPayload(ctx context.Context, r *machine.Run, fs *machine.RunFragment, values []byte, finite bool) error {
	for _, v := range r.Verifiers {
		if v.RoundLevel {
			continue
		}
		var out VerifyOutput
		var err error
		switch {
		case n.builtinFinite(ctx, v) && finite:
			out.Accept = true
		case n.builtinFinite(ctx, v):
			// The mandatory Finite rule runs here, on the mapped payload:
			// the same verdict and reason as its Wasm module, without
			// copying the payload into a worker (issue 21: ingest RSS).
			out, err = finiteScan(fs.Dtype, int(fs.N), values)
		default:
			out, err = n.eng.Verify(ctx, VerifyInput{Verifier: v, Dtype: fs.Dtype, N: int(fs.N), Input: values})
		}
		if err != nil {
			var rf *RuleFailure
			if errors.As(err, &rf) {
				return machine.Errf(machine.KindInvalid, "verifier %s: %v", v.Name, rf)
			}
			return fmt.Errorf("verifier %s: %w", v.Name, err)
		}
		if !out.Accept {
			return machine.Errf(machine.KindInvalid, "verifier %s rejected the payload (code %d): %s", v.Name, out.Code, out.Reason)
		}
	}
	return nil
}

// builtinFinite says whether v is the built-in Finite verifier (the
// engine's own module or the native rule), which verifyPayload runs
// in-process. A sponsor's plugin that calls itself Finite is not it.
func (n *Node) builtinFinite(ctx context.Context, v RuleRef) bool {
	if v.Name != machine.FiniteVerifier {
		return false
	}
	if v.Hash == machine.NativeHash(machine.FiniteVerifier) {
		return true
	}
	n.finiteOnce.Do(func() {
		if ref, err := n.eng.ResolveVerifier(ctx, machine.FiniteVerifier); err == nil {
			n.finiteHash = ref.Hash
		}
	})
	return !n.finiteHash.IsZero() && v.Hash == n.finiteHash
}

// storedPayload returns a payload submitted by reference from the blob
// store, and the function that releases it.
func (n *Node) storedPayload(ctx context.Context, h wire.Hash) ([]byte, func(), error) {
	if h.IsZero() {
		return nil, nil, machine.Errf(machine.KindInvalid, "gradient_payload is missing and payload_hash is zero: send the payload (base64) or upload it with PUT /blobs/<payload_hash> and name its hash")
	}
	payload, release, err := loadBlob(ctx, n.blobs, h)
	if errors.Is(err, machine.ErrNotFound) {
		return nil, nil, machine.Errf(machine.KindNotFound, "payload %s is not stored on this node: upload it first (PUT /blobs/%s on the RPC port) or send gradient_payload", h, h)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("stored payload %s: %w", h, err)
	}
	if len(payload) > machine.MaxPayloadBytes {
		release()
		return nil, nil, machine.Errf(machine.KindInvalid, "payload %s: %d bytes, limit %d", h, len(payload), machine.MaxPayloadBytes)
	}
	return payload, release, nil
}

// initWeightsFrom resolves initial weights sent inline (raw) and/or named
// by the hash of a blob uploaded before (h). It returns nil when there are
// none, and the function that releases a stored blob's mapping.
func (n *Node) initWeightsFrom(ctx context.Context, raw []byte, h wire.Hash, field string) ([]byte, func(), error) {
	switch {
	case len(raw) > 0:
		if !h.IsZero() && wire.ContentHash(raw) != h {
			return nil, nil, machine.Errf(machine.KindInvalid, "%s_hash %s is not the hash of %s (%s)", field, h, field, wire.ContentHash(raw))
		}
		return raw, func() {}, nil
	case !h.IsZero():
		b, release, err := loadBlob(ctx, n.blobs, h)
		if errors.Is(err, machine.ErrNotFound) {
			return nil, nil, machine.Errf(machine.KindNotFound, "%s_hash %s: no such blob on this node: upload the weights first (PUT /blobs/%s on the RPC port) or send %s", field, h, h, field)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("stored %s %s: %w", field, h, err)
		}
		return b, release, nil
	}
	return nil, func() {}, nil
}
