package wire

import "encoding/json"

// TrainerMetrics are the seed's per-trainer counters.
type TrainerMetrics struct {
	Submitted     uint64 `json:"submitted"`
	Accepted      uint64 `json:"accepted"`
	MissedRounds  uint64 `json:"missed_rounds"`
	CurrentReward string `json:"current_reward"`
	// ScoreFails counts the trainer's inputs that failed their score check
	// (scored runs; docs/protocol/scoring.md §8).
	ScoreFails uint64 `json:"score_fails,omitempty"`
	// GainChecks and GainSumPPM are a run_mean_gain run's scored checks of
	// the trainer and their summed wire.GainPPM (scoring.md §8): the seal
	// pays nothing when GainSumPPM < min_gain_ppm × GainChecks.
	GainChecks uint64 `json:"gain_checks,omitempty"`
	GainSumPPM int64  `json:"gain_sum_ppm,omitempty"`
}

// Trainer statuses.
const (
	TrainerActive  = "active"
	TrainerJoining = "joining" // enrolled during a round; active from the next
	TrainerLeft    = "left"
	TrainerEvicted = "evicted"
)

// TrainerView is one trainer of a run.
type TrainerView struct {
	DID     string `json:"did"`
	Status  string `json:"status"`
	Stake   string `json:"stake"`
	Slashed string `json:"slashed"`
	Shards  []int  `json:"shards"` // alias of ShardAssignments, kept for older clients
	// ShardAssignments are the trainer's data shards (the seed's name), which
	// apply from round ShardsFromRound.
	ShardAssignments []int  `json:"shard_assignments"`
	ShardsFromRound  uint64 `json:"shards_from_round"`
	JoinedAt         uint64 `json:"joined_round"`
	MissedRun        uint64 `json:"consecutive_missed"`
}

