package chain

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// State keys (docs/protocol/chain.md). Accounts use the syncer ledger's
// names: did:<DID>, escrow:<task>, stake:<task>:<DID>, syncer-stake:<DID>,
// and issuer (genesis allocations are minted from it, so the sum of every
// balance is always 0).
func keyAcct(acct string) string        { return "acct/" + acct }
func keyNonce(d string) string          { return "nonce/" + d }
func keyCand(d string) string           { return "cand/" + d }
func keyRun(task string) string         { return "run/" + task }
func keyProof(task, d string) string    { return "proof/" + task + "/" + d }
func keyProofPrefix(task string) string { return "proof/" + task + "/" }
func keyJournal(seq uint64) string      { return fmt.Sprintf("journal/%020d", seq) }
func keyRunLogLeaf(i uint64) string     { return fmt.Sprintf("runlog/leaf/%020d", i) }
func acctDID(d string) string           { return "did:" + d }
func acctEscrow(task string) string     { return "escrow:" + task }
func acctStake(task, d string) string   { return "stake:" + task + ":" + d }
func acctSyncerStake(d string) string   { return "syncer-stake:" + d }
func keySub(task string, round, frag uint64, d string) string {
	return fmt.Sprintf("sub/%s/%020d/%010d/%s", task, round, frag, d)
}
func keyEquiv(task string, round, frag uint64, d string) string {
	return fmt.Sprintf("equiv/%s/%020d/%010d/%s", task, round, frag, d)
}

const (
	acctIssuer    = "issuer"
	keyJournalSeq = "journal-seq"
	keyRunLogSize = "runlog/size"
	// MaxPayloadSize bounds a submission record's payload_size (the store's
	// per-value ceiling).
	MaxPayloadSize = 1 << 30
)

// Trainer statuses on chain.
const (
	trainerActive = wire.TrainerActive
)

// runRecord is a run on chain (key run/<task>). JSON with fixed field order;
// no floats.
type runRecord struct {
	TaskID          string          `json:"task_id"`
	Sponsor         string          `json:"sponsor_did"`
	Spec            json.RawMessage `json:"spec"` // canonical (JCS)
	SpecHash        wire.Hash       `json:"spec_hash"`
	InitWeightsHash wire.Hash       `json:"init_weights_hash"`
	Status          string          `json:"status"`
	Reward          string          `json:"reward_pool"`
	Round           uint64          `json:"round"`
	Trainers        []trainerRecord `json:"trainers"` // DID order
	Election        *wire.Election  `json:"election,omitempty"`
	Submissions     uint64          `json:"submissions"`
	Equivocations   uint64          `json:"equivocations"`
	PostedHeight    int64           `json:"posted_height"`
	PostedTimeMs    int64           `json:"posted_time_ms"`
	StartedHeight   int64           `json:"started_height,omitempty"`
	// RoundStartMs is the block time at which the current round started.
	RoundStartMs int64 `json:"round_start_ms"`
	// RoundRoots are the committed rounds' commit hashes, RoundSyncers who
	// committed each.
	RoundRoots   []wire.Hash `json:"round_roots"`
	RoundSyncers []string    `json:"round_syncers"`
	// Joined, Left and Equivocations are the current round's membership
	// changes and evidence, which its commit must list (PROTOCOL §6).
	Joined       []string    `json:"joined"`
	Left         []string    `json:"left"`
	EquivDigests []wire.Hash `json:"equivocation_digests"`
	RunRoot      *wire.Hash  `json:"run_root,omitempty"`
	SyncerDID    string      `json:"syncer_did,omitempty"`
	SealedHeight int64       `json:"sealed_height,omitempty"`
	RunLogIndex  uint64      `json:"run_log_index,omitempty"`

	spec *wire.TaskSpec
}

type trainerRecord struct {
	DID          string `json:"did"`
	Status       string `json:"status"`
	Stake        string `json:"stake"`
	Slashed      string `json:"slashed"`
	MissedRounds uint64 `json:"missed_rounds"`
	ConsecMissed uint64 `json:"consecutive_missed"`
}

// SubmissionRecord is what the chain keeps of one submission.
type SubmissionRecord struct {
	Submission
	Height int64 `json:"height"`
	TimeMs int64 `json:"time_ms"`
}

