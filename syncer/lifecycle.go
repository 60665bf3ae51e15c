package syncer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"

	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// PostTask implements Service: validate the spec, escrow the reward, store
// the run (and the initial weights, if given) in one batch.
func (n *Node) PostTask(ctx context.Context, p *wire.PostTaskParams) (*wire.PostTaskResult, error) {
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
	if spec.Tier != wire.TierOpen && (n.cfg.Attestor == nil || n.cfg.Nonces == nil) {
		return nil, Errf(KindInvalid, "spec: tier %s needs attestation, which this node is not configured for", spec.Tier)
	}
	if spec.Tier == wire.TierConfidential && n.cfg.DatasetKeys == nil {
		return nil, Errf(KindInvalid, "spec: tier Confidential needs a key broker, which runs only in an enclave: start the node with --enclave (auto on TEE hardware, simulated-* for development)")
	}
	if spec.Tier != wire.TierOpen && len(spec.AttestationPolicy) == 0 {
		return nil, Errf(KindInvalid, "spec: tier %s needs an attestation_policy", spec.Tier)
	}
	if p.DatasetKey != nil {
		if spec.Tier != wire.TierConfidential {
			return nil, Errf(KindInvalid, "dataset_key: only a Confidential run has a dataset key, tier is %s", spec.Tier)
		}
		if len(p.DatasetKey) != 32 {
			return nil, Errf(KindInvalid, "dataset_key: %d bytes, want 32 (an AES-256 key)", len(p.DatasetKey))
		}
	}
	reward, _ := wire.ParseAmount(spec.RewardPool)
	specHash := wire.SpecHash(canon)
	iw, err := n.initWeightsFrom(ctx, p.InitWeights, p.InitWeightsHash, "init_weights")
	if err != nil {
		return nil, err
	}
	defer iw.release()
	wh := iw.hash
	// Cheap gates before anything costly (resolving the rule runs its
	// probe): the signature, the sponsor's rate limit, and the funds for
	// the fee and the reward. The nonce is checked again under the lock.
	if err := did.Verify(spec.SponsorDID, p.Preimage(spec.SponsorDID, specHash, wh), p.Signature); err != nil {
		return nil, Errf(KindUnauthorized, "bad signature: does not verify against %s", spec.SponsorDID)
	}
	fee := n.cfg.Fees.posting()
	if err := n.needFunds(ctx, spec.SponsorDID, new(big.Int).Add(fee, reward), "the posting fee plus the reward pool"); err != nil {
		return nil, err
	}
	if err := n.limit(n.postLimit, "postTask", spec.SponsorDID); err != nil {
		return nil, err
	}
	rule, err := n.eng.ResolveRule(ctx, spec.AggregationRef(), spec.AggregationParams, spec.Quorum, spec.TrainerCount)
	if err != nil {
		return nil, Errf(KindInvalid, "spec: aggregation: %v", err)
	}
	if spec.RobustRequiresVerified && rule.Name != "Mean" && spec.Tier == wire.TierOpen {
		return nil, Errf(KindInvalid, "spec: robust rule %s is marked to require tier Verified or above, tier is Open", rule.Name)
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
		return nil, Errf(KindInvalid, "%v", err)
	}
	r := &runState{Spec: canon, SpecHash: specHash, Status: wire.StatusAwaiting, Rule: rule, Verifiers: verifiers, Outer: outer, Codec: codec, spec: spec,
		PostedMs: n.now().UnixMilli()}
	r.Plugins = pluginSet(rule, outer, verifiers)
	if codec != nil {
		r.Plugins = pluginSet(rule, outer, verifiers, *codec)
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.kv.Get(ctx, KSRuns, runKey(spec.TaskID)); err == nil {
		return nil, Errf(KindConflict, "a run with task_id %q already exists", spec.TaskID)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	var b Batch
	if err := n.checkSigned(ctx, &b, spec.SponsorDID, p.Nonce, p.Signature, p.Preimage(spec.SponsorDID, specHash, wh)); err != nil {
		return nil, err
	}
	if iw.raw != nil {
		if err := n.stageInitWeights(ctx, &b, r, iw); err != nil {
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
		b.Set(KSMeta, datasetKeyKey(spec.TaskID), sealed)
	}
	lt := newLedgerTx(ctx, n.kv)
	if err := lt.transfer(acctDID(spec.SponsorDID), acctIssuer, fee, "posting fee (burned)"); err != nil {
		return nil, err
	}
	if err := lt.transfer(acctDID(spec.SponsorDID), acctEscrow(spec.TaskID), reward, "escrow reward pool"); err != nil {
		return nil, err
	}
	if err := lt.flush(&b); err != nil {
		return nil, err
	}
	n.putRun(&b, r)
	if err := n.kv.Commit(ctx, &b); err != nil {
		return nil, err
	}
	n.log.Info("task posted", "task", spec.TaskID, "M", spec.TrainerCount, "K", spec.Quorum, "F", spec.Architecture.FragmentCount, "rule", rule.Name)
	n.announce(ctx, Event{TaskID: spec.TaskID, Kind: "posted"})
	return &wire.PostTaskResult{TaskID: spec.TaskID, SpecHash: specHash, Status: r.Status, DatasetKey: datasetKey}, nil
}

// FiniteVerifier is the verifier every run has, whatever its spec lists
// (DESIGN §4.2): a NaN or Inf coordinate would make every robust rule's
// answer depend on where it sits, and a Mean of it poisons the weights.
const FiniteVerifier = "Finite"

// resolveVerifiers resolves the spec's verifiers and puts the finite-values
// verifier first when the spec does not list it. The posted spec (and so its
// hash) is stored as posted; the added verifier shows in the run's
// verifier list and its plugin hash in the receipt's plugin_hashes.
func (n *Node) resolveVerifiers(ctx context.Context, refs []string) ([]RuleRef, error) {
	var verifiers []RuleRef
	hasFinite := false
	for _, v := range refs {
		ref, err := n.eng.ResolveVerifier(ctx, v)
		if err != nil {
			return nil, Errf(KindInvalid, "spec: verification %q: %v", v, err)
		}
		hasFinite = hasFinite || ref.Name == FiniteVerifier
		verifiers = append(verifiers, ref)
	}
	if !hasFinite {
		ref, err := n.eng.ResolveVerifier(ctx, FiniteVerifier)
		if err != nil {
			return nil, fmt.Errorf("resolve the mandatory %s verifier: %w", FiniteVerifier, err)
		}
		verifiers = append([]RuleRef{ref}, verifiers...)
	}
	return verifiers, nil
}

func pluginSet(refs ...any) []wire.Hash {
	seen := map[wire.Hash]bool{}
	var out []wire.Hash
	add := func(r RuleRef) {
		if !seen[r.Hash] {
			seen[r.Hash] = true
			out = append(out, r.Hash)
		}
	}
	for _, x := range refs {
		switch v := x.(type) {
		case RuleRef:
			add(v)
		case []RuleRef:
			for _, r := range v {
				add(r)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return string(out[i][:]) < string(out[j][:]) })
	return out
}

// SetInitWeights implements Service: the sponsor supplies weights after posting.
func (n *Node) SetInitWeights(ctx context.Context, p *wire.SetInitWeightsParams) (*wire.PostTaskResult, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	if r.HasInit {
		return nil, Errf(KindConflict, "run %s already has initial weights (model %s)", p.TaskID, r.InitModel)
	}
	if r.Status != wire.StatusAwaiting {
		return nil, Errf(KindConflict, "run %s is %s: initial weights can only be set before it starts", p.TaskID, r.Status)
	}
	var b Batch
	iw, err := n.initWeightsFrom(ctx, p.Weights, p.WeightsHash, "weights")
	if err != nil {
		return nil, err
	}
	defer iw.release()
	if iw.raw == nil {
		return nil, Errf(KindInvalid, "weights are missing: send weights (base64) or weights_hash of an uploaded blob")
	}
	if err := n.checkSigned(ctx, &b, r.spec.SponsorDID, p.Nonce, p.Signature, p.PreimageFor(r.spec.SponsorDID, iw.hash)); err != nil {
		return nil, err
	}
	if err := n.stageInitWeights(ctx, &b, r, iw); err != nil {
		return nil, err
	}
	if err := n.maybeStart(ctx, &b, r); err != nil {
		return nil, err
	}
	n.putRun(&b, r)
	if err := n.kv.Commit(ctx, &b); err != nil {
		return nil, err
	}
	return &wire.PostTaskResult{TaskID: p.TaskID, SpecHash: r.SpecHash, Status: r.Status}, nil
}

// SplitFragments assigns tensors to F fragments (docs/PROTOCOL.md §5):
// tensors sorted by name bytewise; fragments are contiguous runs in that
// order; fragment f closes after the first tensor at which the cumulative
// element count reaches ceil((f+1)·P/F), always leaving at least one tensor
// for each later fragment; the last fragment takes the rest.
func SplitFragments(tensors []safetensors.Tensor, f int) ([][]safetensors.Tensor, error) {
	if len(tensors) < f {
		return nil, fmt.Errorf("%d tensors cannot fill %d fragments (each fragment needs at least one tensor)", len(tensors), f)
	}
	ts := append([]safetensors.Tensor(nil), tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	var total int64
	for _, t := range ts {
		total += elems(t.Shape)
	}
	out := make([][]safetensors.Tensor, f)
	j := 0
	var cum int64
	for fi := 0; fi < f; fi++ {
		if fi == f-1 {
			out[fi] = ts[j:]
			break
		}
		target := ((int64(fi)+1)*total + int64(f) - 1) / int64(f)
		out[fi] = append(out[fi], ts[j])
		cum += elems(ts[j].Shape)
		j++
		for j < len(ts)-(f-fi-1) && cum < target {
			out[fi] = append(out[fi], ts[j])
			cum += elems(ts[j].Shape)
			j++
		}
	}
	return out, nil
}

func elems(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// initWeights is an initial weights file, sent inline or named by the hash
// of a blob uploaded before.
type initWeights struct {
	raw     []byte // nil: none
	hash    wire.Hash
	stored  bool // raw is the blob store's (mapped until release)
	release func()
}

// initWeightsFrom resolves inline weights and/or the hash of stored ones.
func (n *Node) initWeightsFrom(ctx context.Context, raw []byte, h wire.Hash, field string) (*initWeights, error) {
	iw := &initWeights{release: func() {}}
	switch {
	case len(raw) > 0:
		if len(raw) > MaxInitWeights {
			return nil, Errf(KindInvalid, "%s: %d bytes, limit %d", field, len(raw), MaxInitWeights)
		}
		iw.raw, iw.hash = raw, wire.ContentHash(raw)
		if !h.IsZero() && h != iw.hash {
			return nil, Errf(KindInvalid, "%s_hash %s is not the hash of %s (%s)", field, h, field, iw.hash)
		}
	case !h.IsZero():
		b, release, err := loadBlob(ctx, n.blobs, h)
		if errors.Is(err, ErrNotFound) {
			return nil, Errf(KindNotFound, "%s_hash %s: no such blob on this node: upload the weights first (PUT /blobs/%s on the RPC port) or send %s", field, h, h, field)
		}
		if err != nil {
			return nil, fmt.Errorf("stored %s %s: %w", field, h, err)
		}
		iw.raw, iw.hash, iw.stored, iw.release = b, h, true, release
		if len(b) > MaxInitWeights {
			release()
			return nil, Errf(KindInvalid, "%s: %d bytes, limit %d", field, len(b), MaxInitWeights)
		}
	}
	return iw, nil
}

// stageInitWeights parses the initial weights, splits them into fragments
// and stages fragment weights in b; the file itself goes to the blob store
// (durable before b is committed).
func (n *Node) stageInitWeights(ctx context.Context, b *Batch, r *runState, iw *initWeights) error {
	raw, rawHash := iw.raw, iw.hash
	if len(raw) > MaxInitWeights {
		return Errf(KindInvalid, "init weights: %d bytes, limit %d", len(raw), MaxInitWeights)
	}
	tensors, _, err := safetensors.Parse(raw, safetensors.DefaultLimits)
	if err != nil {
		return Errf(KindInvalid, "init weights: %v", err)
	}
	if len(tensors) == 0 {
		return Errf(KindInvalid, "init weights: no tensors")
	}
	dt := Dtype(tensors[0].Dtype)
	for _, t := range tensors {
		if Dtype(t.Dtype) != dt {
			return Errf(KindInvalid, "init weights: tensor %q is %s but %q is %s; all tensors must share one dtype", t.Name, t.Dtype, tensors[0].Name, dt)
		}
	}
	if dt != F32 && dt != BF16 {
		return Errf(KindInvalid, "init weights: dtype %s unsupported (want F32 or BF16)", dt)
	}
	frags, err := SplitFragments(tensors, r.spec.Architecture.FragmentCount)
	if err != nil {
		return Errf(KindInvalid, "init weights: %v", err)
	}
	r.Fragments = make([]*fragState, len(frags))
	hashes := make([]wire.Hash, len(frags))
	for i, ts := range frags {
		fs, data, err := buildFragment(ts)
		if err != nil {
			return err
		}
		hashes[i] = fs.WeightsHash
		b.Set(KSWeights, weightsKey(r.spec.TaskID, i), data)
		r.Fragments[i] = fs
	}
	r.HasInit = true
	r.InitModel = ModelHash(hashes)
	r.InitFile = rawHash
	if !iw.stored {
		if err := n.blobs.Put(ctx, rawHash, raw); err != nil {
			return fmt.Errorf("store initial weights %s: %w", rawHash, err)
		}
	}
	return nil
}

// buildFragment lays out one fragment of the initial weights: its tensors'
// layout, their values concatenated in that order, and its weights hash.
func buildFragment(ts []safetensors.Tensor) (*fragState, []byte, error) {
	fs := &fragState{Dtype: Dtype(ts[0].Dtype)}
	var data []byte
	for _, t := range ts {
		fs.Tensors = append(fs.Tensors, wire.TensorInfo{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape})
		fs.N += elems(t.Shape)
		data = append(data, t.Data...)
	}
	enc, err := encodeFragment(fs, data)
	if err != nil {
		return nil, nil, err
	}
	fs.WeightsHash = wire.ContentHash(enc)
	return fs, data, nil
}

// encodeFragment renders a fragment's values as canonical safetensors; its
// ContentHash is the fragment's weights hash.
func encodeFragment(fs *fragState, data []byte) ([]byte, error) {
	ts := make([]safetensors.Tensor, len(fs.Tensors))
	off := int64(0)
	sz := int64(fs.Dtype.Size())
	for i, t := range fs.Tensors {
		n := elems(t.Shape) * sz
		if off+n > int64(len(data)) {
			return nil, fmt.Errorf("fragment data shorter than its layout")
		}
		ts[i] = safetensors.Tensor{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape, Data: data[off : off+n]}
		off += n
	}
	return safetensors.Encode(ts, nil)
}

// Enroll implements Service.
func (n *Node) Enroll(ctx context.Context, p *wire.EnrollParams) (*wire.EnrollResult, error) {
	if _, err := did.Parse(p.TrainerDID); err != nil {
		return nil, Errf(KindInvalid, "trainer_did: %v", err)
	}
	stake, err := wire.ParseAmount(p.Stake)
	if err != nil {
		return nil, Errf(KindInvalid, "stake: %v", err)
	}
	if stake.Sign() == 0 {
		return nil, Errf(KindInvalid, "stake is \"0\": a trainer must lock a positive stake (slashing is a fraction of it)")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	r, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	if r.Status == wire.StatusSealed || r.Status == wire.StatusCancelled {
		return nil, Errf(KindConflict, "run %s is %s", p.TaskID, r.Status)
	}
	if t := r.trainer(p.TrainerDID); t != nil && (t.Status == wire.TrainerActive || t.Status == wire.TrainerJoining) {
		return nil, Errf(KindConflict, "%s is already enrolled in %s", p.TrainerDID, p.TaskID)
	} else if t != nil && t.Status == wire.TrainerEvicted {
		return nil, Errf(KindConflict, "%s was evicted from %s and cannot rejoin", p.TrainerDID, p.TaskID)
	}
	if c := r.countActive(); c >= r.spec.TrainerCount {
		return nil, Errf(KindConflict, "run %s is full: %d of M=%d trainers enrolled", p.TaskID, c, r.spec.TrainerCount)
	}
	if r.spec.MinStake != "" {
		if ms, _ := wire.ParseAmount(r.spec.MinStake); stake.Cmp(ms) < 0 {
			return nil, Errf(KindInvalid, "stake %s is below the run's min_stake %s", stake, ms)
		}
	}
	var b Batch
	if err := n.checkSigned(ctx, &b, p.TrainerDID, p.Nonce, p.Signature, p.Preimage()); err != nil {
		return nil, err
	}
	if r.spec.Tier != wire.TierOpen {
		dg, err := n.checkEvidence(ctx, r, p.Attestation, p.TrainerDID, 0, r.InitModel)
		if err != nil {
			return nil, err
		}
		r.Attestations = append(r.Attestations, dg)
	}
	lt := newLedgerTx(ctx, n.kv)
	if err := lt.transfer(acctDID(p.TrainerDID), acctStake(p.TaskID, p.TrainerDID), stake, "enrolment stake"); err != nil {
		return nil, err
	}
	if err := lt.flush(&b); err != nil {
		return nil, err
	}
	t := r.trainer(p.TrainerDID)
	if t == nil {
		t = &trainerState{DID: p.TrainerDID, Weight: "0", Reward: "0", Slashed: "0", Stake: "0"}
		r.addTrainer(t)
	}
	// The stake account was emptied when the trainer left (refundStake), so
	// the stake of this enrolment is exactly what is locked now; adding it
	// to the previous enrolment's figure showed a stake that is not there
	// (and made slashes, which are basis points of it, too large).
	t.Stake = stake.String()
	if r.Status == wire.StatusAwaiting {
		t.Status = wire.TrainerActive
		t.JoinedRound = 0
	} else {
		t.Status = wire.TrainerJoining
		t.JoinedRound = r.Round + 1
	}
	if err := n.maybeStart(ctx, &b, r); err != nil {
		return nil, err
	}
	n.putRun(&b, r)
	if err := n.kv.Commit(ctx, &b); err != nil {
		return nil, err
	}
	n.log.Info("trainer enrolled", "task", p.TaskID, "trainer", p.TrainerDID, "status", t.Status, "active", r.countActive())
	return enrollResult(r, t), nil
}

// Leave implements Service: the stake is refunded (minus slashes) at once;
// accepted work still earns its share at seal.
func (n *Node) Leave(ctx context.Context, p *wire.LeaveParams) (*wire.EnrollResult, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	t := r.trainer(p.TrainerDID)
	if t == nil || (t.Status != wire.TrainerActive && t.Status != wire.TrainerJoining) {
		return nil, Errf(KindNotFound, "%s is not enrolled in %s", p.TrainerDID, p.TaskID)
	}
	if r.Status == wire.StatusSealed {
		return nil, Errf(KindConflict, "run %s is sealed", p.TaskID)
	}
	var b Batch
	if err := n.checkSigned(ctx, &b, p.TrainerDID, p.Nonce, p.Signature, p.Preimage()); err != nil {
		return nil, err
	}
	lt := newLedgerTx(ctx, n.kv)
	if err := n.refundStake(lt, r, t); err != nil {
		return nil, err
	}
	if err := lt.flush(&b); err != nil {
		return nil, err
	}
	t.Status = wire.TrainerLeft
	t.Shards = nil
	if r.Status == wire.StatusRunning {
		r.Left = append(r.Left, t.DID)
	}
	n.putRun(&b, r)
	if err := n.kv.Commit(ctx, &b); err != nil {
		return nil, err
	}
	n.log.Info("trainer left", "task", p.TaskID, "trainer", p.TrainerDID)
	return &wire.EnrollResult{TaskID: p.TaskID, TrainerDID: p.TrainerDID, Status: t.Status, Shards: []int{}, ShardAssignments: []int{}, FromRound: r.Round, RunStatus: r.Status}, nil
}

func (n *Node) refundStake(lt *ledgerTx, r *runState, t *trainerState) error {
	bal, err := lt.balance(acctStake(r.spec.TaskID, t.DID))
	if err != nil {
		return err
	}
	return lt.transfer(acctStake(r.spec.TaskID, t.DID), acctDID(t.DID), new(big.Int).Set(bal), "stake refund")
}

// slash moves bps of a trainer's original stake (capped at what is left) from
// its stake account into the run's escrow, where it joins the reward pool.
func (n *Node) slash(lt *ledgerTx, r *runState, t *trainerState, b int, why string) error {
	if b <= 0 {
		return nil
	}
	amt := bps(bigOf(t.Stake), b)
	left, err := lt.balance(acctStake(r.spec.TaskID, t.DID))
	if err != nil {
		return err
	}
	if amt.Cmp(left) > 0 {
		amt = new(big.Int).Set(left)
	}
	if err := lt.transfer(acctStake(r.spec.TaskID, t.DID), acctEscrow(r.spec.TaskID), amt, "slash: "+why); err != nil {
		return err
	}
	t.Slashed = new(big.Int).Add(bigOf(t.Slashed), amt).String()
	n.log.Warn("trainer slashed", "task", r.spec.TaskID, "trainer", t.DID, "amount", amt, "why", why)
	return nil
}

// maybeStart starts the run when M trainers are enrolled and the initial
// weights are known: elect the syncer, assign shards, open round 0.
func (n *Node) maybeStart(ctx context.Context, b *Batch, r *runState) error {
	if r.Status != wire.StatusAwaiting || !r.HasInit || r.count(wire.TrainerActive) < r.spec.TrainerCount {
		return nil
	}
	el, err := n.elect(ctx, r)
	if err != nil {
		return err
	}
	if el == nil {
		n.log.Warn("run has M trainers but no syncer candidate with a proof; waiting", "task", r.spec.TaskID)
		return nil
	}
	r.Election = el
	r.Syncer = el.Winner
	r.Status = wire.StatusRunning
	r.Round = 0
	r.RoundMs = n.now().UnixMilli()
	r.RoundModel = r.InitModel
	r.assignShards()
	n.log.Info("run started", "task", r.spec.TaskID, "syncer", r.Syncer)
	return nil
}

// elect runs the stake-weighted ECVRF election among the registered
// candidates this node can prove for (itself). Proofs are stored in the run
// and anyone can re-check them with election.Check.
func (n *Node) elect(ctx context.Context, r *runState) (*wire.Election, error) {
	cands, err := n.ListSyncers(ctx)
	if err != nil {
		return nil, err
	}
	alpha := election.Alpha(r.spec.TaskID, r.SpecHash)
	var es []election.Entrant
	for _, c := range cands {
		d, err := did.Parse(c.DID)
		if err != nil {
			return nil, err
		}
		var proof []byte
		if c.DID == n.cfg.Signer.DID() {
			if proof, err = n.cfg.Signer.Prove(ctx, alpha); err != nil {
				return nil, fmt.Errorf("election proof: %w", err)
			}
		} else if proof, err = n.kv.Get(ctx, KSMeta, proofKey(r.spec.TaskID, c.DID)); errors.Is(err, ErrNotFound) {
			n.log.Info("election: candidate sent no proof for this run, not entered", "task", r.spec.TaskID, "candidate", c.DID)
			continue
		} else if err != nil {
			return nil, err
		}
		if c.Unbonding {
			n.log.Info("election: candidate is unbonding, not entered", "task", r.spec.TaskID, "candidate", c.DID)
			continue
		}
		es = append(es, election.Entrant{DID: c.DID, Key: d.Key, Stake: bigOf(c.Stake), Proof: proof})
	}
	if len(es) == 0 {
		return nil, nil
	}
	el, err := election.Record(alpha, es)
	if err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	return &el, nil
}

func (n *Node) announce(ctx context.Context, ev Event) {
	if n.cfg.Announce != nil {
		n.cfg.Announce(ctx, ev)
	}
}

// checkEvidence runs the attestor for Verified/Confidential tiers: the
// claim's nonce must be one this node issued to the trainer for this run
// (consumed here), and the evidence must bind AttestReportData of the
// claimed program, the trainer's shard, the round's model and that nonce.
func (n *Node) checkEvidence(ctx context.Context, r *runState, raw json.RawMessage, trainer string, shard uint64, model wire.Hash) (wire.Hash, error) {
	if n.cfg.Attestor == nil || n.cfg.Nonces == nil {
		return wire.Hash{}, Errf(KindAttestation, "tier %s needs attestation, which this node is not configured for", r.spec.Tier)
	}
	if len(raw) == 0 {
		return wire.Hash{}, Errf(KindAttestation, "tier %s: attestation evidence is required", r.spec.Tier)
	}
	var claim wire.AttestationClaim
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&claim); err != nil {
		return wire.Hash{}, Errf(KindInvalid, "attestation: %v", err)
	}
	if err := n.cfg.Nonces.Consume(ctx, nonceScope(r.spec.TaskID, trainer), claim.Nonce); err != nil {
		return wire.Hash{}, Errf(KindAttestation, "attestation refused: check binding.nonce failed: %v", err)
	}
	rd := wire.AttestReportData(claim.ProgramHash, shard, model, trainer, claim.Nonce)
	dg, err := n.cfg.Attestor.CheckEvidence(ctx, r.spec.Tier, r.spec.AttestationPolicy, claim.Envelope, rd)
	if err != nil {
		if KindOf(err) == KindAttestation {
			return wire.Hash{}, err
		}
		return wire.Hash{}, Errf(KindAttestation, "attestation refused: %v", err)
	}
	return dg, nil
}

func nonceScope(task, trainer string) string { return task + "/" + trainer }

// AttestNonce implements Service.
func (n *Node) AttestNonce(ctx context.Context, p wire.NonceParams) (*wire.NonceResult, error) {
	if n.cfg.Nonces == nil {
		return nil, Errf(KindDisabled, "this node does not issue attestation nonces (no attestor configured)")
	}
	r, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	if _, err := did.Parse(p.DID); err != nil {
		return nil, Errf(KindInvalid, "did: %v", err)
	}
	res := &wire.NonceResult{Round: r.Round, ModelHash: r.InitModel}
	if r.Status == wire.StatusRunning {
		res.ModelHash = r.RoundModel
		if t := r.trainer(p.DID); t != nil && len(t.Shards) > 0 {
			res.Shard = uint64(t.Shards[0])
		}
	}
	if res.Nonce, err = n.cfg.Nonces.Issue(ctx, nonceScope(p.TaskID, p.DID)); err != nil {
		return nil, err
	}
	return res, nil
}

func proofKey(task, did string) []byte { return []byte("proof/" + task + "/" + did) }

// SubmitElectionProof implements Service: a registered candidate enters a
// run's election by sending its VRF proof before the run starts.
func (n *Node) SubmitElectionProof(ctx context.Context, p *wire.ElectionProofParams) (*wire.ElectionProofResult, error) {
	d, err := did.Parse(p.DID)
	if err != nil {
		return nil, Errf(KindInvalid, "did: %v", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	r, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusAwaiting {
		return nil, Errf(KindConflict, "run %s is %s: its election is over", p.TaskID, r.Status)
	}
	if _, err := n.kv.Get(ctx, KSMeta, candKey(p.DID)); errors.Is(err, ErrNotFound) {
		return nil, Errf(KindNotFound, "%s is not a registered syncer candidate (tenzro syncer register)", p.DID)
	} else if err != nil {
		return nil, err
	}
	var b Batch
	if err := n.checkSigned(ctx, &b, p.DID, p.Nonce, p.Signature, p.Preimage()); err != nil {
		return nil, err
	}
	out, err := vrf.Verify(d.Key, p.Proof, election.Alpha(r.spec.TaskID, r.SpecHash))
	if err != nil {
		return nil, Errf(KindInvalid, "election proof does not verify for %s over run %s's alpha: %v", p.DID, p.TaskID, err)
	}
	b.Set(KSMeta, proofKey(p.TaskID, p.DID), append([]byte(nil), p.Proof...))
	if err := n.kv.Commit(ctx, &b); err != nil {
		return nil, err
	}
	return &wire.ElectionProofResult{TaskID: p.TaskID, DID: p.DID, Output: out}, nil
}