// TensorInfo describes one tensor of a fragment.
type TensorInfo struct {
	Name  string  `json:"name"`
	Dtype string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// FragmentView is one fragment of the model.
type FragmentView struct {
	Index   int          `json:"index"`
	Tensors []TensorInfo `json:"tensors"`
	Dtype   string       `json:"dtype"`
	N       int64        `json:"n"`
	// WeightsHash is the ContentHash (BLAKE3-256) of the fragment's
	// canonical safetensors, the bytes getWeights returns.
	WeightsHash Hash `json:"weights_hash"`
	// Round-local state.
	Accepted  int  `json:"accepted"`
	Committed bool `json:"committed"`
}

// Election is the stored, checkable result of the syncer election.
type Election struct {
	Alpha      HexBytes          `json:"alpha"`
	Winner     string            `json:"winner"`
	Candidates []ElectionEntrant `json:"candidates"`
}

// ElectionEntrant is one candidate's VRF proof and ticket.
type ElectionEntrant struct {
	DID    string   `json:"did"`
	Stake  string   `json:"stake"`
	Proof  HexBytes `json:"proof"`
	Output HexBytes `json:"output"`
	// Ticket is -ln(u)/stake rendered as a decimal string (lower wins).
	Ticket string `json:"ticket"`
}

// RunView is what getRun returns.
type RunView struct {
	TaskID         string                    `json:"task_id"`
	TaskSpec       json.RawMessage           `json:"task_spec"`
	SpecHash       Hash                      `json:"spec_hash"`
	Status         string                    `json:"status"`
	Round          uint64                    `json:"round"`
	RoundStartedMs int64                     `json:"round_started_ms"`
	Syncer         string                    `json:"syncer"`
	Election       *Election                 `json:"election,omitempty"`
	Trainers       []TrainerView             `json:"trainers"`
	TrainerMetrics map[string]TrainerMetrics `json:"trainer_metrics"`
	Fragments      []FragmentView            `json:"fragments"`
	ModelHash      Hash                      `json:"model_hash"`
	RoundRoots     []Hash                    `json:"round_roots"`
	Aggregation    json.RawMessage           `json:"aggregation"`
	Escrow         string                    `json:"escrow"`
	HasWeights     bool                      `json:"has_weights"`
	// InitWeightsHash is the ContentHash of the initial safetensors file
	// (absent until the run has initial weights): the blob a replay starts
	// from, which nodes keep (docs/protocol/blobs.md).
	InitWeightsHash Hash `json:"init_weights_hash,omitzero"`
	// CancelReason says why a cancelled run ended (sponsor cancelled, or the
	// enrolment window passed before M trainers enrolled).
	CancelReason string `json:"cancel_reason,omitempty"`
	// Challenges (docs/protocol/challenges.md), absent on a run without a
	// window: ChallengeWindowBlocks, how many rounds are final (their
	// rewards and slashes applied; current_reward counts only those) and
	// how many challenges are undecided.
	ChallengeWindowBlocks int64  `json:"challenge_window_blocks,omitempty"`
	FinalRounds           uint64 `json:"final_rounds,omitempty"`
	OpenChallenges        int    `json:"open_challenges,omitempty"`
	// PendingFinal lists the committed rounds that are not final yet, in
	// order, each with the first height at which it is final when no
	// challenge is open on it (its commit's block + ChallengeWindowBlocks).
	PendingFinal []RoundFinality `json:"pending_final,omitempty"`
	// EnrollDeadlineMs is when a run still awaiting enrolment expires (Unix ms).
	EnrollDeadlineMs int64 `json:"enroll_deadline_ms,omitempty"`
}

// Fragment commit statuses.
const (
	FragAggregated = "aggregated"
	FragNoQuorum   = "no_quorum"
	FragRuleFailed = "rule_failed"
)

// CommitInput is one accepted submission as recorded in a round commit.
type CommitInput struct {
	TrainerDID string `json:"trainer_did"`
	// PayloadHash is the ContentHash (BLAKE3-256) of the submitted payload.
	PayloadHash Hash `json:"payload_hash"`
	Selected    bool `json:"selected"`
	// Rejected carries a round-level verifier's reason, if it rejected the input.
	Rejected string `json:"rejected,omitempty"`
	// CopyOf names the trainer whose input of the same round and fragment
	// this one copies (the copy rule, docs/protocol/copies.md): set only on
	// a rejected input. Two inputs naming each other were recorded in the
	// same block: neither is paid, neither is slashed. One naming an input
	// recorded in an earlier block is slashed copies.slash_bps.
	CopyOf string `json:"copy_of,omitempty"`
	// StaleOfRound names an earlier round (at most StaleLookbackRounds
	// back) in which the same trainer's input to the same fragment had
	// values this input's copy (the cross-round self-copy rule,
	// docs/protocol/copies.md §6: a replayed gradient): set only on a
	// rejected input without copy_of. Unpaid, slashed copies.slash_bps, and
	// it forfeits the fragment's N of payout weight (the original's pay).
	StaleOfRound *uint64 `json:"stale_of_round,omitempty"`
	// Sketch is the input's sketch when the spec turns it on
	// (copies.sketch_dim, docs/protocol/copies.md §7): sketch_dim int16
	// values, big-endian, of a seeded count sketch of the input's
	// quantized values. Set on exactly the inputs the copy and stale rules
	// kept; what later rounds' stale rule compares with.
	Sketch []byte `json:"sketch,omitempty"`
	// Score is the input's score when the run is scored, the input kept
	// and drawn for scoring (ScoreSampled); absent otherwise.
	Score *InputScore `json:"score,omitempty"`
}

// FragmentCommit is the transcript entry of one fragment in one round.
// AggregateHash, WeightsBefore, WeightsAfter and MomentumAfter are
// ContentHashes (BLAKE3-256) of the aggregate's raw values, the fragment's
// canonical safetensors before and after, and the momentum's f32 bytes;
// RuleHash and OuterHash name plugin modules (SHA-256, like every plugin).
type FragmentCommit struct {
	Fragment      int             `json:"fragment"`
	Status        string          `json:"status"`
	Reason        string          `json:"reason,omitempty"`
	Inputs        []CommitInput   `json:"inputs"`
	Rule          string          `json:"rule"`
	RuleHash      Hash            `json:"rule_hash"`
	RuleParams    json.RawMessage `json:"rule_params"`
	OuterHash     Hash            `json:"outer_hash"`
	AggregateHash Hash            `json:"aggregate_hash"`
	WeightsBefore Hash            `json:"weights_before"`
	WeightsAfter  Hash            `json:"weights_after"`
	MomentumAfter Hash            `json:"momentum_after"`
	Fuel          uint64          `json:"fuel"`
	// Codec is the decode plugin that turned each input's payload into the
	// values aggregated (absent for uncompressed runs; compression.md).
	Codec *CodecRef `json:"codec,omitempty"`
	// Scoring is the evaluator and randomness of a scored run's aggregated
	// commit (absent for unscored runs and for commits that aggregate
	// nothing).
	Scoring *CommitScoring `json:"scoring,omitempty"`
	// Syncer is the DID that committed this fragment and Ticket its index in
	// the run's election succession (0 = the winner): a receipt's syncers
	// list names each with its election proof (PROTOCOL §8).
	Syncer string `json:"syncer"`
	Ticket uint64 `json:"ticket"`
}

// CodecRef records the decode plugin of a compressed run: its id, module
// hash and canonical parameters.
type CodecRef struct {
	Name   string          `json:"name"`
	Hash   Hash            `json:"hash"`
	Params json.RawMessage `json:"params"`
}

// RoundCommit is one round's transcript entry.
type RoundCommit struct {
	TaskID    string           `json:"task_id"`
	Round     uint64           `json:"round"`
	Fragments []FragmentCommit `json:"fragments"`
	// Missed lists active trainers with no accepted submission this round.
	Missed []string `json:"missed"`
	// Evicted lists trainers evicted at the end of this round.
	Evicted []string `json:"evicted"`
	// Joined and Left list membership changes that took effect this round.
	Joined []string `json:"joined"`
	Left   []string `json:"left"`
	// Equivocations lists digests of equivocation evidence proven this round.
	Equivocations []Hash `json:"equivocations"`
	// ModelHash is the model hash after the round (ModelHash: BLAKE3-256).
	ModelHash Hash `json:"model_hash"`
}

// Payout is one line of the reward distribution: the trainer's reward from
// the escrow, the stake refunded to it at seal, everything it was slashed
// over the run (which went into the escrow) and its payout weight (Σ over its
// accepted submissions of the fragment's element count).
type Payout struct {
	DID       string `json:"did"`
	Reward    string `json:"reward"`
	Refund    string `json:"stake_refund"`
	Slashed   string `json:"slashed"`
	WeightSum string `json:"weight"`
}

// ReceiptSyncer is one syncer a receipt names: its election entrant (DID,
// stake, VRF proof over the receipt's election_alpha, VRF output) and its
// index in the election's succession (Ticket, as FragmentCommit.Ticket).
type ReceiptSyncer struct {
	DID    string   `json:"did"`
	Stake  string   `json:"stake"`
	Proof  HexBytes `json:"proof"`
	Output HexBytes `json:"output"`
	Ticket uint64   `json:"ticket"`
}

// Receipt is the sealed run (DESIGN §3), format version 2: compact, its size
// does not grow with rounds or submissions (PROTOCOL §8). The round commits
// live in the transcript blob (TranscriptHash, fetched by hash for audits and
// replay), the attestation digests in their own list (AttestationsHash).
type Receipt struct {
	Version  int             `json:"version"`
	TaskID   string          `json:"task_id"`
	TaskSpec json.RawMessage `json:"task_spec"`
	SpecHash Hash            `json:"spec_hash"`
	RunRoot  Hash            `json:"run_root"`
	// InitModelHash is the model hash of the initial weights,
	// InitWeightsHash the ContentHash (BLAKE3-256) of the initial
	// safetensors file, its key in the blob store.
	InitModelHash   Hash `json:"init_model_hash"`
	InitWeightsHash Hash `json:"init_weights_hash"`
	FinalModelHash  Hash `json:"final_model_hash"`
	// Rounds is the number of round commits (run-root leaves 1..Rounds).
	Rounds uint64 `json:"rounds"`
	// TranscriptHash is the content hash of the transcript blob (the JCS
	// array of the round commits) and TranscriptSize its length in bytes.
	TranscriptHash Hash            `json:"transcript_hash"`
	TranscriptSize uint64          `json:"transcript_size"`
	PluginHashes   []Hash          `json:"plugin_hashes"`
	Engine         json.RawMessage `json:"engine"`
	// AttestationsHash is the content hash of the attestation list (the JCS
	// array of the evidence digests, in order) and AttestationCount its length.
	AttestationsHash Hash   `json:"attestations_hash"`
	AttestationCount uint64 `json:"attestation_count"`
	// ChallengesHash is the content hash of the challenge list (the JCS
	// array of the run's challenges, ReceiptChallenge, in the order the
	// chain took them), ChallengeCount its length and ChallengeEscrow what
	// they added to the escrow (Σ to_escrow: forfeited bonds and the rest of
	// syncer slashes). All three are absent when the run had no challenge.
	ChallengesHash  *Hash  `json:"challenges_hash,omitempty"`
	ChallengeCount  uint64 `json:"challenge_count,omitempty"`
	ChallengeEscrow string `json:"challenge_escrow,omitempty"`
	// ElectionAlpha is the VRF input of the run's syncer election; Syncers
	// every syncer that committed a fragment, and the signer, in ticket order.
	ElectionAlpha HexBytes        `json:"election_alpha"`
	Syncers       []ReceiptSyncer `json:"syncers"`
	// RewardPool is the spec's reward pool (escrowed at posting),
	// SlashedTotal the sum of every line's slashed (which went to the
	// escrow): Σ reward + SponsorRefund = RewardPool + SlashedTotal.
	RewardPool    string   `json:"reward_pool"`
	SlashedTotal  string   `json:"slashed_total"`
	Rewards       []Payout `json:"reward_distribution"`
	SponsorRefund string   `json:"sponsor_refund"`
	SyncerDID     string   `json:"syncer_did"`
	Signature     HexBytes `json:"signature"`
}

// RoundFinality is a committed round that is not final yet and the first
// height at which it is (RunView.PendingFinal).
type RoundFinality struct {
	Round   uint64 `json:"round"`
	FinalAt int64  `json:"final_at"`
}