// Equivocation is the evidence of two different payloads from one trainer
// for one round and fragment.
type Equivocation struct {
	Digest wire.Hash        `json:"digest"`
	First  SubmissionRecord `json:"first"`
	Second SubmissionRecord `json:"second"`
}

// exec runs one transaction against an overlay at a block's height and time.
type exec struct {
	ctx    context.Context
	o      *overlay
	height int64
	timeMs int64
}

func (x *exec) getJSON(key string, v any) (bool, error) {
	raw, ok, err := x.o.get(x.ctx, key)
	if err != nil || !ok {
		return ok, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("state %q is corrupt: %w", key, err)
	}
	return true, nil
}

func (x *exec) putJSON(key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %q: %w", key, err)
	}
	x.o.set(key, raw)
	return nil
}

func (x *exec) balance(acct string) (*big.Int, error) {
	raw, ok, err := x.o.get(x.ctx, keyAcct(acct))
	if err != nil || !ok {
		return new(big.Int), err
	}
	v, good := new(big.Int).SetString(string(raw), 10)
	if !good {
		return nil, fmt.Errorf("state: corrupt balance of %s", acct)
	}
	return v, nil
}

// transfer is one double entry: from −amount, to +amount, journalled.
func (x *exec) transfer(from, to string, amount *big.Int, memo string) error {
	if amount.Sign() < 0 {
		return errf(CodeInvalid, "negative amount %s", amount)
	}
	if amount.Sign() == 0 {
		return nil
	}
	fb, err := x.balance(from)
	if err != nil {
		return err
	}
	if from != acctIssuer && fb.Cmp(amount) < 0 {
		return errf(CodeFunds, "balance of %s is %s attoTNZO, needs %s", strings.TrimPrefix(from, "did:"), fb, amount)
	}
	tb, err := x.balance(to)
	if err != nil {
		return err
	}
	x.o.set(keyAcct(from), []byte(new(big.Int).Sub(fb, amount).String()))
	x.o.set(keyAcct(to), []byte(new(big.Int).Add(tb, amount).String()))
	seq, err := x.u64(keyJournalSeq)
	if err != nil {
		return err
	}
	x.o.set(keyJournal(seq), []byte(fmt.Sprintf("%d %s -> %s %s %s", x.height, from, to, amount, memo)))
	x.setU64(keyJournalSeq, seq+1)
	return nil
}

func (x *exec) u64(key string) (uint64, error) {
	raw, ok, err := x.o.get(x.ctx, key)
	if err != nil || !ok {
		return 0, err
	}
	if len(raw) != 8 {
		return 0, fmt.Errorf("state %q: %d bytes, want 8", key, len(raw))
	}
	return binary.BigEndian.Uint64(raw), nil
}

func (x *exec) setU64(key string, v uint64) { x.o.set(key, binary.BigEndian.AppendUint64(nil, v)) }

// checkSigned verifies a signed request (signature over the method's
// preimage, then nonce above the signer's last) and stages the new nonce.
func (x *exec) checkSigned(signer string, nonce uint64, sig, pre []byte) error {
	if err := verifySig(signer, pre, sig); err != nil {
		return err
	}
	raw, seen, err := x.o.get(x.ctx, keyNonce(signer))
	if err != nil {
		return err
	}
	if seen {
		if len(raw) != 8 {
			return fmt.Errorf("state: nonce of %s is %d bytes, want 8", signer, len(raw))
		}
		if last := binary.BigEndian.Uint64(raw); nonce <= last {
			return errf(CodeNonce, "nonce %d is not above the last one used by %s (%d): replayed or reordered request", nonce, signer, last)
		}
	}
	x.setU64(keyNonce(signer), nonce)
	return nil
}

func verifySig(signer string, pre, sig []byte) error {
	if err := did.Verify(signer, pre, sig); err != nil {
		if errors.Is(err, did.ErrBadSignature) {
			return errf(CodeUnauthorized, "bad signature: does not verify against %s", signer)
		}
		return errf(CodeUnauthorized, "signer: %v", err)
	}
	return nil
}

