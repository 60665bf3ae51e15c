package wire

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Challenges of fragment commits (docs/protocol/challenges.md, DESIGN §12
// "optimistic verification made exact by determinism"). A fragment commit
// is final challenge_window_blocks after the block that committed it; until
// then anyone may dispute it with a bond and the result hash it claims is
// correct; the validators re-execute the commit and vote its result hash;
// 2/3 of the voting power on one value decides.

// Domains of the challenge preimages.
const (
	DomainFragmentResult = "tenzro/train/fragment-result/v1" // FragmentResultHash
	DomainChallengeID    = "tenzro/train/challenge-id/v1"    // a challenge's identifier
	DomainChallengeVote  = "tenzro/train/challenge-vote/v1"  // a validator's vote signature
)

// FragmentResultHash is what a challenge disputes: SHA-256 over the
// canonical preimage of the fields of a fragment commit that re-executing
// it determines —
//
//	Str(DomainFragmentResult) ‖ Str(status) ‖ U64(len(inputs)) ‖
//	for each input in commit order: U64(selected ? 1 : 0) ‖
//	  (copy_of set ? U64(2) ‖ Str(copy_of) :
//	   stale_of_round set ? U64(3) ‖ U64(stale_of_round) : U64(rejected ? 1 : 0)) ‖
//	Hash(aggregate_hash) ‖ Hash(weights_after) ‖ Hash(momentum_after) ‖ U64(fuel)
//	[scored commits (scoring set): ‖ Str("scoring") ‖ for each input in commit order:
//	   U64(0) no score | U64(2) evaluator failed |
//	   U64(1) ‖ U64(own_before bits) ‖ U64(own_after) ‖ U64(ctl_before) ‖ U64(ctl_after) ‖ U64(pass)]
//	[commits with a sketch on any input (copies.md §7): ‖ Str("sketch") ‖
//	   for each input in commit order: U64(0) none | U64(1) ‖ Bytes(sketch)]
//
// (A commit without copy or stale verdicts hashes as before the copy rule existed;
// one without scoring as before scores existed; one without sketches as
// before sketches existed. The scoring header itself
// — evaluator, rate, seed — is fixed by the chain and not hashed.)
// A rejection counts as a flag, not by its reason (a reason names the
// node's own error text); the inputs themselves (DIDs, payload hashes), the
// rule, the weights before and the syncer are fixed by the chain, not
// computed, and so are not part of it.
func FragmentResultHash(fc *FragmentCommit) Hash {
	c := NewCanon(DomainFragmentResult).Str(fc.Status).U64(uint64(len(fc.Inputs)))
	for _, in := range fc.Inputs {
		c.U64(b2u(in.Selected))
		if in.CopyOf != "" { // the copy verdict: 2 and whose input it copies
			c.U64(2).Str(in.CopyOf)
			continue
		}
		if in.StaleOfRound != nil { // the stale verdict: 3 and the round it replays
			c.U64(3).U64(*in.StaleOfRound)
			continue
		}
		c.U64(b2u(in.Rejected != ""))
	}
	c.Hash(fc.AggregateHash).Hash(fc.WeightsAfter).Hash(fc.MomentumAfter).U64(fc.Fuel)
	if fc.Scoring != nil { // scored commits only: unscored ones hash as before
		c.Str("scoring")
		for _, in := range fc.Inputs {
			s := in.Score
			switch {
			case s == nil:
				c.U64(0)
			case s.Failed != "":
				c.U64(2)
			default:
				c.U64(1).U64(uint64(s.OwnBefore)).U64(uint64(s.OwnAfter)).U64(uint64(s.CtlBefore)).U64(uint64(s.CtlAfter)).U64(b2u(s.Pass))
			}
		}
	}
	if hasSketch(fc) { // sketched commits only: others hash as before
		c.Str("sketch")
		for _, in := range fc.Inputs {
			if len(in.Sketch) == 0 {
				c.U64(0)
				continue
			}
			c.U64(1).Bytes(in.Sketch)
		}
	}
	return c.Sum()
}

func hasSketch(fc *FragmentCommit) bool {
	for _, in := range fc.Inputs {
		if len(in.Sketch) > 0 {
			return true
		}
	}
	return false
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// Transaction types of challenges (chain.md §1).
const (
	TxChallenge     = "tenzro_training_challenge"
	TxChallengeVote = "tenzro_training_challengeVote"
	// MethodChallenge is the JSON-RPC method a challenger calls (the
	// transaction's type).
	MethodChallenge = TxChallenge
	// MethodGetChallenges lists a run's challenges (ChallengeRecord).
	MethodGetChallenges = "tenzro_training_getChallenges"
	// MethodReplayFragment: the node recomputes a fragment commit that can
	// still be challenged and returns its FragmentResultHash
	// (ReplayFragmentParams, ReplayFragmentResult).
	MethodReplayFragment = "tenzro_training_replayFragment"
	// MethodGetFragmentState returns the committed state re-executing a
	// challengeable commit reads (ReplayFragmentParams → FragmentState), so
	// a client can re-execute it itself (tenzro receipt replay --local).
	MethodGetFragmentState = "tenzro_training_getFragmentState"
)

// ChallengeTx disputes the fragment commit of (task, round, fragment) that
// is on chain when it lands: the challenger escrows Bond (exactly the run's
// challenge_bond) and claims ResultHash is the commit's correct
// FragmentResultHash. The zero ResultHash claims the commit's inputs are
// unavailable (nobody can produce them). Signed with PROTOCOL §3's request
// preimage, method fields Str(task_id) ‖ U64(round) ‖ U64(fragment) ‖
// Hash(result_hash) ‖ Str(bond).
type ChallengeTx struct {
	TaskID        string `json:"task_id"`
	Round         uint64 `json:"round"`
	Fragment      uint64 `json:"fragment"`
	ChallengerDID string `json:"challenger_did"`
	ResultHash    Hash   `json:"result_hash"`
	Bond          string `json:"bond"`
	Signed
}

// Preimage is the challenger's signing preimage.
func (p *ChallengeTx) Preimage() []byte {
	return RequestPreimage(p.ChainID, TxChallenge, p.ChallengerDID, p.Nonce, func(c *Canon) {
		c.Str(p.TaskID).U64(p.Round).U64(p.Fragment).Hash(p.ResultHash).Str(p.Bond)
	})
}

// ChallengeParams is tenzro_training_challenge over JSON-RPC (the
// transaction's params).
type ChallengeParams = ChallengeTx

// ChallengeID identifies a challenge: SHA-256(Str(DomainChallengeID) ‖
// Str(task) ‖ U64(round) ‖ U64(fragment) ‖ Str(challenger) ‖ U64(nonce) ‖
// Bytes(hash of the block that took it)). The block hash makes it unique
// to one chain, so a vote cannot be replayed on another.
func ChallengeID(task string, round, fragment uint64, challenger string, nonce uint64, blockHash []byte) Hash {
	return NewCanon(DomainChallengeID).Str(task).U64(round).U64(fragment).Str(challenger).U64(nonce).Bytes(blockHash).Sum()
}

// ChallengeVoteTx is a validator's vote on a challenge: the result hash its
// node computed by re-executing the commit, or Unavailable (its node could
// not fetch an input, the weights or the momentum the commit used), signed
// by the validator's consensus key (Ed25519) over VotePreimage. Validator is
// its 20-byte consensus address.
type ChallengeVoteTx struct {
	Challenge   Hash     `json:"challenge"`
	ResultHash  Hash     `json:"result_hash"`
	Unavailable bool     `json:"unavailable,omitempty"`
	Validator   HexBytes `json:"validator"`
	Signature   HexBytes `json:"signature"`
}

// Preimage is Str(DomainChallengeVote) ‖ Hash(challenge) ‖
// U64(unavailable ? 1 : 0) ‖ Hash(result_hash) ‖ Bytes(validator).
func (v *ChallengeVoteTx) Preimage() []byte {
	return NewCanon(DomainChallengeVote).Hash(v.Challenge).U64(b2u(v.Unavailable)).Hash(v.ResultHash).Bytes(v.Validator).Out()
}

// Challenge outcomes.
const (
	ChallengeOpen     = "open"
	ChallengeUpheld   = "syncer_wrong"    // the commit was wrong or its inputs unavailable: syncer slashed, run rolled back
	ChallengeRejected = "challenge_wrong" // the validators confirmed the commit: bond forfeited
	ChallengeExpired  = "expired"         // no value reached 2/3 within the vote window: bond returned, commit stands
	ChallengeVoid     = "void"            // the commit was discarded by another challenge's rollback: bond returned
)

// ChallengeVote is one validator's vote as the chain recorded it.
type ChallengeVote struct {
	Validator   HexBytes `json:"validator"`
	Power       int64    `json:"power"`
	ResultHash  Hash     `json:"result_hash"`
	Unavailable bool     `json:"unavailable,omitempty"`
	Height      int64    `json:"height"`
}

// ChallengeRecord is a challenge on chain and, once decided, in the
// receipt's challenge list.
type ChallengeRecord struct {
	ID         Hash   `json:"id"`
	TaskID     string `json:"task_id"`
	Round      uint64 `json:"round"`
	Fragment   uint64 `json:"fragment"`
	Challenger string `json:"challenger"`
	// Syncer committed the disputed commit (at Ticket of the succession);
	// Committed is its FragmentResultHash, Claimed the challenger's.
	Syncer    string `json:"syncer"`
	Ticket    uint64 `json:"ticket"`
	Committed Hash   `json:"committed"`
	Claimed   Hash   `json:"claimed"`
	// CommitHeight is the disputed commit's block, Height the challenge's,
	// VoteDeadline the last height at which votes count.
	CommitHeight int64  `json:"commit_height"`
	Height       int64  `json:"height"`
	VoteDeadline int64  `json:"vote_deadline"`
	Bond         string `json:"bond"`
	// Committee lists the voting validators' addresses (all validators, or
	// the committee drawn at Height); TotalPower is their voting power.
	Committee  []HexBytes      `json:"committee"`
	TotalPower int64           `json:"total_power"`
	Votes      []ChallengeVote `json:"votes"`
	Outcome    string          `json:"outcome"`
	// Decided is the height of the outcome; Result the value 2/3 of the
	// power voted for (the zero hash with Unavailable for "unavailable").
	Decided     int64 `json:"decided,omitempty"`
	Result      Hash  `json:"result"`
	Unavailable bool  `json:"unavailable,omitempty"`
	// Money: what the syncer lost, what the challenger got on top of its
	// bond back, and what went to the run's escrow (the rest of the slash,
	// or the forfeited bond).
	SyncerSlashed    string `json:"syncer_slashed"`
	ChallengerReward string `json:"challenger_reward"`
	ToEscrow         string `json:"to_escrow"`
}

// ChallengeResult answers tenzro_training_challenge.
type ChallengeResult struct {
	ID           Hash   `json:"id"`
	TaskID       string `json:"task_id"`
	Round        uint64 `json:"round"`
	Fragment     uint64 `json:"fragment"`
	Committed    Hash   `json:"committed"`
	VoteDeadline int64  `json:"vote_deadline"`
	Height       int64  `json:"height,omitempty"`
}

// ReplayFragmentParams is tenzro_training_replayFragment.
type ReplayFragmentParams struct {
	TaskID   string `json:"task_id"`
	Round    uint64 `json:"round"`
	Fragment uint64 `json:"fragment"`
}

// ReplayFragmentResult is a fragment commit recomputed by the node: the
// committed FragmentResultHash, the node's (zero when unavailable: an input
// the commit kept, its weights or momentum before could not be fetched; why
// says which), whether they agree, the recomputed commit, how long it took
// and the height at which the commit is final.
type ReplayFragmentResult struct {
	TaskID      string          `json:"task_id"`
	Round       uint64          `json:"round"`
	Fragment    uint64          `json:"fragment"`
	Committed   Hash            `json:"committed"`
	Result      Hash            `json:"result"`
	Unavailable bool            `json:"unavailable,omitempty"`
	Why         string          `json:"why,omitempty"`
	Agrees      bool            `json:"agrees"`
	Commit      *FragmentCommit `json:"commit,omitempty"`
	ElapsedMs   int64           `json:"elapsed_ms"`
	FinalAt     int64           `json:"final_at"`
}

// StateEntry is one key of the chain's committed state: its key space, key
// and value (chain.md §2).
type StateEntry struct {
	Keyspace string   `json:"keyspace"`
	Key      HexBytes `json:"key"`
	Value    []byte   `json:"value"`
}

// FragmentState is what re-executing a commit reads from committed state
// (the run, the commit record, the run as its round started, the
// fragment's submission records) at Height.
type FragmentState struct {
	Height  int64        `json:"height"`
	Entries []StateEntry `json:"entries"`
}

// ChallengeVoteResult answers a vote transaction.
type ChallengeVoteResult struct {
	ID      Hash   `json:"id"`
	Outcome string `json:"outcome"`
}

// SyncerSlash is a spec's syncer_slash: a share of the committing syncer's
// candidate stake (Bps, "5000bps") or a fixed amount of attoTNZO (Amount,
// capped at the stake).
type SyncerSlash struct {
	Bps    int
	Amount *big.Int
}

// DefaultSyncerSlash is syncer_slash when a spec sets none: half the
// candidate stake (RATIONALE "bond and slash sizes").
const DefaultSyncerSlash = "5000bps"

// ParseSyncerSlash parses "<n>bps" (0..10000) or a decimal amount.
func ParseSyncerSlash(s string) (SyncerSlash, error) {
	if b, ok := strings.CutSuffix(s, "bps"); ok {
		n, err := strconv.Atoi(b)
		if err != nil || n < 0 || n > 10000 || strconv.Itoa(n) != b {
			return SyncerSlash{}, fmt.Errorf("syncer_slash %q: want 0bps..10000bps or a decimal amount of attoTNZO", trunc(s))
		}
		return SyncerSlash{Bps: n}, nil
	}
	v, err := ParseAmount(s)
	if err != nil {
		return SyncerSlash{}, fmt.Errorf("syncer_slash: %w (or <n>bps)", err)
	}
	return SyncerSlash{Amount: v}, nil
}

// Of is the slash of a stake: the amount or bps of it, at most the stake.
func (s SyncerSlash) Of(stake *big.Int) *big.Int {
	var v *big.Int
	if s.Amount != nil {
		v = new(big.Int).Set(s.Amount)
	} else {
		v = new(big.Int).Div(new(big.Int).Mul(stake, big.NewInt(int64(s.Bps))), big.NewInt(10000))
	}
	if v.Cmp(stake) > 0 {
		v.Set(stake)
	}
	return v
}

// Challenge parameter defaults and bounds (spec fields; RATIONALE "what the
// window trades", "bond and slash sizes").
const (
	// DefaultChallengeWindowBlocks is a network genesis's default window
	// when neither the spec nor the genesis sets one: 600 blocks, 10 minutes
	// at 1 s blocks.
	DefaultChallengeWindowBlocks = 600
	// DefaultVoteWindowBlocks: how long validators have to re-execute and
	// vote, 300 blocks.
	DefaultVoteWindowBlocks = 300
	// DefaultChallengeBond is 1 TNZO.
	DefaultChallengeBond = "1000000000000000000"
	// MaxChallengeWindowBlocks bounds both windows.
	MaxChallengeWindowBlocks = 1_000_000
	// ChallengerRewardBps is the challenger's share of an upheld
	// challenge's syncer slash; the rest goes to the run's escrow.
	ChallengerRewardBps = 5000
)

// VoteWindow is vote_window_blocks with its default.
func (s *TaskSpec) VoteWindow() int64 {
	if s.VoteWindowBlocks > 0 {
		return s.VoteWindowBlocks
	}
	return DefaultVoteWindowBlocks
}

// Bond is challenge_bond with its default.
func (s *TaskSpec) Bond() string {
	if s.ChallengeBond != "" {
		return s.ChallengeBond
	}
	return DefaultChallengeBond
}

// SyncerSlashRule is syncer_slash with its default.
func (s *TaskSpec) SyncerSlashRule() SyncerSlash {
	v := s.SyncerSlash
	if v == "" {
		v = DefaultSyncerSlash
	}
	r, _ := ParseSyncerSlash(v) // Validate checked it
	return r
}

// ChallengeWindow is challenge_window_blocks, or def (the chain's default)
// when the spec sets none.
func (s *TaskSpec) ChallengeWindow(def int64) int64 {
	if s.ChallengeWindowBlocks != nil {
		return *s.ChallengeWindowBlocks
	}
	return def
}

// ValidateChallenges checks the spec's challenge fields (Validate calls it).
func (s *TaskSpec) ValidateChallenges() error {
	if w := s.ChallengeWindowBlocks; w != nil && (*w < 0 || *w > MaxChallengeWindowBlocks) {
		return fmt.Errorf("spec: challenge_window_blocks is %d, want 0..%d", *w, MaxChallengeWindowBlocks)
	}
	if s.VoteWindowBlocks < 0 || s.VoteWindowBlocks > MaxChallengeWindowBlocks {
		return fmt.Errorf("spec: vote_window_blocks is %d, want 1..%d (0: the default %d)", s.VoteWindowBlocks, MaxChallengeWindowBlocks, DefaultVoteWindowBlocks)
	}
	if s.ChallengeBond != "" {
		b, err := ParseAmount(s.ChallengeBond)
		if err != nil {
			return fmt.Errorf("spec: challenge_bond: %w", err)
		}
		if b.Sign() == 0 {
			return fmt.Errorf("spec: challenge_bond is \"0\": a free challenge costs the validators a re-execution for nothing")
		}
	}
	if s.SyncerSlash != "" {
		if _, err := ParseSyncerSlash(s.SyncerSlash); err != nil {
			return fmt.Errorf("spec: %w", err)
		}
	}
	if s.ChallengeCommittee < 0 || s.ChallengeCommittee > 10000 {
		return fmt.Errorf("spec: challenge_committee is %d, want 0 (every validator)..10000", s.ChallengeCommittee)
	}
	return nil
}

// ReceiptChallenge is one challenge in a receipt's challenge list: what it
// disputed, who made it, how it ended and what it moved (the votes stay on
// chain, tenzro_training_getChallenges).
type ReceiptChallenge struct {
	ID         Hash   `json:"id"`
	Round      uint64 `json:"round"`
	Fragment   uint64 `json:"fragment"`
	Challenger string `json:"challenger"`
	// Syncer made the disputed commit at Ticket; on an upheld challenge it
	// is the slashed syncer.
	Syncer      string `json:"syncer"`
	Ticket      uint64 `json:"ticket"`
	Committed   Hash   `json:"committed"`
	Claimed     Hash   `json:"claimed"`
	Bond        string `json:"bond"`
	Outcome     string `json:"outcome"`
	Result      Hash   `json:"result"`
	Unavailable bool   `json:"unavailable,omitempty"`
	Decided     int64  `json:"decided"`
	// SyncerSlashed = ChallengerReward + ToEscrow on an upheld challenge;
	// ToEscrow = Bond on a rejected one; all "0" otherwise.
	SyncerSlashed    string `json:"syncer_slashed"`
	ChallengerReward string `json:"challenger_reward"`
	ToEscrow         string `json:"to_escrow"`
}

// ReceiptEntry is r's entry in a receipt's challenge list.
func (r *ChallengeRecord) ReceiptEntry() ReceiptChallenge {
	return ReceiptChallenge{ID: r.ID, Round: r.Round, Fragment: r.Fragment, Challenger: r.Challenger, Syncer: r.Syncer, Ticket: r.Ticket,
		Committed: r.Committed, Claimed: r.Claimed, Bond: r.Bond, Outcome: r.Outcome, Result: r.Result, Unavailable: r.Unavailable,
		Decided: r.Decided, SyncerSlashed: r.SyncerSlashed, ChallengerReward: r.ChallengerReward, ToEscrow: r.ToEscrow}
}
