package machine

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"

	"github.com/tenzro/train/wire"
)

// Challenges and finality (docs/protocol/challenges.md). A fragment commit
// is final Window blocks after the block that committed it. While it is not,
// anyone may challenge it with a bond and the FragmentResultHash they claim
// is correct; the validators' nodes re-execute the commit outside the chain
// and vote its result hash; 2/3 of the voting power on one value decides.
// Everything here is the machine's: deterministic, over state and the block.
//
// What a commit's correctness decides — payout weight and accepted counters,
// equivocation, missed-round and eviction slashes — applies when its round
// is final (every commit of it past its window, no challenge open on it),
// in round order; the run seals once every round is final. This is the
// only path: a run whose window is 0 takes it too, its rounds final in the
// transaction that closes them (advanceFinality runs after every
// closeRound), so the effects are written once. An upheld
// challenge slashes the committing syncer, rolls the run back to the
// challenged round (later rounds discarded) with the challenged fragment
// reopened, and hands it to the next syncer of the succession.

// CommitRecord is a fragment commit while it can be challenged (KSTranscript
// "fc/<task>/<round u64>/<fragment u32>", written at the commit and deleted
// when its round is final; with a window of 0 it lives only until the
// round closes): the commit, the momentum hash
// the commit started from, where it landed, from which height it is final,
// its result hash, the equivocation verdicts it gave and the challenge that
// disputes it.
type CommitRecord struct {
	Commit         wire.FragmentCommit `json:"commit"`
	MomentumBefore wire.Hash           `json:"momentum_before"`
	Height         int64               `json:"height"`
	TimeMs         int64               `json:"time_ms"`
	FinalAt        int64               `json:"final_at"`
	// ByChain: the round deadline closed it (no_quorum); not challengeable.
	ByChain bool      `json:"by_chain,omitempty"`
	Result  wire.Hash `json:"result"`
	// Equivocators were found equivocating by this commit's verdicts (slashed
	// when its round is final), with the claims' digests.
	Equivocators  []string    `json:"equivocators,omitempty"`
	Equivocations []wire.Hash `json:"equivocations,omitempty"`
	Challenge     *wire.Hash  `json:"challenge,omitempty"`
}

// pendingRound is a closed round that is not final yet.
type pendingRound struct {
	Round   uint64 `json:"round"`
	FinalAt int64  `json:"final_at"`
}

// openRef is an undecided challenge of a run.
type openRef struct {
	ID       wire.Hash `json:"id"`
	Round    uint64    `json:"round"`
	Fragment uint64    `json:"fragment"`
	Deadline int64     `json:"deadline"`
}

func commitRecPrefix(task string, round uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("fc/"+task+"/"), round)
}

// CommitRecKey is the key of a fragment commit's record (KSTranscript).
func CommitRecKey(task string, round uint64, f int) []byte {
	return binary.BigEndian.AppendUint32(commitRecPrefix(task, round), uint32(f))
}

// SnapKey is the key of a run's state at the start of round (KSTranscript),
// kept while the round can be challenged.
func SnapKey(task string, round uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("rs/"+task+"/"), round)
}
func roundRecordPrefix(task string, round uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("s/"+task+"/"), round)
}
func roundClaimPrefix(task string, round uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("claim/"+task+"/"), round)
}
func challengeKey(id wire.Hash) []byte { return []byte("chal/" + id.String()) }
func challengeRunKey(task string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("chrun/"+task+"/"), seq)
}
func valKey(addr []byte) []byte    { return []byte("val/" + hex.EncodeToString(addr)) }
func acctBond(id wire.Hash) string { return "challenge:" + id.String() }

// Challengeable says whether the run's commits wait for a challenge window.
func (r *Run) Challengeable() bool { return r.Window > 0 }

// ValidatorAddressLen is the length of a CometBFT validator address.
const ValidatorAddressLen = 20

// putValidators records the consensus validator set at genesis.
func (x *mtx) putValidators(vals []Validator) error {
	seen := map[string]bool{}
	for i, v := range vals {
		if len(v.Address) != ValidatorAddressLen || len(v.PubKey) != ed25519.PublicKeySize || v.Power <= 0 {
			return fmt.Errorf("genesis validator %d: want a %d-byte address, an Ed25519 key and positive power", i, ValidatorAddressLen)
		}
		if seen[string(v.Address)] {
			return fmt.Errorf("genesis validator %d: address %x twice", i, []byte(v.Address))
		}
		seen[string(v.Address)] = true
		if err := x.putJSON(KSMeta, valKey(v.Address), v); err != nil {
			return err
		}
	}
	return nil
}