func (x *exec) loadRun(task string) (*runRecord, error) {
	var r runRecord
	ok, err := x.getJSON(keyRun(task), &r)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errf(CodeNotFound, "no run with task_id %q", task)
	}
	spec, _, err := wire.ParseSpec(r.Spec)
	if err != nil {
		return nil, fmt.Errorf("stored spec of %s: %w", task, err)
	}
	r.spec = spec
	return &r, nil
}

func (r *runRecord) trainer(d string) *trainerRecord {
	i := sort.Search(len(r.Trainers), func(i int) bool { return r.Trainers[i].DID >= d })
	if i < len(r.Trainers) && r.Trainers[i].DID == d {
		return &r.Trainers[i]
	}
	return nil
}

// apply runs one decoded transaction. It returns the result data (JSON) or
// a refusal; on refusal the caller drops the overlay.
func (x *exec) apply(tx *Tx) ([]byte, error) {
	var out any
	var err error
	switch tx.Type {
	case TxTransfer:
		out, err = x.applyTransfer(tx.Transfer)
	case TxRegisterSyncer:
		out, err = x.applyRegister(tx.RegisterSyncer)
	case TxPostTask:
		out, err = x.applyPost(tx.PostTask)
	case TxEnroll:
		out, err = x.applyEnroll(tx.Enroll)
	case TxElectionProof:
		out, err = x.applyProof(tx.ElectionProof)
	case TxSubmission:
		out, err = x.applySubmission(tx.Submission)
	case TxSeal:
		out, err = x.applySeal(tx.Seal)
	case TxCommitRound:
		out, err = x.applyCommitRound(tx.CommitRound)
	case TxLeave:
		out, err = x.applyLeave(tx.Leave)
	default:
		err = errf(CodeDecode, "unknown transaction type %q", tx.Type)
	}
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	return raw, nil
}

func parseDID(field, s string) error {
	if _, err := did.Parse(s); err != nil {
		return errf(CodeInvalid, "%s: %v", field, err)
	}
	return nil
}

func amount(field, s string) (*big.Int, error) {
	v, err := wire.ParseAmount(s)
	if err != nil {
		return nil, errf(CodeInvalid, "%s: %v", field, err)
	}
	return v, nil
}

func (x *exec) applyTransfer(p *wire.TransferParams) (any, error) {
	if err := parseDID("from", p.From); err != nil {
		return nil, err
	}
	if err := parseDID("to", p.To); err != nil {
		return nil, err
	}
	amt, err := amount("amount", p.Amount)
	if err != nil {
		return nil, err
	}
	if amt.Sign() == 0 {
		return nil, errf(CodeInvalid, "amount must be positive")
	}
	if err := x.checkSigned(p.From, p.Nonce, p.Signature, p.Preimage()); err != nil {
		return nil, err
	}
	if err := x.transfer(acctDID(p.From), acctDID(p.To), amt, "transfer"); err != nil {
		return nil, err
	}
	b, err := x.balance(acctDID(p.From))
	if err != nil {
		return nil, err
	}
	return wire.Balance{DID: p.From, Balance: b.String()}, nil
}

func (x *exec) applyRegister(p *wire.RegisterSyncerParams) (any, error) {
	if err := parseDID("did", p.DID); err != nil {
		return nil, err
	}
	amt, err := amount("stake", p.Stake)
	if err != nil {
		return nil, err
	}
	if amt.Sign() == 0 {
		return nil, errf(CodeInvalid, "stake must be positive: the election weights candidates by stake")
	}
	if err := x.checkSigned(p.DID, p.Nonce, p.Signature, p.Preimage()); err != nil {
		return nil, err
	}
	if err := x.transfer(acctDID(p.DID), acctSyncerStake(p.DID), amt, "syncer candidacy"); err != nil {
		return nil, err
	}
	total, err := x.balance(acctSyncerStake(p.DID))
	if err != nil {
		return nil, err
	}
	c := wire.SyncerCandidate{DID: p.DID, Stake: total.String()}
	return c, x.putJSON(keyCand(p.DID), c)
}

