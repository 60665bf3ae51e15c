package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
)

// Scores in fragment commits (docs/protocol/scoring.md §6–§8, issue 23
// items 2–4). A scored run's fragment commit carries the evaluator and the
// chain randomness its batches came from (CommitScoring), and every sampled
// kept input its four losses (InputScore). They enter FragmentResultHash,
// so re-executing a commit re-scores it and a wrong score is challenged
// like a wrong aggregate.

// Domains of the scoring preimages.
const (
	// DomainScoreSeed derives a fragment's scoring randomness from the
	// block at which the chain recorded it.
	DomainScoreSeed = "tenzro/train/score-seed/v1"
	// DomainScoreSample draws whether a (trainer, round, fragment) triple
	// is scored.
	DomainScoreSample = "tenzro/train/score-sample/v1"
)

// F64 is an IEEE-754 binary64 value carried exactly: in JSON, its 64 bits
// as 16 lower-case hex digits ("3ff0000000000000" is 1.0). A decimal would
// need a round-trip rule per language; the bits are the value.
type F64 uint64

// F64Of is x's bits.
func F64Of(x float64) F64 { return F64(math.Float64bits(x)) }

// Float is the value.
func (f F64) Float() float64 { return math.Float64frombits(uint64(f)) }

var f64Re = regexp.MustCompile(`^"[0-9a-f]{16}"$`)

// MarshalJSON writes the 16 hex digits.
func (f F64) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf(`"%016x"`, uint64(f))), nil
}

// UnmarshalJSON reads exactly 16 lower-case hex digits.
func (f *F64) UnmarshalJSON(b []byte) error {
	if !f64Re.Match(b) {
		return fmt.Errorf("f64: want a string of 16 lower-case hex digits (the IEEE-754 bits), got %s", trunc(string(b)))
	}
	v, err := strconv.ParseUint(string(b[1:17]), 16, 64)
	if err != nil {
		return fmt.Errorf("f64: %w", err)
	}
	*f = F64(v)
	return nil
}

// CommitScoring is a scored run's scoring header in a fragment commit: the
// evaluator (name, module hash, canonical parameters), the sampling rate
// and batch size of the spec, and the fragment's scoring seed (the chain's
// randomness, RunFragment.ScoreSeed). All of it is fixed by the chain (the
// commit is refused otherwise), so only the inputs' scores are computed.
type CommitScoring struct {
	Evaluator string          `json:"evaluator"`
	Hash      Hash            `json:"hash"`
	Params    json.RawMessage `json:"params"`
	RateBps   int             `json:"rate_bps"`
	Batch     int             `json:"batch"`
	Seed      Hash            `json:"seed"`
	// Test is the spec's pay test when it is not the default
	// own_improves (omitted then).
	Test string `json:"test,omitempty"`
}

// InputScore is one sampled kept input's score: the loss of the model at
// the round's start weights (before) and after the input is applied as the
// outer step would (after), on the trainer's own-shard batch and on the
// control batch. Pass is the pay rule's verdict, s_own = own_before −
// own_after > 0 and s_own > s_ctl = ctl_before − ctl_after (IEEE f64, NaN
// fails). Failed, when set, says why the evaluator could not score the
// input (a deterministic failure of the run's evaluator, not of the input:
// the losses are then zero and the input is neither paid nor penalized).
type InputScore struct {
	OwnBefore F64    `json:"own_before"`
	OwnAfter  F64    `json:"own_after"`
	CtlBefore F64    `json:"ctl_before"`
	CtlAfter  F64    `json:"ctl_after"`
	Pass      bool   `json:"pass"`
	Failed    string `json:"failed,omitempty"`
}

// OwnDelta is s_own = own_before − own_after.
func (s *InputScore) OwnDelta() float64 { return s.OwnBefore.Float() - s.OwnAfter.Float() }

// CtlDelta is s_ctl = ctl_before − ctl_after.
func (s *InputScore) CtlDelta() float64 { return s.CtlBefore.Float() - s.CtlAfter.Float() }

// ScorePassesTest is the pay rule of test (ScoreTestOwnBeatsControl:
// ScorePasses; ScoreTestOwnGainsRelative: ScorePassesRelative; anything
// else, the default own_improves: s_own > 0, NaN fails).
func ScorePassesTest(test string, ownBefore, ownAfter, ctlBefore, ctlAfter float64) bool {
	switch test {
	case ScoreTestOwnBeatsControl:
		return ScorePasses(ownBefore, ownAfter, ctlBefore, ctlAfter)
	case ScoreTestOwnGainsRelative:
		return ScorePassesRelative(ownBefore, ownAfter, ctlBefore, ctlAfter)
	}
	return ownBefore-ownAfter > 0
}