// Validators returns the chain's validator set in address order.
func Validators(ctx context.Context, kv KV) ([]Validator, error) {
	var out []Validator
	err := kv.Scan(ctx, KSMeta, []byte("val/"), func(_, raw []byte) error {
		var v Validator
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("validator record: %w", err)
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

func (x *mtx) validator(addr []byte) (*Validator, error) {
	if len(addr) != ValidatorAddressLen {
		return nil, Errf(KindInvalid, "validator: %d bytes, want a %d-byte address", len(addr), ValidatorAddressLen)
	}
	var v Validator
	ok, err := x.getJSON(KSMeta, valKey(addr), &v)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, Errf(KindUnauthorized, "%x is not a validator of this chain", addr)
	}
	return &v, nil
}

// checkVoteSignature: the voter is a validator and signed the vote.
func (x *mtx) checkVoteSignature(v *wire.ChallengeVoteTx) error {
	val, err := x.validator(v.Validator)
	if err != nil {
		return err
	}
	if v.Unavailable && !v.ResultHash.IsZero() {
		return Errf(KindInvalid, "vote: unavailable with a result hash")
	}
	if !ed25519.Verify(ed25519.PublicKey(val.PubKey), v.Preimage(), v.Signature) {
		return Errf(KindUnauthorized, "vote signature does not verify against validator %x's key", []byte(v.Validator))
	}
	return nil
}

// commitRecord reads the challengeable record of a commit (nil: none).
func (x *mtx) commitRecord(task string, round uint64, f int) (*CommitRecord, error) {
	var c CommitRecord
	ok, err := x.getJSON(KSTranscript, CommitRecKey(task, round, f), &c)
	if err != nil || !ok {
		return nil, err
	}
	return &c, nil
}

// recordCommit keeps fragment i's commit while it can be challenged.
func (x *mtx) recordCommit(r *Run, i int, c *wire.FragmentCommit, momentumBefore wire.Hash, byChain bool, equivocators []string, digests []wire.Hash) error {
	rec := CommitRecord{Commit: *c, MomentumBefore: momentumBefore, Height: x.blk.Height, TimeMs: x.blk.TimeMs,
		FinalAt: x.blk.Height + r.Window, ByChain: byChain, Result: wire.FragmentResultHash(c),
		Equivocators: equivocators, Equivocations: digests}
	if byChain {
		rec.FinalAt = x.blk.Height
	}
	return x.putJSON(KSTranscript, CommitRecKey(r.spec.TaskID, r.Round, i), rec)
}

// snapshotRound keeps the run as the current round starts, for a rollback
// to it (deleted when the round is final). A run without a window is never
// challenged, so never rolled back: it keeps none.
func (x *mtx) snapshotRound(r *Run) error {
	if !r.Challengeable() {
		return nil
	}
	return x.putJSON(KSTranscript, SnapKey(r.spec.TaskID, r.Round), r)
}

func (r *Run) openOn(round uint64) bool {
	for _, o := range r.Open {
		if o.Round == round {
			return true
		}
	}
	return false
}

func (r *Run) dropOpen(id wire.Hash) {
	for k, o := range r.Open {
		if o.ID == id {
			r.Open = append(r.Open[:k:k], r.Open[k+1:]...)
			return
		}
	}
}

// challenge takes a dispute of a commit that is not final yet.
func (x *mtx) challenge(p *wire.ChallengeTx) (*wire.ChallengeResult, error) {
	if err := parseDIDField("challenger_did", p.ChallengerDID); err != nil {
		return nil, err
	}
	bond, err := parseAmountField("bond", p.Bond)
	if err != nil {
		return nil, err
	}
	r, err := LoadRun(x.ctx, x.kv, p.TaskID)
	if err != nil {
		return nil, err
	}
	task := r.spec.TaskID
	if r.Status != wire.StatusRunning {
		return nil, Errf(KindConflict, "run %s is %s: every commit of it is final", task, r.Status)
	}
	if !r.Challengeable() {
		return nil, Errf(KindConflict, "run %s has no challenge window (challenge_window_blocks 0): its commits are final when made", task)
	}
	if p.Fragment >= uint64(len(r.Fragments)) {
		return nil, Errf(KindInvalid, "wrong fragment: fragment %d, the model has %d fragments", p.Fragment, len(r.Fragments))
	}
	if want := r.spec.Bond(); p.Bond != want {
		return nil, Errf(KindInvalid, "bond %s: run %s's challenge_bond is %s", p.Bond, task, want)
	}
	if p.Round < r.FinalRounds {
		return nil, Errf(KindConflict, "after the challenge window: round %d of %s is final", p.Round, task)
	}
	rec, err := x.commitRecord(task, p.Round, int(p.Fragment))
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, Errf(KindNotFound, "unknown commit: round %d fragment %d of %s has no commit on chain (not committed yet, or discarded by a rollback)", p.Round, p.Fragment, task)
	}
	if rec.ByChain {
		return nil, Errf(KindConflict, "round %d fragment %d of %s was closed by the round deadline (%s): nothing was computed, nothing to dispute", p.Round, p.Fragment, task, rec.Commit.Status)
	}
	if rec.Challenge != nil {
		return nil, Errf(KindConflict, "the commit of round %d fragment %d of %s is already challenged (%s): a commit is challenged once", p.Round, p.Fragment, task, *rec.Challenge)
	}
	if x.blk.Height >= rec.FinalAt {
		return nil, Errf(KindConflict, "after the challenge window: the commit of round %d fragment %d of %s (height %d) is final since height %d",
			p.Round, p.Fragment, task, rec.Height, rec.FinalAt)
	}
	if p.ResultHash == rec.Result {
		return nil, Errf(KindInvalid, "the claimed result hash %s is the committed one: nothing to dispute", p.ResultHash)
	}
	vals, err := Validators(x.ctx, x.kv)
	if err != nil {
		return nil, err
	}
	if len(vals) == 0 {
		return nil, Errf(KindDisabled, "this chain records no validator set: nobody could decide a challenge")
	}
	id := wire.ChallengeID(task, p.Round, p.Fragment, p.ChallengerDID, p.Nonce, x.blk.Hash)
	if err := x.lt.transfer(AcctDID(p.ChallengerDID), acctBond(id), bond, "challenge bond"); err != nil {
		return nil, err
	}
	committee, total := drawCommittee(vals, r.spec.ChallengeCommittee, x.blk.Hash, id)
	ch := wire.ChallengeRecord{ID: id, TaskID: task, Round: p.Round, Fragment: p.Fragment, Challenger: p.ChallengerDID,
		Syncer: rec.Commit.Syncer, Ticket: rec.Commit.Ticket, Committed: rec.Result, Claimed: p.ResultHash, CommitHeight: rec.Height,
		Height: x.blk.Height, VoteDeadline: x.blk.Height + r.spec.VoteWindow(), Bond: bond.String(), Committee: committee,
		TotalPower: total, Votes: []wire.ChallengeVote{}, Outcome: wire.ChallengeOpen, SyncerSlashed: "0", ChallengerReward: "0", ToEscrow: "0"}
	if err := x.putJSON(KSEvidence, challengeKey(id), ch); err != nil {
		return nil, err
	}
	x.set(KSEvidence, challengeRunKey(task, r.Challenges), id[:])
	r.Challenges++
	rec.Challenge = &id
	if err := x.putJSON(KSTranscript, CommitRecKey(task, p.Round, int(p.Fragment)), rec); err != nil {
		return nil, err
	}
	r.Open = append(r.Open, openRef{ID: id, Round: p.Round, Fragment: p.Fragment, Deadline: ch.VoteDeadline})
	if err := x.putRun(r); err != nil {
		return nil, err
	}
	x.m.log.Info("fragment commit challenged", "task", task, "round", p.Round, "fragment", p.Fragment, "challenger", p.ChallengerDID,
		"id", id, "vote_deadline", ch.VoteDeadline)
	return &wire.ChallengeResult{ID: id, TaskID: task, Round: p.Round, Fragment: p.Fragment, Committed: rec.Result, VoteDeadline: ch.VoteDeadline}, nil
}

// DomainCommittee tags the committee draw.
const DomainCommittee = "tenzro/train/committee/v1"

// drawCommittee is who votes on challenge id: every validator, or when n is
// in 1..len(vals)-1 the n validators whose SHA-256(Str(DomainCommittee) ‖
// Bytes(block hash) ‖ Hash(id) ‖ Bytes(address)) are lowest (the block hash
// is the chain's randomness: no validator chooses it alone). Addresses in
// order, with their total power.
func drawCommittee(vals []Validator, n int, blockHash []byte, id wire.Hash) ([]wire.HexBytes, int64) {
	pick := append([]Validator(nil), vals...)
	if n > 0 && n < len(pick) {
		keys := make(map[string]wire.Hash, len(pick))
		for _, v := range pick {
			keys[string(v.Address)] = wire.NewCanon(DomainCommittee).Bytes(blockHash).Hash(id).Bytes(v.Address).Sum()
		}
		sort.Slice(pick, func(i, j int) bool {
			a, b := keys[string(pick[i].Address)], keys[string(pick[j].Address)]
			return bytes.Compare(a[:], b[:]) < 0
		})
		pick = pick[:n]
		sort.Slice(pick, func(i, j int) bool { return bytes.Compare(pick[i].Address, pick[j].Address) < 0 })
	}
	out := make([]wire.HexBytes, len(pick))
	var total int64
	for i, v := range pick {
		out[i] = append(wire.HexBytes{}, v.Address...)
		total += v.Power
	}
	return out, total
}

// LoadChallenge reads a challenge record.
func LoadChallenge(ctx context.Context, kv KV, id wire.Hash) (*wire.ChallengeRecord, error) {
	raw, err := kv.Get(ctx, KSEvidence, challengeKey(id))
	if errors.Is(err, ErrNotFound) {
		return nil, Errf(KindNotFound, "no challenge %s", id)
	}
	if err != nil {
		return nil, err
	}
	var c wire.ChallengeRecord
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("challenge %s: %w", id, err)
	}
	return &c, nil
}