func (x *exec) applyPost(p *PostTask) (any, error) {
	if len(p.Spec) == 0 {
		return nil, errf(CodeInvalid, "spec is missing")
	}
	spec, canon, err := wire.ParseSpec(p.Spec)
	if err != nil {
		return nil, errf(CodeInvalid, "%v", err)
	}
	if err := spec.Validate(); err != nil {
		return nil, errf(CodeInvalid, "%v", err)
	}
	if err := parseDID("spec: sponsor_did", spec.SponsorDID); err != nil {
		return nil, err
	}
	if spec.Tier != wire.TierOpen {
		return nil, errf(CodeInvalid, "spec: tier %s needs attestation checks, which are not on chain yet (tier Open only)", spec.Tier)
	}
	if _, ok, err := x.o.get(x.ctx, keyRun(spec.TaskID)); err != nil {
		return nil, err
	} else if ok {
		return nil, errf(CodeConflict, "a run with task_id %q already exists", spec.TaskID)
	}
	specHash := wire.SpecHash(canon)
	req := wire.PostTaskParams{Signed: p.Signed}
	if err := x.checkSigned(spec.SponsorDID, p.Nonce, p.Signature, req.Preimage(spec.SponsorDID, specHash, p.InitWeightsHash)); err != nil {
		return nil, err
	}
	reward, _ := wire.ParseAmount(spec.RewardPool)
	if err := x.transfer(acctDID(spec.SponsorDID), acctEscrow(spec.TaskID), reward, "escrow reward pool"); err != nil {
		return nil, err
	}
	r := &runRecord{TaskID: spec.TaskID, Sponsor: spec.SponsorDID, Spec: canon, SpecHash: specHash,
		InitWeightsHash: p.InitWeightsHash, Status: wire.StatusAwaiting, Reward: reward.String(),
		Trainers: []trainerRecord{}, PostedHeight: x.height, PostedTimeMs: x.timeMs, RoundRoots: []wire.Hash{}, RoundSyncers: []string{},
		Joined: []string{}, Left: []string{}, EquivDigests: []wire.Hash{}}
	if err := x.putJSON(keyRun(spec.TaskID), r); err != nil {
		return nil, err
	}
	return wire.PostTaskResult{TaskID: spec.TaskID, SpecHash: specHash, Status: r.Status}, nil
}

func (x *exec) applyEnroll(p *wire.EnrollParams) (any, error) {
	if err := parseDID("trainer_did", p.TrainerDID); err != nil {
		return nil, err
	}
	stake, err := amount("stake", p.Stake)
	if err != nil {
		return nil, err
	}
	if len(p.Attestation) > 0 {
		return nil, errf(CodeInvalid, "attestation: enrolment evidence is not checked on chain yet (tier Open only)")
	}
	r, err := x.loadRun(p.TaskID)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusAwaiting && r.Status != wire.StatusRunning {
		return nil, errf(CodeConflict, "run %s is %s", p.TaskID, r.Status)
	}
	if t := r.trainer(p.TrainerDID); t != nil {
		if t.Status == wire.TrainerEvicted {
			return nil, errf(CodeConflict, "%s was evicted from %s and cannot rejoin", p.TrainerDID, p.TaskID)
		}
		return nil, errf(CodeConflict, "%s is already enrolled in %s (%s)", p.TrainerDID, p.TaskID, t.Status)
	}
	if n := r.members(); n >= r.spec.TrainerCount {
		return nil, errf(CodeConflict, "run %s is full: %d of M=%d trainers enrolled", p.TaskID, n, r.spec.TrainerCount)
	}
	if r.spec.MinStake != "" {
		if ms, _ := wire.ParseAmount(r.spec.MinStake); stake.Cmp(ms) < 0 {
			return nil, errf(CodeInvalid, "stake %s is below the run's min_stake %s", stake, ms)
		}
	}
	if err := x.checkSigned(p.TrainerDID, p.Nonce, p.Signature, p.Preimage()); err != nil {
		return nil, err
	}
	if err := x.transfer(acctDID(p.TrainerDID), acctStake(p.TaskID, p.TrainerDID), stake, "enrolment stake"); err != nil {
		return nil, err
	}
	status, from := trainerActive, uint64(0)
	if r.Status == wire.StatusRunning {
		// Joins at the next round (PROTOCOL §5), recorded in that round's commit.
		status, from = wire.TrainerJoining, r.Round+1
	}
	r.Trainers = append(r.Trainers, trainerRecord{DID: p.TrainerDID, Status: status, Stake: stake.String(), Slashed: "0"})
	sort.Slice(r.Trainers, func(i, j int) bool { return r.Trainers[i].DID < r.Trainers[j].DID })
	if r.Status == wire.StatusAwaiting && r.members() == r.spec.TrainerCount {
		if err := x.start(r); err != nil {
			return nil, err
		}
	}
	if err := x.putJSON(keyRun(p.TaskID), r); err != nil {
		return nil, err
	}
	return wire.EnrollResult{TaskID: p.TaskID, TrainerDID: p.TrainerDID, Status: status, Shards: []int{}, FromRound: from, RunStatus: r.Status}, nil
}

