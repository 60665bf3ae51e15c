package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"regexp"
	"strings"

	"github.com/gowebpki/jcs"
)

// Tiers.
const (
	TierOpen         = "Open"
	TierVerified     = "Verified"
	TierConfidential = "Confidential"
)

// Limits on posted specs.
const (
	MaxSpecBytes = 64 << 10
	MaxTaskIDLen = 128
	MaxFragments = 4096
	// MaxTrainers bounds M so that a run's receipt, one settlement line per
	// trainer, stays within its 64 KiB (RATIONALE "receipts: M is bounded").
	MaxTrainers    = 256
	MaxRounds      = 1 << 20
	MaxInnerSteps  = 1 << 20
	MaxGraceMillis = 24 * 3600 * 1000
)

// Architecture is the model description of the seed's spec.
type Architecture struct {
	Family        string          `json:"family"`
	ParamCount    int64           `json:"param_count"`
	Modality      string          `json:"modality"`
	FragmentCount int             `json:"fragment_count"`
	Dtype         string          `json:"dtype"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
}

// Spec dtypes (architecture.dtype) as the seed writes them.
const (
	DtypeF32  = "f32"
	DtypeBF16 = "bf16"
)

// TensorDtype is the safetensors dtype of the run's weights and of every
// payload: F32 for a spec's f32, BF16 for bf16 (PROTOCOL §5: payload dtype
// = weights dtype = spec dtype). Validate refuses any other spec dtype.
func (a Architecture) TensorDtype() (string, error) {
	switch a.Dtype {
	case DtypeF32:
		return "F32", nil
	case DtypeBF16:
		return "BF16", nil
	}
	return "", fmt.Errorf("spec: architecture.dtype is %q, want %q or %q", trunc(a.Dtype), DtypeF32, DtypeBF16)
}

// OuterOptimizer configures the outer Nesterov step.
type OuterOptimizer struct {
	LR       float32 `json:"lr"`
	Momentum float32 `json:"momentum"`
	Nesterov bool    `json:"nesterov"`
}

// Slashing sets explicit penalties. Amounts are basis points of the trainer's
// stake (10000 = the whole stake, which must be written out to happen).
type Slashing struct {
	// MaxMissedRounds: consecutive missed rounds after which a trainer is
	// evicted (default 3).
	MaxMissedRounds int `json:"max_missed_rounds"`
	// MissedRoundBps is slashed for each missed round (default 0).
	MissedRoundBps int `json:"missed_round_bps"`
	// EvictionBps is slashed at eviction (default 1000 = 10%).
	EvictionBps int `json:"eviction_bps"`
	// EquivocationBps is slashed per proven equivocation (default 5000).
	EquivocationBps int `json:"equivocation_bps"`
}

// DefaultSlashing is used when the spec has no slashing field.
var DefaultSlashing = Slashing{MaxMissedRounds: 3, MissedRoundBps: 0, EvictionBps: 1000, EquivocationBps: 5000}

// TaskSpec is the seed's TrainingTaskSpec plus the optional fields of DESIGN §3.
type TaskSpec struct {
	TaskID         string          `json:"task_id"`
	SponsorDID     string          `json:"sponsor_did"`
	SponsorAddress string          `json:"sponsor_address"`
	Architecture   Architecture    `json:"architecture"`
	Tier           string          `json:"tier"`
	Aggregation    string          `json:"aggregation"`
	TrainerCount   int             `json:"trainer_count"`
	Quorum         int             `json:"quorum"`
	InnerSteps     int             `json:"inner_steps"`
	MaxRounds      int             `json:"max_rounds"`
	GraceWindowMs  int64           `json:"grace_window_ms"`
	RewardPool     string          `json:"reward_pool"`
	DatasetRef     string          `json:"dataset_ref"`
	DatasetHash    string          `json:"dataset_hash"`
	MinThroughput  json.RawMessage `json:"min_throughput"`
	CreatedAt      int64           `json:"created_at"`

	// Optional fields (DESIGN §3).
	AggregationParams json.RawMessage `json:"aggregation_params,omitempty"`
	Verification      []string        `json:"verification,omitempty"`
	OuterOptimizer    *OuterOptimizer `json:"outer_optimizer,omitempty"`
	AttestationPolicy json.RawMessage `json:"attestation_policy,omitempty"`
	InitModel         string          `json:"init_model,omitempty"`
	ShardCount        int             `json:"shard_count,omitempty"`
	// ShardSplit says how a finite corpus's windows are cut into shards
	// (docs/protocol/scoring.md §3): absent, contiguous blocks of the whole
	// enumeration; "series" (ShardSplitSeries), a time block of every long
	// series per shard, short series dealt whole. Only the non-default value
	// is accepted (an explicit "" is refused: one spelling per spec), so a
	// spec without it hashes as before.
	ShardSplit *string `json:"shard_split,omitempty"`
	// ShardHolders is how many distinct active trainers each shard is
	// dealt to (docs/protocol/scoring.md §3.1): absent, one (shard s to
	// active trainer s mod n in DID order); 2, a second holder too, the
	// pairing drawn each round from the round's anchor (machine
	// DealShards), and each trainer's inner batches drawn with its DID in
	// the seed so that two honest holders are not copies. Only 2 is
	// accepted (an explicit 1 is refused: one spelling per spec), so a
	// spec without it hashes as before.
	ShardHolders *int      `json:"shard_holders,omitempty"`
	Slashing     *Slashing `json:"slashing,omitempty"`
	// RoundDeadlineMs bounds a round: fragments without K accepted
	// submissions by then keep their weights (default 600000).
	RoundDeadlineMs int64 `json:"round_deadline_ms,omitempty"`
	// MinStake is the smallest stake accepted at enrolment (default "0").
	MinStake string `json:"min_stake,omitempty"`
	// RobustRequiresVerified makes a non-Mean rule require tier Verified or above.
	RobustRequiresVerified bool `json:"robust_requires_verified,omitempty"`
	// Compression names the codec outer gradients travel in, e.g.
	// {"codec":"int4-block","block":64} (docs/protocol/compression.md).
	Compression json.RawMessage `json:"compression,omitempty"`
	// Scoring names the evaluator that scores submissions, its parameters,
	// the sampling rate and the batch size, e.g.
	// {"evaluator":"TimesFMScore","rate_bps":10000,"batch":8}
	// (docs/protocol/scoring.md §5).
	Scoring json.RawMessage `json:"scoring,omitempty"`
	// EnrollWindowMs is how long after posting a run may wait for M
	// trainers (and its initial weights); past it the run expires and the
	// escrow and stakes are refunded (default 7 days, at most 90 days).
	EnrollWindowMs int64 `json:"enroll_window_ms,omitempty"`
	// Challenges (docs/protocol/challenges.md). ChallengeWindowBlocks: a
	// fragment commit is final this many blocks after its block (absent:
	// the chain's default; 0: final at once, no challenge possible).
	ChallengeWindowBlocks *int64 `json:"challenge_window_blocks,omitempty"`
	// ChallengeBond is what a challenger escrows (default 1 TNZO).
	ChallengeBond string `json:"challenge_bond,omitempty"`
	// SyncerSlash is what a syncer whose commit a challenge proves wrong
	// loses of its candidate stake: "<n>bps" or an amount (default 5000bps).
	SyncerSlash string `json:"syncer_slash,omitempty"`
	// VoteWindowBlocks is how long the validators have to vote (default 300).
	VoteWindowBlocks int64 `json:"vote_window_blocks,omitempty"`
	// ChallengeCommittee, when > 0, draws that many validators by the
	// challenge block's hash to decide each challenge (default: all).
	ChallengeCommittee int `json:"challenge_committee,omitempty"`
	// Copies tunes the copy rule (docs/protocol/copies.md): which inputs
	// of one round and fragment count as copies of an earlier one, and
	// what a copier is slashed (default CopyRule defaults).
	Copies *CopyRule `json:"copies,omitempty"`
	// SyncStrategy says how trainers overlap communication with compute:
	// "blocking" (default) or "eager" (docs/protocol/overlap.md). The
	// syncer's computation does not depend on it.
	SyncStrategy json.RawMessage `json:"sync_strategy,omitempty"`
}

// CopyRule is the spec's copy rule. Two inputs of one round and fragment
// are copies when the cosine similarity of their decoded values, computed
// exactly on integers (copies.md §2), is at least MinCosinePpm / 10^6.
type CopyRule struct {
	// MinCosinePpm: the similarity threshold in millionths (default
	// 999900, cos ≥ 0.9999); 1000001 turns the rule off.
	MinCosinePpm *int64 `json:"min_cosine_ppm,omitempty"`
	// SlashBps is slashed from a copier whose original was recorded in an
	// earlier block (default 5000, like an equivocation).
	SlashBps *int `json:"slash_bps,omitempty"`
	// SketchDim, when set (a power of two, MinSketchDim..MaxSketchDim),
	// turns on the input sketch (copies.md §7): every input kept after the
	// copy and stale rules carries a sketch of that many int16 values in
	// the commit, and the stale rule also compares an input's sketch with
	// the same trainer's sketches of every round before r − 2, so a replay
	// cycle of any length is caught. Absent or 0: off (commits as before).
	SketchDim *int `json:"sketch_dim,omitempty"`
}

// ShardSplitSeries is the spec's shard_split for series-balanced shards
// (scoring.md §3; syncer.SeriesShardBlocks).
const ShardSplitSeries = "series"

// ShardHoldersPaired is the one shard_holders value a spec may write: every
// shard dealt to two distinct active trainers (scoring.md §3.1).
const ShardHoldersPaired = 2

// DomainShardDeal derives the seed that pairs a round's shard holders
// (machine DealShards, scoring.md §3.1).
const DomainShardDeal = "tenzro/train/shard-deal/v1"

// Copy rule defaults and bounds.
const (
	DefaultCopyMinCosinePpm = 999_900
	DefaultCopySlashBps     = 5000
	// CopyRuleOff is the min_cosine_ppm that no pair reaches.
	CopyRuleOff = 1_000_001
	// StaleLookbackRounds is how many earlier rounds the cross-round
	// self-copy rule compares an input with (copies.md §6): rounds r−1 and
	// r−2 of the same trainer and fragment. Their payloads are kept until
	// round r is final (blobs.md "Collection").
	StaleLookbackRounds = 2
	// MinSketchDim and MaxSketchDim bound copies.sketch_dim.
	MinSketchDim = 16
	MaxSketchDim = 1024
)

// DomainInputSketch derives the input sketch's hash seed (copies.md §7).
const DomainInputSketch = "tenzro/train/input-sketch/v1"

// SketchSeed is the input sketch's seed for fragment f of task: the first
// 8 bytes (big-endian) of SHA-256(Str(DomainInputSketch) ‖ Str(task) ‖
// U64(fragment)). The same for every round of the run, so the sketches of
// equal values are equal whatever round they were submitted in.
func SketchSeed(task string, fragment uint64) uint64 {
	h := NewCanon(DomainInputSketch).Str(task).U64(fragment).Sum()
	return binary.BigEndian.Uint64(h[:8])
}

// SketchDim returns the input sketch's dimension (copies.md §7), 0 when
// the sketch is off.
func (s *TaskSpec) SketchDim() int {
	if s.Copies != nil && s.Copies.SketchDim != nil {
		return *s.Copies.SketchDim
	}
	return 0
}

// CopyThresholdPpm returns the copy rule's similarity threshold in ppm.
func (s *TaskSpec) CopyThresholdPpm() int64 {
	if s.Copies != nil && s.Copies.MinCosinePpm != nil {
		return *s.Copies.MinCosinePpm
	}
	return DefaultCopyMinCosinePpm
}

// CopySlashBps returns what a copier is slashed, in basis points.
func (s *TaskSpec) CopySlashBps() int {
	if s.Copies != nil && s.Copies.SlashBps != nil {
		return *s.Copies.SlashBps
	}
	return DefaultCopySlashBps
}

// Enrolment window bounds.
const (
	DefaultEnrollWindowMs = 7 * 24 * 3600 * 1000
	MaxEnrollWindowMs     = 90 * 24 * 3600 * 1000
)

// EnrollWindow returns the enrolment window in ms (default 7 days).
func (s *TaskSpec) EnrollWindow() int64 {
	if s.EnrollWindowMs > 0 {
		return s.EnrollWindowMs
	}
	return DefaultEnrollWindowMs
}

var taskIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

// ParseSpec decodes a posted spec strictly (unknown fields and trailing data
// are refused) and returns it with its canonical (RFC 8785) JSON.
func ParseSpec(raw []byte) (*TaskSpec, []byte, error) {
	if len(raw) > MaxSpecBytes {
		return nil, nil, fmt.Errorf("spec: %d bytes, limit %d", len(raw), MaxSpecBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var s TaskSpec
	if err := dec.Decode(&s); err != nil {
		return nil, nil, fmt.Errorf("spec: %w", err)
	}
	if dec.More() {
		return nil, nil, fmt.Errorf("spec: trailing data after the JSON object")
	}
	// What encoding/json lets through: a duplicate member (last one wins,
	// so two readers may see two specs) and integers that RFC 8785 stores
	// as a different number (9223372036854775807 becomes
	// 9223372036854776000, which no longer fits the field).
	if err := CheckStrictJSON(raw, StrictJSONOptions{ExactIntegers: true}); err != nil {
		return nil, nil, fmt.Errorf("spec: %w", err)
	}
	// encoding/json also matches member names case-insensitively
	// ("ArChiteCture"): the spec's own names must be spelled exactly.
	if err := exactNames(raw, reflect.TypeOf(s), ""); err != nil {
		return nil, nil, fmt.Errorf("spec: %w", err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("spec: canonicalize: %w", err)
	}
	return &s, canon, nil
}

// SpecHash is SHA-256(Str(DomainSpec) ‖ Bytes(canonical spec JSON)).
func SpecHash(canonical []byte) Hash { return NewCanon(DomainSpec).Bytes(canonical).Sum() }

// Validate checks the structural rules every spec must satisfy. Rule names
// and policies are checked by the syncer against its engine.
func (s *TaskSpec) Validate() error {
	switch {
	case s.TaskID == "":
		return fmt.Errorf("spec: task_id is empty")
	case len(s.TaskID) > MaxTaskIDLen || !taskIDRe.MatchString(s.TaskID):
		return fmt.Errorf("spec: task_id %q must be 1–%d characters of [A-Za-z0-9._:-] starting with a letter or digit", trunc(s.TaskID), MaxTaskIDLen)
	case s.TrainerCount < 1 || s.TrainerCount > MaxTrainers:
		return fmt.Errorf("spec: trainer_count (M) is %d, want 1..%d", s.TrainerCount, MaxTrainers)
	case s.Quorum < 1:
		return fmt.Errorf("spec: quorum (K) is %d, want ≥ 1", s.Quorum)
	case s.Quorum > s.TrainerCount:
		return fmt.Errorf("spec: quorum K=%d exceeds trainer_count M=%d (need K ≤ M)", s.Quorum, s.TrainerCount)
	case s.Architecture.FragmentCount < 1 || s.Architecture.FragmentCount > MaxFragments:
		return fmt.Errorf("spec: architecture.fragment_count (F) is %d, want 1..%d", s.Architecture.FragmentCount, MaxFragments)
	case s.Architecture.Dtype != DtypeF32 && s.Architecture.Dtype != DtypeBF16:
		return fmt.Errorf("spec: architecture.dtype is %q, want %q or %q (the dtype of the weights and of every payload)", trunc(s.Architecture.Dtype), DtypeF32, DtypeBF16)
	case s.InnerSteps < 1 || s.InnerSteps > MaxInnerSteps:
		return fmt.Errorf("spec: inner_steps (H) is %d, want 1..%d", s.InnerSteps, MaxInnerSteps)
	case s.MaxRounds < 1 || s.MaxRounds > MaxRounds:
		return fmt.Errorf("spec: max_rounds is %d, want 1..%d", s.MaxRounds, MaxRounds)
	case s.GraceWindowMs < 0 || s.GraceWindowMs > MaxGraceMillis:
		return fmt.Errorf("spec: grace_window_ms is %d, want 0..%d", s.GraceWindowMs, MaxGraceMillis)
	case s.RoundDeadlineMs < 0:
		return fmt.Errorf("spec: round_deadline_ms is %d, want ≥ 0", s.RoundDeadlineMs)
	case s.EnrollWindowMs < 0 || s.EnrollWindowMs > MaxEnrollWindowMs:
		return fmt.Errorf("spec: enroll_window_ms is %d, want 0 (default 7 days)..%d", s.EnrollWindowMs, MaxEnrollWindowMs)
	case s.ShardCount < 0:
		return fmt.Errorf("spec: shard_count is %d, want ≥ 0", s.ShardCount)
	case s.ShardSplit != nil && *s.ShardSplit != ShardSplitSeries:
		return fmt.Errorf("spec: shard_split is %q, want absent (contiguous blocks) or %q", trunc(*s.ShardSplit), ShardSplitSeries)
	case s.Split() == ShardSplitSeries && strings.HasPrefix(s.DatasetRef, "synth://"):
		return fmt.Errorf("spec: shard_split %q needs a corpus of series; a synth:// corpus interleaves its unbounded window stream", ShardSplitSeries)
	}
	if s.Tier != TierOpen && s.Tier != TierVerified && s.Tier != TierConfidential {
		return fmt.Errorf("spec: tier %q unknown (want %s, %s or %s)", s.Tier, TierOpen, TierVerified, TierConfidential)
	}
	if rp, err := ParseAmount(s.RewardPool); err != nil {
		return fmt.Errorf("spec: reward_pool: %w", err)
	} else if rp.Sign() == 0 {
		return fmt.Errorf("spec: reward_pool is \"0\": a run must escrow a positive reward (it is what pays the trainers and makes posting cost something)")
	}
	if s.MinStake != "" {
		if _, err := ParseAmount(s.MinStake); err != nil {
			return fmt.Errorf("spec: min_stake: %w", err)
		}
	}
	if _, err := ParseDIDLike(s.SponsorDID); err != nil {
		return fmt.Errorf("spec: sponsor_did: %w", err)
	}
	if o := s.OuterOptimizer; o != nil {
		if !(o.LR > 0) || o.LR > 100 || o.Momentum < 0 || o.Momentum >= 1 {
			return fmt.Errorf("spec: outer_optimizer: lr must be in (0,100] and momentum in [0,1), got lr=%v momentum=%v", o.LR, o.Momentum)
		}
	}
	if sl := s.Slashing; sl != nil {
		for name, v := range map[string]int{"missed_round_bps": sl.MissedRoundBps, "eviction_bps": sl.EvictionBps, "equivocation_bps": sl.EquivocationBps} {
			if v < 0 || v > 10000 {
				return fmt.Errorf("spec: slashing.%s is %d, want 0..10000 basis points of the stake", name, v)
			}
		}
		if sl.MaxMissedRounds < 1 {
			return fmt.Errorf("spec: slashing.max_missed_rounds is %d, want ≥ 1", sl.MaxMissedRounds)
		}
	}
	if c := s.Copies; c != nil {
		if p := c.MinCosinePpm; p != nil && (*p < 500_000 || *p > CopyRuleOff) {
			return fmt.Errorf("spec: copies.min_cosine_ppm is %d, want 500000..%d (%d turns the rule off)", *p, CopyRuleOff, CopyRuleOff)
		}
		if b := c.SlashBps; b != nil && (*b < 0 || *b > 10000) {
			return fmt.Errorf("spec: copies.slash_bps is %d, want 0..10000 basis points of the stake", *b)
		}
		if d := c.SketchDim; d != nil && *d != 0 && (*d < MinSketchDim || *d > MaxSketchDim || *d&(*d-1) != 0) {
			return fmt.Errorf("spec: copies.sketch_dim is %d, want 0 (off) or a power of two %d..%d", *d, MinSketchDim, MaxSketchDim)
		}
		if c.SketchDim != nil && *c.SketchDim != 0 && c.MinCosinePpm != nil && *c.MinCosinePpm >= CopyRuleOff {
			return errors.New("spec: copies.sketch_dim needs the copy rule on (min_cosine_ppm below 1000001)")
		}
	}
	if _, err := s.CompressionRef(); err != nil {
		return err
	}
	sc, err := s.ScoringRef()
	if err != nil {
		return err
	}
	if sc != nil {
		if err := CheckEvaluatorFamily(sc.Evaluator, s.Architecture.Family); err != nil {
			return err
		}
	}
	if err := s.validateHolders(sc != nil); err != nil {
		return err
	}
	if _, err := s.SyncStrategyRef(); err != nil {
		return err
	}
	if err := s.ValidateChallenges(); err != nil {
		return err
	}
	if len(s.Verification) > 16 {
		return fmt.Errorf("spec: verification lists %d verifiers, limit 16", len(s.Verification))
	}
	return nil
}

// Effective accessors apply the documented defaults.

// Outer returns the outer optimizer with defaults (lr 0.7, momentum 0.9, nesterov).
func (s *TaskSpec) Outer() OuterOptimizer {
	if s.OuterOptimizer != nil {
		return *s.OuterOptimizer
	}
	return OuterOptimizer{LR: 0.7, Momentum: 0.9, Nesterov: true}
}

// Slash returns the slashing rule with defaults.
func (s *TaskSpec) Slash() Slashing {
	if s.Slashing != nil {
		return *s.Slashing
	}
	return DefaultSlashing
}

// Shards returns the number of data shards (default M).
func (s *TaskSpec) Shards() int {
	if s.ShardCount > 0 {
		return s.ShardCount
	}
	return s.TrainerCount
}

// Split returns the shard split: "" (contiguous blocks, the default) or
// ShardSplitSeries.
func (s *TaskSpec) Split() string {
	if s.ShardSplit == nil {
		return ""
	}
	return *s.ShardSplit
}

// Holders returns how many distinct trainers each shard is dealt to: 1
// (the default) or ShardHoldersPaired.
func (s *TaskSpec) Holders() int {
	if s.ShardHolders == nil {
		return 1
	}
	return *s.ShardHolders
}

// validateHolders checks shard_holders (scoring.md §3.1): absent, or 2 in
// a scored run of M ≥ 3 trainers and S ≥ 3 shards over a finite corpus.
func (s *TaskSpec) validateHolders(scored bool) error {
	if s.ShardHolders == nil {
		return nil
	}
	h := *s.ShardHolders
	switch {
	case h != ShardHoldersPaired:
		return fmt.Errorf("spec: shard_holders is %d, want absent (one trainer per shard) or %d", h, ShardHoldersPaired)
	case s.TrainerCount < 3:
		return fmt.Errorf("spec: shard_holders %d needs trainer_count (M) ≥ 3, got %d: a shard's holders are distinct trainers, and with two every trainer would hold every shard, leaving no control batch to score against", h, s.TrainerCount)
	case s.Shards() < 3:
		return fmt.Errorf("spec: shard_holders %d needs at least 3 shards, got shard_count %d: a trainer holds two, and the control batch needs one it does not hold", h, s.Shards())
	case strings.HasPrefix(s.DatasetRef, "synth://"):
		return fmt.Errorf("spec: shard_holders %d needs a finite corpus: a synth:// corpus gives every window of a shard once, in a fixed order, so two holders would train the same windows and be named copies", h)
	case !scored:
		return fmt.Errorf("spec: shard_holders %d needs scoring: a second holder exists so that a scored trainer's shard is also trained by another (scoring.md §3.1); unscored it only doubles the work", h)
	}
	return nil
}

// RoundDeadline returns the round deadline in ms (default 600000).
func (s *TaskSpec) RoundDeadline() int64 {
	if s.RoundDeadlineMs > 0 {
		return s.RoundDeadlineMs
	}
	return 600_000
}

// AggregationRef returns the aggregation rule reference (default "Mean").
func (s *TaskSpec) AggregationRef() string {
	if s.Aggregation == "" {
		return "Mean"
	}
	return s.Aggregation
}

// ParseAmount parses a non-negative decimal integer amount of attoTNZO.
func ParseAmount(v string) (*big.Int, error) {
	if v == "" {
		return nil, fmt.Errorf("amount is empty (want a decimal string of attoTNZO)")
	}
	if len(v) > 78 {
		return nil, fmt.Errorf("amount %q: more than 78 digits", trunc(v))
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return nil, fmt.Errorf("amount %q: want a decimal string of digits only", trunc(v))
		}
	}
	if len(v) > 1 && v[0] == '0' {
		return nil, fmt.Errorf("amount %q: leading zero", trunc(v))
	}
	n, _ := new(big.Int).SetString(v, 10)
	return n, nil
}

// ParseDIDLike checks the shape of a DID without importing the did package's
// key logic (the full check is did.Parse).
func ParseDIDLike(s string) (string, error) {
	if len(s) < 12 || s[:11] != "did:tenzro:" {
		return "", fmt.Errorf("%q is not a did:tenzro DID", trunc(s))
	}
	return s, nil
}

// exactNames checks that every member of the JSON object raw is exactly the
// JSON name of a field of struct type t, recursing into struct-typed fields
// (free-form members such as metadata are json.RawMessage and not entered).
func exactNames(raw []byte, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return nil // null or not an object: the decoder already judged it
	}
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.IsExported() && name != "" && name != "-" {
			fields[name] = f.Type
		}
	}
	for name, v := range members {
		ft, ok := fields[name]
		if !ok {
			return fmt.Errorf("unknown field %q (member names are exact-case)", path+name)
		}
		if ft != reflect.TypeOf(json.RawMessage(nil)) {
			if err := exactNames(v, ft, path+name+"."); err != nil {
				return err
			}
		}
	}
	return nil
}