// challengeVote counts a validator's vote and decides the challenge when
// one value has more than 2/3 of the committee's power.
func (x *mtx) challengeVote(v *wire.ChallengeVoteTx) (*wire.ChallengeVoteResult, error) {
	if v.Unavailable && !v.ResultHash.IsZero() {
		return nil, Errf(KindInvalid, "vote: unavailable with a result hash")
	}
	if !v.Unavailable && v.ResultHash.IsZero() {
		return nil, Errf(KindInvalid, "vote: no result hash (say unavailable when the inputs could not be had)")
	}
	ch, err := LoadChallenge(x.ctx, x.kv, v.Challenge)
	if err != nil {
		return nil, err
	}
	if ch.Outcome != wire.ChallengeOpen {
		return nil, Errf(KindConflict, "challenge %s is decided (%s) at height %d", ch.ID, ch.Outcome, ch.Decided)
	}
	if x.blk.Height > ch.VoteDeadline {
		return nil, Errf(KindConflict, "challenge %s: the vote window closed at height %d", ch.ID, ch.VoteDeadline)
	}
	val, err := x.validator(v.Validator)
	if err != nil {
		return nil, err
	}
	member := false
	for _, a := range ch.Committee {
		member = member || bytes.Equal(a, v.Validator)
	}
	if !member {
		return nil, Errf(KindUnauthorized, "validator %x is not on challenge %s's committee", []byte(v.Validator), ch.ID)
	}
	for _, o := range ch.Votes {
		if bytes.Equal(o.Validator, v.Validator) {
			return nil, Errf(KindConflict, "validator %x already voted on challenge %s (at height %d)", []byte(v.Validator), ch.ID, o.Height)
		}
	}
	if !ed25519.Verify(ed25519.PublicKey(val.PubKey), v.Preimage(), v.Signature) {
		return nil, Errf(KindUnauthorized, "vote signature does not verify against validator %x's key", []byte(v.Validator))
	}
	ch.Votes = append(ch.Votes, wire.ChallengeVote{Validator: append(wire.HexBytes{}, v.Validator...), Power: val.Power,
		ResultHash: v.ResultHash, Unavailable: v.Unavailable, Height: x.blk.Height})
	var power int64
	for _, o := range ch.Votes {
		if o.Unavailable == v.Unavailable && o.ResultHash == v.ResultHash {
			power += o.Power
		}
	}
	if 3*power > 2*ch.TotalPower {
		r, err := LoadRun(x.ctx, x.kv, ch.TaskID)
		if err != nil {
			return nil, err
		}
		if err := x.decide(r, ch, v.ResultHash, v.Unavailable); err != nil {
			return nil, err
		}
		if err := x.putRun(r); err != nil {
			return nil, err
		}
	} else if err := x.putJSON(KSEvidence, challengeKey(ch.ID), ch); err != nil {
		return nil, err
	}
	return &wire.ChallengeVoteResult{ID: ch.ID, Outcome: ch.Outcome}, nil
}