// members counts active and joining trainers.
func (r *runRecord) members() int {
	n := 0
	for _, t := range r.Trainers {
		if t.Status == trainerActive || t.Status == wire.TrainerJoining {
			n++
		}
	}
	return n
}

func (x *exec) applyLeave(p *wire.LeaveParams) (any, error) {
	if err := parseDID("trainer_did", p.TrainerDID); err != nil {
		return nil, err
	}
	r, err := x.loadRun(p.TaskID)
	if err != nil {
		return nil, err
	}
	t := r.trainer(p.TrainerDID)
	if t == nil || (t.Status != trainerActive && t.Status != wire.TrainerJoining) {
		return nil, errf(CodeNotFound, "%s is not enrolled in %s", p.TrainerDID, p.TaskID)
	}
	if r.Status != wire.StatusAwaiting && r.Status != wire.StatusRunning {
		return nil, errf(CodeConflict, "run %s is %s", p.TaskID, r.Status)
	}
	if err := x.checkSigned(p.TrainerDID, p.Nonce, p.Signature, p.Preimage()); err != nil {
		return nil, err
	}
	left, err := x.balance(acctStake(r.TaskID, t.DID))
	if err != nil {
		return nil, err
	}
	if err := x.transfer(acctStake(r.TaskID, t.DID), acctDID(t.DID), left, "stake refund at leave"); err != nil {
		return nil, err
	}
	t.Status = wire.TrainerLeft
	if r.Status == wire.StatusRunning {
		r.Left = append(r.Left, t.DID)
	}
	if err := x.putJSON(keyRun(r.TaskID), r); err != nil {
		return nil, err
	}
	return wire.EnrollResult{TaskID: p.TaskID, TrainerDID: p.TrainerDID, Status: t.Status, Shards: []int{}, FromRound: r.Round, RunStatus: r.Status}, nil
}

// start moves a full run to running and, when candidates sent proofs,
// elects its syncer among them (election.Record: the same rule and record
// the single-node syncer keeps, re-checkable with election.CheckRecord).
func (x *exec) start(r *runRecord) error {
	r.Status = wire.StatusRunning
	r.StartedHeight = x.height
	r.RoundStartMs = x.timeMs
	var es []election.Entrant
	err := x.o.scan(x.ctx, keyProofPrefix(r.TaskID), func(k string, v []byte) error {
		d := strings.TrimPrefix(k, keyProofPrefix(r.TaskID))
		stake, err := x.balance(acctSyncerStake(d))
		if err != nil {
			return err
		}
		if stake.Sign() <= 0 {
			return nil // withdrew its stake: not an entrant
		}
		es = append(es, election.Entrant{DID: d, Stake: stake, Proof: append([]byte(nil), v...)})
		return nil
	})
	if err != nil {
		return err
	}
	if len(es) == 0 {
		return nil
	}
	rec, err := election.Record(election.Alpha(r.TaskID, r.SpecHash), es)
	if err != nil {
		return fmt.Errorf("election of %s: %w", r.TaskID, err)
	}
	r.Election = &rec
	return nil
}