// ScorePassesRelative is the relative pay rule: the own-shard loss falls
// (s_own > 0) and by a larger share of its level than the control's,
// s_own/own_before > s_ctl/ctl_before. Both losses before must be > 0
// (a mean squared error is; anything else fails, as does NaN). Two IEEE
// f64 subtractions, two divisions and a comparison: correctly rounded,
// so every machine computes the same verdict (no fused multiply-add can
// apply).
func ScorePassesRelative(ownBefore, ownAfter, ctlBefore, ctlAfter float64) bool {
	own, ctl := ownBefore-ownAfter, ctlBefore-ctlAfter
	if !(own > 0) || !(ownBefore > 0) || !(ctlBefore > 0) {
		return false
	}
	ro, rc := own/ownBefore, ctl/ctlBefore
	return ro > rc
}

// MaxGainPPM bounds GainPPM's magnitude: ±1e9 ppm, a relative gain of
// ±1000.
const MaxGainPPM = 1_000_000_000

// GainPPM is a scored check's relative own gain under test run_mean_gain
// (scoring.md §8): q = (own_before − own_after) / own_before, computed in
// IEEE binary64 from the recorded loss bits, then v = q × 1e6, truncated
// toward zero to an integer and clamped to ±MaxGainPPM; a NaN q (0/0, or a
// NaN loss) is −MaxGainPPM, the worst gain, as is −Inf (own_before = 0
// and own_after > 0). One subtraction, one division and one
// multiplication, each correctly rounded by IEEE 754; each result is
// converted explicitly (which the Go spec says rounds and forbids fusing),
// and none of them is a multiply followed by an add, so no fused
// multiply-add can apply on any machine or language: the integer is the
// same everywhere.
func GainPPM(ownBefore, ownAfter F64) int64 {
	ob, oa := ownBefore.Float(), ownAfter.Float()
	q := float64(float64(ob-oa) / ob)
	v := float64(q * 1e6)
	switch {
	case v != v:
		return -MaxGainPPM
	case v >= MaxGainPPM:
		return MaxGainPPM
	case v <= -MaxGainPPM:
		return -MaxGainPPM
	}
	return int64(v) // Go's float-to-integer conversion truncates toward zero
}

// RunGainPasses is run_mean_gain's verdict at the seal on a trainer's
// scored checks: count of them, summing sumPPM of GainPPM. A trainer never
// scored (count 0) passes (it is paid as kept, as at any sampling rate);
// otherwise it passes iff sumPPM ≥ minPPM × count, compared exactly as
// integers (no mean is divided out, so nothing is rounded).
func RunGainPasses(sumPPM int64, count uint64, minPPM int64) bool {
	if count == 0 {
		return true
	}
	want := new(big.Int).Mul(big.NewInt(minPPM), new(big.Int).SetUint64(count))
	return big.NewInt(sumPPM).Cmp(want) >= 0
}

// ScorePasses is the pay rule on a score's losses: the own-shard loss
// falls (s_own > 0) and by more than the control's (s_own > s_ctl). NaN
// anywhere fails.
func ScorePasses(ownBefore, ownAfter, ctlBefore, ctlAfter float64) bool {
	own, ctl := ownBefore-ownAfter, ctlBefore-ctlAfter
	return own > 0 && own > ctl
}

// ScoreSeed is the scoring randomness of fragment f of round of task,
// recorded at the first block (height, hash) at which the fragment is due:
// SHA-256(Str(DomainScoreSeed) ‖ Bytes(block hash) ‖ U64(height) ‖
// Str(task) ‖ U64(round) ‖ U64(fragment)). An empty block hash (a chain
// that gives none) still yields a value fixed by the height.
func ScoreSeed(blockHash []byte, height int64, task string, round, fragment uint64) Hash {
	return NewCanon(DomainScoreSeed).Bytes(blockHash).U64(uint64(height)).Str(task).U64(round).U64(fragment).Sum()
}

// ScoreSampled says whether trainer's input of (task, round, fragment) is
// scored at rateBps: u = the first 8 bytes (big-endian) of
// SHA-256(Str(DomainScoreSample) ‖ Hash(seed) ‖ Str(task) ‖ U64(round) ‖
// U64(fragment) ‖ Str(trainer)), scored iff u mod 10000 < rateBps. (The
// modulo bias, 2^64 mod 10^4 over 2^64, is below 10^-15.)
func ScoreSampled(seed Hash, task string, round, fragment uint64, trainer string, rateBps int) bool {
	if rateBps >= 10000 {
		return true
	}
	h := NewCanon(DomainScoreSample).Hash(seed).Str(task).U64(round).U64(fragment).Str(trainer).Sum()
	u := uint64(h[0])<<56 | uint64(h[1])<<48 | uint64(h[2])<<40 | uint64(h[3])<<32 | uint64(h[4])<<24 | uint64(h[5])<<16 | uint64(h[6])<<8 | uint64(h[7])
	return int(u%10000) < rateBps
}