// decide applies a challenge's outcome: the validators' value equals the
// committed result (the challenge was wrong: the bond goes to the run's
// escrow), or it does not or the inputs were unavailable (the syncer was
// wrong: slashed, the challenger repaid and rewarded, the run rolled back).
func (x *mtx) decide(r *Run, ch *wire.ChallengeRecord, result wire.Hash, unavailable bool) error {
	task := r.spec.TaskID
	ch.Decided, ch.Result, ch.Unavailable = x.blk.Height, result, unavailable
	r.dropOpen(ch.ID)
	bond := bigOf(ch.Bond)
	if !unavailable && result == ch.Committed {
		ch.Outcome = wire.ChallengeRejected
		ch.ToEscrow = bond.String()
		if err := x.lt.transfer(acctBond(ch.ID), AcctEscrow(task), bond, "challenge rejected: bond forfeited to the run's escrow"); err != nil {
			return err
		}
		x.m.log.Info("challenge rejected: the commit stands", "task", task, "round", ch.Round, "fragment", ch.Fragment, "id", ch.ID)
		return x.putJSON(KSEvidence, challengeKey(ch.ID), ch)
	}
	ch.Outcome = wire.ChallengeUpheld
	if err := x.lt.transfer(acctBond(ch.ID), AcctDID(ch.Challenger), bond, "challenge upheld: bond returned"); err != nil {
		return err
	}
	slashed, reward, err := x.slashSyncer(r, ch.Syncer, ch.Challenger)
	if err != nil {
		return err
	}
	ch.SyncerSlashed, ch.ChallengerReward = slashed.String(), reward.String()
	ch.ToEscrow = new(big.Int).Sub(slashed, reward).String()
	if err := x.putJSON(KSEvidence, challengeKey(ch.ID), ch); err != nil {
		return err
	}
	if len(r.liveSuccession()) > 1 && !r.excluded(ch.Syncer) {
		r.Excluded = append(r.Excluded, ch.Syncer)
	}
	x.m.log.Info("challenge upheld: syncer slashed, run rolled back", "task", task, "round", ch.Round, "fragment", ch.Fragment,
		"syncer", ch.Syncer, "slashed", slashed, "unavailable", unavailable, "id", ch.ID)
	return x.rollback(r, ch.Round, int(ch.Fragment))
}