func (x *exec) applyProof(p *wire.ElectionProofParams) (any, error) {
	d, err := did.Parse(p.DID)
	if err != nil {
		return nil, errf(CodeInvalid, "did: %v", err)
	}
	r, err := x.loadRun(p.TaskID)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusAwaiting {
		return nil, errf(CodeConflict, "run %s is %s: its election is over", p.TaskID, r.Status)
	}
	if _, ok, err := x.o.get(x.ctx, keyCand(p.DID)); err != nil {
		return nil, err
	} else if !ok {
		return nil, errf(CodeNotFound, "%s is not a registered syncer candidate (tenzro syncer register)", p.DID)
	}
	if err := x.checkSigned(p.DID, p.Nonce, p.Signature, p.Preimage()); err != nil {
		return nil, err
	}
	out, err := vrf.Verify(d.Key, p.Proof, election.Alpha(r.TaskID, r.SpecHash))
	if err != nil {
		return nil, errf(CodeInvalid, "election proof does not verify for %s over run %s's alpha: %v", p.DID, p.TaskID, err)
	}
	x.o.set(keyProof(p.TaskID, p.DID), append([]byte(nil), p.Proof...))
	return wire.ElectionProofResult{TaskID: p.TaskID, DID: p.DID, Output: out}, nil
}

func (x *exec) applySubmission(s *Submission) (any, error) {
	if err := parseDID("trainer_did", s.TrainerDID); err != nil {
		return nil, err
	}
	if s.PayloadSize == 0 || s.PayloadSize > MaxPayloadSize {
		return nil, errf(CodeInvalid, "payload_size %d: want 1..%d", s.PayloadSize, MaxPayloadSize)
	}
	r, err := x.loadRun(s.TaskID)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusRunning {
		return nil, errf(CodeConflict, "run %s is %s, not running", s.TaskID, r.Status)
	}
	t := r.trainer(s.TrainerDID)
	if t == nil || t.Status != trainerActive {
		return nil, errf(CodeUnauthorized, "%s is not an active trainer of %s", s.TrainerDID, s.TaskID)
	}
	if r.Round >= uint64(r.spec.MaxRounds) {
		return nil, errf(CodeConflict, "run %s has committed all its %d rounds", s.TaskID, r.spec.MaxRounds)
	}
	if s.Round != r.Round {
		return nil, errf(CodeConflict, "round %d is not the current round %d of %s", s.Round, r.Round, s.TaskID)
	}
	if f := uint64(r.spec.Architecture.FragmentCount); s.FragmentIndex >= f {
		return nil, errf(CodeInvalid, "fragment_index %d: the run has %d fragments", s.FragmentIndex, f)
	}
	if err := verifySig(s.TrainerDID, wire.SubmissionPreimage(s.TaskID, s.TrainerDID, s.Round, s.FragmentIndex, s.PayloadHash), s.Signature); err != nil {
		return nil, err
	}
	rec := SubmissionRecord{Submission: *s, Height: x.height, TimeMs: x.timeMs}
	key := keySub(s.TaskID, s.Round, s.FragmentIndex, s.TrainerDID)
	var first SubmissionRecord
	if ok, err := x.getJSON(key, &first); err != nil {
		return nil, err
	} else if ok {
		if first.PayloadHash == s.PayloadHash {
			return nil, errf(CodeConflict, "%s already submitted %s for round %d fragment %d", s.TrainerDID, s.PayloadHash, s.Round, s.FragmentIndex)
		}
		return x.equivocate(r, t, first, rec)
	}
	r.Submissions++
	if err := x.putJSON(key, rec); err != nil {
		return nil, err
	}
	if err := x.putJSON(keyRun(r.TaskID), r); err != nil {
		return nil, err
	}
	return wire.SubmitResult{Accepted: true, Round: s.Round, FragmentIndex: s.FragmentIndex, PayloadHash: s.PayloadHash}, nil
}