// slashSyncer takes the run's syncer_slash of d's candidate stake (its
// bonded stake first, then what it is unbonding): ChallengerRewardBps of it
// to the challenger, the rest to the run's escrow.
func (x *mtx) slashSyncer(r *Run, d, challenger string) (*big.Int, *big.Int, error) {
	task := r.spec.TaskID
	staked, err := x.lt.balance(acctSyncerStake(d))
	if err != nil {
		return nil, nil, err
	}
	unbonding, err := x.lt.balance(acctSyncerUnbonding(d))
	if err != nil {
		return nil, nil, err
	}
	base := new(big.Int).Add(staked, unbonding)
	amt := r.spec.SyncerSlashRule().Of(base)
	reward := bps(amt, wire.ChallengerRewardBps)
	rest := new(big.Int).Sub(amt, reward)
	// Take from the bonded stake, then the unbonding one.
	take := func(to string, v *big.Int, memo string) error {
		left := new(big.Int).Set(v)
		for _, from := range []string{acctSyncerStake(d), acctSyncerUnbonding(d)} {
			b, err := x.lt.balance(from)
			if err != nil {
				return err
			}
			part := new(big.Int).Set(left)
			if part.Cmp(b) > 0 {
				part.Set(b)
			}
			if err := x.lt.transfer(from, to, part, memo); err != nil {
				return err
			}
			left.Sub(left, part)
		}
		return nil
	}
	if err := take(AcctDID(challenger), reward, "syncer slashed by an upheld challenge: challenger's reward"); err != nil {
		return nil, nil, err
	}
	if err := take(AcctEscrow(task), rest, "syncer slashed by an upheld challenge: to the run's escrow"); err != nil {
		return nil, nil, err
	}
	if c, err := x.candidate(d); err != nil {
		return nil, nil, err
	} else if c != nil && !c.Unbonding {
		left, err := x.lt.balance(acctSyncerStake(d))
		if err != nil {
			return nil, nil, err
		}
		c.Stake = left.String()
		if err := x.putJSON(KSMeta, CandKey(d), c); err != nil {
			return nil, nil, err
		}
	}
	return amt, reward, nil
}

// expireChallenges ends the run's challenges whose vote window passed
// without a decision: the bond goes back, the commit stands.
func (x *mtx) expireChallenges(r *Run) (bool, error) {
	changed := false
	for k := 0; k < len(r.Open); {
		o := r.Open[k]
		if x.blk.Height <= o.Deadline {
			k++
			continue
		}
		ch, err := LoadChallenge(x.ctx, x.kv, o.ID)
		if err != nil {
			return false, err
		}
		ch.Outcome, ch.Decided = wire.ChallengeExpired, x.blk.Height
		if err := x.lt.transfer(acctBond(ch.ID), AcctDID(ch.Challenger), bigOf(ch.Bond), "challenge undecided in its vote window: bond returned"); err != nil {
			return false, err
		}
		if err := x.putJSON(KSEvidence, challengeKey(ch.ID), ch); err != nil {
			return false, err
		}
		r.Open = append(r.Open[:k:k], r.Open[k+1:]...)
		changed = true
		x.m.log.Info("challenge expired undecided: the commit stands", "task", r.spec.TaskID, "round", ch.Round, "fragment", ch.Fragment, "id", ch.ID)
	}
	return changed, nil
}

// voidChallenge ends an open challenge whose commit a rollback discarded:
// the bond goes back.
func (x *mtx) voidChallenge(r *Run, id wire.Hash) error {
	ch, err := LoadChallenge(x.ctx, x.kv, id)
	if err != nil {
		return err
	}
	ch.Outcome, ch.Decided = wire.ChallengeVoid, x.blk.Height
	if err := x.lt.transfer(acctBond(ch.ID), AcctDID(ch.Challenger), bigOf(ch.Bond), "challenged commit discarded by a rollback: bond returned"); err != nil {
		return err
	}
	r.dropOpen(id)
	return x.putJSON(KSEvidence, challengeKey(ch.ID), ch)
}

// advanceFinality makes the pending rounds final, in order, from the first
// block at which each is past its window with no challenge open on it, and
// seals a run whose last round closed once every round is final.
func (x *mtx) advanceFinality(r *Run) (bool, error) {
	changed := false
	for len(r.Pending) > 0 && r.Status == wire.StatusRunning {
		p := r.Pending[0]
		if x.blk.Height < p.FinalAt || r.openOn(p.Round) {
			break
		}
		if err := x.finalizeRound(r, p.Round); err != nil {
			return false, err
		}
		r.Pending = r.Pending[1:]
		if r.Challengeable() {
			// A run without a window never stores it: each of its rounds
			// is final at its close (RunView says so), and its state stays
			// what it was before finality went one way for both.
			r.FinalRounds = p.Round + 1
		}
		changed = true
	}
	if len(r.Pending) == 0 {
		r.Pending = nil
	}
	if r.AwaitingFinal && len(r.Pending) == 0 && r.Status == wire.StatusRunning {
		r.AwaitingFinal = false
		hashes := make([]wire.Hash, len(r.Fragments))
		for i, fs := range r.Fragments {
			hashes[i] = fs.WeightsHash
		}
		if err := x.seal(r, ModelHash(hashes)); err != nil {
			return false, err
		}
		changed = true
	}
	return changed, nil
}