// equivocate records two different signed payloads from one trainer for one
// round and fragment and slashes the spec's equivocation_bps of its stake
// into the run's escrow (PROTOCOL §6; the same digest as the syncer's).
func (x *exec) equivocate(r *runRecord, t *trainerRecord, first, second SubmissionRecord) (any, error) {
	key := keyEquiv(r.TaskID, first.Round, first.FragmentIndex, t.DID)
	if _, ok, err := x.o.get(x.ctx, key); err != nil {
		return nil, err
	} else if ok {
		return nil, errf(CodeConflict, "equivocation of %s in round %d fragment %d is already recorded", t.DID, first.Round, first.FragmentIndex)
	}
	dg := wire.NewCanon(wire.DomainEquivocate).Str(r.TaskID).Str(t.DID).U64(first.Round).U64(first.FragmentIndex).
		Hash(first.PayloadHash).Bytes(first.Signature).Hash(second.PayloadHash).Bytes(second.Signature).Sum()
	stake, _ := wire.ParseAmount(t.Stake)
	slashed, _ := wire.ParseAmount(t.Slashed)
	left := new(big.Int).Sub(stake, slashed)
	cut := new(big.Int).Div(new(big.Int).Mul(stake, big.NewInt(int64(r.spec.Slash().EquivocationBps))), big.NewInt(10000))
	if cut.Cmp(left) > 0 {
		cut = left
	}
	if err := x.transfer(acctStake(r.TaskID, t.DID), acctEscrow(r.TaskID), cut, "equivocation slash"); err != nil {
		return nil, err
	}
	t.Slashed = new(big.Int).Add(slashed, cut).String()
	r.Equivocations++
	r.EquivDigests = append(r.EquivDigests, dg)
	if err := x.putJSON(key, Equivocation{Digest: dg, First: first, Second: second}); err != nil {
		return nil, err
	}
	if err := x.putJSON(keyRun(r.TaskID), r); err != nil {
		return nil, err
	}
	return wire.SubmitResult{Accepted: false, Round: second.Round, FragmentIndex: second.FragmentIndex, PayloadHash: second.PayloadHash}, nil
}

// SealResult answers a seal transaction.
type SealResult struct {
	TaskID      string    `json:"task_id"`
	RunRoot     wire.Hash `json:"run_root"`
	RunLogIndex uint64    `json:"run_log_index"`
	Height      int64     `json:"height"`
}

func (x *exec) applySeal(s *Seal) (any, error) {
	if err := syncer.CheckReceipt(s.Receipt, nil); err != nil {
		return nil, errf(CodeInvalid, "receipt: %v", err)
	}
	rc, err := syncer.ParseReceipt(s.Receipt)
	if err != nil {
		return nil, errf(CodeInvalid, "receipt: %v", err)
	}
	r, err := x.loadRun(rc.TaskID)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusRunning {
		return nil, errf(CodeConflict, "run %s is %s, not running", r.TaskID, r.Status)
	}
	if rc.SpecHash != r.SpecHash {
		return nil, errf(CodeInvalid, "receipt spec_hash %s is not run %s's %s", rc.SpecHash, r.TaskID, r.SpecHash)
	}
	// A version-2 receipt carries the run root, not the transcript: it must
	// be the root over the rounds committed on chain.
	if rc.Rounds != uint64(len(r.RoundRoots)) {
		return nil, errf(CodeInvalid, "receipt has %d rounds, %d are committed on chain for %s", rc.Rounds, len(r.RoundRoots), r.TaskID)
	}
	if want := syncer.RunRoot(r.SpecHash, r.RoundRoots, rc.FinalModelHash); rc.RunRoot != want {
		return nil, errf(CodeInvalid, "receipt run root %s is not the root over the rounds committed on chain (%s)", rc.RunRoot, want)
	}
	// The signer must be the syncer of the last committed round or, with
	// none, the one whose turn it is now.
	var want string
	if n := len(r.RoundSyncers); n > 0 {
		want = r.RoundSyncers[n-1]
	} else if want, _, err = currentSyncer(r, x.timeMs); err != nil {
		return nil, err
	}
	if rc.SyncerDID != want {
		return nil, errf(CodeUnauthorized, "receipt is signed by %s, but run %s's elected syncer is %s", rc.SyncerDID, r.TaskID, want)
	}
	if err := x.settle(r, rc); err != nil {
		return nil, err
	}
	idx, err := x.u64(keyRunLogSize)
	if err != nil {
		return nil, err
	}
	x.o.set(keyRunLogLeaf(idx), RunLogLeaf(r.TaskID, rc.RunRoot))
	x.setU64(keyRunLogSize, idx+1)
	root := rc.RunRoot
	r.Status, r.RunRoot, r.SyncerDID, r.SealedHeight, r.RunLogIndex = wire.StatusSealed, &root, rc.SyncerDID, x.height, idx
	if err := x.putJSON(keyRun(r.TaskID), r); err != nil {
		return nil, err
	}
	return SealResult{TaskID: r.TaskID, RunRoot: root, RunLogIndex: idx, Height: x.height}, nil
}