// finalizeRound applies a round's deferred effects: each input a commit
// kept counts as accepted (payout weight += the fragment's N), each
// equivocation verdict slashes, each missed trainer counts the miss and is
// slashed missed_round_bps, each evicted one eviction_bps and refunded; the
// round's commit records and start snapshot are dropped.
func (x *mtx) finalizeRound(r *Run, round uint64) error {
	task := r.spec.TaskID
	var rc wire.RoundCommit
	ok, err := x.getJSON(KSTranscript, commitKey(task, round), &rc)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("round %d of %s is pending without its round commit", round, task)
	}
	for k := range rc.Fragments {
		if err := x.settleInputs(r, round, &rc.Fragments[k]); err != nil {
			return err
		}
	}
	sl := r.spec.Slash()
	var recKeys [][]byte
	err = x.kv.Scan(x.ctx, KSTranscript, commitRecPrefix(task, round), func(k, raw []byte) error {
		recKeys = append(recKeys, append([]byte(nil), k...))
		var c CommitRecord
		if err := json.Unmarshal(raw, &c); err != nil {
			return fmt.Errorf("commit record of %s round %d: %w", task, round, err)
		}
		for _, d := range c.Equivocators {
			if t := r.Trainer(d); t != nil {
				if err := x.slash(r, t, sl.EquivocationBps, "equivocation"); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, d := range rc.Missed {
		t := r.Trainer(d)
		if t == nil {
			continue
		}
		t.MissedRounds++
		if err := x.slash(r, t, sl.MissedRoundBps, "missed round"); err != nil {
			return err
		}
	}
	for _, d := range rc.Evicted {
		t := r.Trainer(d)
		if t == nil {
			continue
		}
		if err := x.slash(r, t, sl.EvictionBps, "eviction"); err != nil {
			return err
		}
		if err := x.refund(r, t, "stake refund"); err != nil {
			return err
		}
	}
	for _, k := range recKeys {
		x.del(KSTranscript, k)
	}
	x.del(KSTranscript, SnapKey(task, round))
	x.m.log.Info("round final", "task", task, "round", round, "height", x.blk.Height)
	return nil
}

// pendingPenalty says why trainer d may not leave yet: it has a slash
// waiting for a round that is not final (a missed round or an
// equivocation verdict); "" when none.
func (x *mtx) pendingPenalty(r *Run, d string) (string, error) {
	task := r.spec.TaskID
	for _, p := range r.Pending {
		var rc wire.RoundCommit
		if _, err := x.getJSON(KSTranscript, commitKey(task, p.Round), &rc); err != nil {
			return "", err
		}
		for _, m := range rc.Missed {
			if m == d {
				return fmt.Sprintf("it missed round %d, whose slash applies when the round is final (height %d at the earliest)", p.Round, p.FinalAt), nil
			}
		}
	}
	why := ""
	err := x.kv.Scan(x.ctx, KSTranscript, []byte("fc/"+task+"/"), func(_, raw []byte) error {
		var c CommitRecord
		if err := json.Unmarshal(raw, &c); err != nil {
			return err
		}
		for _, e := range c.Equivocators {
			if e == d && why == "" {
				why = fmt.Sprintf("its equivocation in fragment %d (committed at height %d) is slashed when that round is final", c.Commit.Fragment, c.Height)
			}
		}
		for _, in := range c.Commit.Inputs {
			if in.TrainerDID == d && in.CopyOf != "" && why == "" {
				why = fmt.Sprintf("its input to fragment %d (committed at height %d) is judged a copy of %s's, settled when that round is final", c.Commit.Fragment, c.Height, in.CopyOf)
			}
			if in.TrainerDID == d && in.StaleOfRound != nil && why == "" {
				why = fmt.Sprintf("its input to fragment %d (committed at height %d) is judged a replay of its round %d input, settled when that round is final", c.Commit.Fragment, c.Height, *in.StaleOfRound)
			}
		}
		return nil
	})
	return why, err
}

// rollback reopens fragment f of round R after an upheld challenge: the
// rounds after R are discarded (their records, claims, commits and the
// challenges on them), the run is as it was when R started — trainers'
// round state from R's snapshot, with every membership change since kept
// (a trainer who left stays left; one who enrolled since joins at R+1) —
// with R's submission records back, R's other commits applied again and f
// open with its records, its weights and momentum those before the
// challenged commit. The round's clock restarts at this block, so the next
// syncer of the succession has a whole deadline.
func (x *mtx) rollback(r *Run, R uint64, f int) error {
	task := r.spec.TaskID
	var snap Run
	ok, err := x.getJSON(KSTranscript, SnapKey(task, R), &snap)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("rollback of %s to round %d: no snapshot of the round's start", task, R)
	}
	snap.spec = r.spec
	last := r.Round
	// Discard rounds R+1..last, and R's round commit and f's commit record.
	del := func(ks Keyspace, prefix []byte) error {
		var keys [][]byte
		err := x.kv.Scan(x.ctx, ks, prefix, func(k, _ []byte) error {
			keys = append(keys, append([]byte(nil), k...))
			return nil
		})
		for _, k := range keys {
			x.del(ks, k)
		}
		return err
	}
	for q := R + 1; q <= last; q++ {
		for _, d := range []struct {
			ks     Keyspace
			prefix []byte
		}{{KSTranscript, roundRecordPrefix(task, q)}, {KSEvidence, roundClaimPrefix(task, q)}, {KSTranscript, commitRecPrefix(task, q)}} {
			if err := del(d.ks, d.prefix); err != nil {
				return err
			}
		}
		x.del(KSTranscript, commitKey(task, q))
		x.del(KSTranscript, SnapKey(task, q))
	}
	x.del(KSTranscript, commitKey(task, R))
	x.del(KSTranscript, CommitRecKey(task, R, f))
	for _, o := range append([]openRef(nil), r.Open...) {
		if o.Round > R || (o.Round == R && int(o.Fragment) == f) {
			if err := x.voidChallenge(r, o.ID); err != nil {
				return err
			}
		}
	}
	// Trainers: round state from the snapshot, membership since kept.
	var leftSince []string
	for _, t := range r.Trainers {
		s := snap.Trainer(t.DID)
		switch {
		case s == nil: // enrolled after R started
			if t.Status != wire.TrainerLeft {
				t.Status, t.JoinedRound = wire.TrainerJoining, R+1
			}
			t.Shards, t.ConsecMissed = nil, 0
		case t.Status == wire.TrainerLeft:
			if s.Status == wire.TrainerActive || s.Status == wire.TrainerJoining {
				leftSince = append(leftSince, t.DID)
			}
			t.Shards = nil
		case t.Status == wire.TrainerJoining && s.Status == wire.TrainerLeft:
			t.JoinedRound = R + 1 // left and enrolled again since
		default:
			t.Status, t.Shards, t.ConsecMissed, t.JoinedRound = s.Status, s.Shards, s.ConsecMissed, s.JoinedRound
		}
		t.RoundAccepted = 0
	}
	r.Round, r.RoundMs = R, x.blk.TimeMs
	r.RoundMissed, r.RoundCommitted = nil, nil // the round's turns start again
	r.RoundAnchor, r.RoundModel = snap.RoundAnchor, snap.RoundModel
	r.Joined = snap.Joined
	r.Left = append(append([]string(nil), snap.Left...), leftSince...)
	r.Equivocations = nil
	r.Fragments = snap.Fragments
	r.Roots = r.Roots[:R]
	var pend []pendingRound
	for _, p := range r.Pending {
		if p.Round < R {
			pend = append(pend, p)
		}
	}
	r.Pending = pend
	r.AwaitingFinal = false
	for g, fs := range r.Fragments {
		fs.Records, fs.KthMs, fs.Closed, fs.Commit, fs.ScoreSeed = nil, 0, false, nil, nil
		var times []int64
		err := x.kv.Scan(x.ctx, KSTranscript, RecordPrefix(task, R, g), func(_, raw []byte) error {
			var rec Record
			if err := json.Unmarshal(raw, &rec); err != nil {
				return fmt.Errorf("record of %s round %d fragment %d: %w", task, R, g, err)
			}
			fs.Records = append(fs.Records, RecRef{DID: rec.TrainerDID, PayloadHash: rec.PayloadHash})
			times = append(times, rec.TimeMs)
			return nil
		})
		if err != nil {
			return err
		}
		if k := r.spec.Quorum; len(times) >= k {
			sort.Slice(times, func(a, b int) bool { return times[a] < times[b] })
			fs.KthMs = times[k-1]
		}
		if g == f {
			continue
		}
		rec, err := x.commitRecord(task, R, g)
		if err != nil {
			return err
		}
		if rec == nil {
			continue // not committed yet
		}
		c := rec.Commit
		if err := x.closeFragment(r, g, &c); err != nil {
			return err
		}
		r.Equivocations = append(r.Equivocations, rec.Equivocations...)
	}
	return nil
}

// RunChallenges returns a run's challenges in the order the chain took them.
func RunChallenges(ctx context.Context, kv KV, task string) ([]wire.ChallengeRecord, error) {
	var ids []wire.Hash
	err := kv.Scan(ctx, KSEvidence, []byte("chrun/"+task+"/"), func(_, v []byte) error {
		var id wire.Hash
		if len(v) != len(id) {
			return fmt.Errorf("challenge index of %s is corrupt", task)
		}
		copy(id[:], v)
		ids = append(ids, id)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]wire.ChallengeRecord, 0, len(ids))
	for _, id := range ids {
		c, err := LoadChallenge(ctx, kv, id)
		if err != nil {
			return nil, err
		}
		out = append(out, *c)
	}
	return out, nil
}

// FragmentCommitRecord reads the record of a commit that can still be
// challenged (KindNotFound when there is none: not committed, final, or
// discarded).
func FragmentCommitRecord(ctx context.Context, kv KV, task string, round uint64, f int) (*CommitRecord, error) {
	raw, err := kv.Get(ctx, KSTranscript, CommitRecKey(task, round, f))
	if errors.Is(err, ErrNotFound) {
		return nil, Errf(KindNotFound, "no challengeable commit of round %d fragment %d of %s (not committed, already final, or discarded)", round, f, task)
	}
	if err != nil {
		return nil, err
	}
	var c CommitRecord
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("commit record of %s round %d fragment %d: %w", task, round, f, err)
	}
	return &c, nil
}

// Challenge reads one challenge record.
func Challenge(ctx context.Context, kv KV, id wire.Hash) (*wire.ChallengeRecord, error) {
	return LoadChallenge(ctx, kv, id)
}
