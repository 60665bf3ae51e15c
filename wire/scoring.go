package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"

	"github.com/gowebpki/jcs"
)

// MaxScoringBytes bounds the spec's scoring object.
const MaxScoringBytes = 2048

// EvaluatorNone turns scoring off.
const EvaluatorNone = "none"

// Scoring defaults and bounds (docs/protocol/scoring.md §5).
const (
	// DefaultScoringRateBps scores every (trainer, round, fragment): rate 1.
	DefaultScoringRateBps = 10000
	// DefaultScoringBatch is the windows of each of the two batches: 16,
	// where 8 let one honest check in 72 fail (bench/results/freeriders*).
	DefaultScoringBatch = 16
	// DefaultScoringForfeit is k, the drawn inputs' worth a failed check
	// forfeits (scoring.md §8): 3 makes a free rider that passes a check by
	// chance with probability q < (k − 1 + p)/(k + p) (≥ 2/3 at any rate
	// p) lose in expectation; 1 only deters one that never passes.
	DefaultScoringForfeit = 3
	// MaxScoringForfeit bounds k.
	MaxScoringForfeit = 100
	// MaxScoringBatch bounds a batch (plugins.MaxScoreBatchSize).
	MaxScoringBatch = 4096
	// DefaultMinGainPPM is run_mean_gain's threshold: a mean relative own
	// gain of 0.10 over the run (scoring.md §8; honest ≥ 0.19, free riders
	// ≤ 0.06 on every recorded run, bench/results/freeriders-findings.md).
	DefaultMinGainPPM = 100000
	// MaxMinGainPPM bounds min_gain_ppm: a relative gain is at most 1
	// (the loss cannot fall below zero).
	MaxMinGainPPM = 1000000
	// MinScoringFuel and MaxScoringFuel bound `fuel`, the budget of each
	// score call of the run (absent: the engine's per-call budget). The
	// floor only refuses nonsense (no evaluator scores anything in less;
	// the "odd" test model needs 3.1·10⁶ at batch 4); the ceiling is about
	// 2 h of one core per scored input at the evaluator's measured 1.5·10⁹
	// fuel/s, which every validator may have to re-execute (scoring.md §5,
	// RATIONALE "scoring: a run's own score budget").
	MinScoringFuel = 1_000_000
	MaxScoringFuel = 10_000_000_000_000
)

// Scoring is the parsed `scoring` field of a task spec: which evaluator
// scores submissions, with which parameters, how often and on how many
// windows (docs/protocol/scoring.md §5).
type Scoring struct {
	// Evaluator is a score plugin: a built-in id ("TimesFMScore") or a
	// plugin hash ("sha256:<hex>").
	Evaluator string
	// Params is the canonical (RFC 8785) JSON object of the evaluator's
	// numeric parameters; "{}" when there are none (the plugin's schema
	// checks them and fills defaults at posting).
	Params json.RawMessage
	// RateBps is the sampling rate in basis points: the share of
	// (trainer, round, fragment) triples that are scored, 1..10000.
	RateBps int
	// Batch is the windows of the own-shard batch and of the control batch.
	Batch int
	// Corpus is the content hash (BLAKE3) of the CSV corpus the evaluator
	// draws its windows from: the training dataset's bytes, whose
	// dataset_hash the node checks at posting (scoring.md §6). Zero when
	// the field is absent (the posting is then refused).
	Corpus Hash
	// Test is the pay test a score must pass: ScoreTestOwnImproves (the
	// default), ScoreTestOwnBeatsControl (Templar's) or
	// ScoreTestOwnGainsRelative (RATIONALE "scoring: pay tests, own_improves
	// by default").
	Test string
	// Forfeit is k: a failed check takes back k × N × 10000 / rate_bps of
	// payout weight (1..MaxScoringForfeit, default DefaultScoringForfeit).
	// Not used under ScoreTestRunMeanGain (no per-check forfeit).
	Forfeit int
	// MinGainPPM is run_mean_gain's threshold in parts per million
	// (0..MaxMinGainPPM, default DefaultMinGainPPM; only with that test):
	// a trainer whose scored checks' summed GainPPM is below MinGainPPM ×
	// their count is paid nothing at the seal (RunGainPasses).
	MinGainPPM int64
	// Fuel is the fuel budget of each score call of the run
	// (MinScoringFuel..MaxScoringFuel); 0 when the field is absent: the
	// engine's per-call budget, as every other call.
	Fuel uint64
}

// The pay tests of a scored input (scoring.md §8).
const (
	// ScoreTestOwnBeatsControl: s_own > 0 and s_own > s_ctl.
	ScoreTestOwnBeatsControl = "own_beats_control"
	// ScoreTestOwnImproves: s_own > 0 (the control batch is scored and
	// recorded but not compared).
	ScoreTestOwnImproves = "own_improves"
	// ScoreTestOwnGainsRelative: s_own > 0 and s_own/own_before >
	// s_ctl/ctl_before (each batch's improvement relative to its loss
	// before the step).
	ScoreTestOwnGainsRelative = "own_gains_relative"
	// ScoreTestRunMeanGain: no per-check verdict pays or forfeits; each
	// scored check adds GainPPM to the trainer's run state and the seal pays
	// nothing to a trainer whose mean is below min_gain_ppm (RunGainPasses).
	// An input's Pass is then the own_improves verdict, recorded only.
	ScoreTestRunMeanGain = "run_mean_gain"
)

type scoringJSON struct {
	Evaluator *string         `json:"evaluator"`
	Params    json.RawMessage `json:"params"`
	RateBps   *int            `json:"rate_bps"`
	Batch     *int            `json:"batch"`
	Corpus    *string         `json:"corpus"`
	Test      *string         `json:"test"`
	Forfeit   *int            `json:"forfeit"`
	MinGain   *int64          `json:"min_gain_ppm"`
	Fuel      *int64          `json:"fuel"`
}

var (
	evaluatorRe = regexp.MustCompile(`^([A-Z][A-Za-z0-9_]{0,63}|sha256:[0-9a-f]{64})$`)
	scoreKeyRe  = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
)

// ScoringRef parses the spec's scoring field strictly. It returns nil when
// the field is absent, null, or names the evaluator "none".
func (s *TaskSpec) ScoringRef() (*Scoring, error) {
	raw := bytes.TrimSpace(s.Scoring)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	c, err := ParseScoring(raw)
	if err != nil {
		return nil, fmt.Errorf("spec: scoring: %w", err)
	}
	return c, nil
}

// ParseScoring parses {"evaluator": NAME, "params": {name: number, …},
// "rate_bps": int, "batch": int, "corpus", "test", "forfeit",
// "min_gain_ppm", "fuel": int}: no other keys, no duplicates, evaluator
// required, the rest optional (defaults: no parameters, rate 10000 bps,
// batch 16, the engine's fuel budget).
func ParseScoring(raw []byte) (*Scoring, error) {
	if len(raw) > MaxScoringBytes {
		return nil, fmt.Errorf("%d bytes, limit %d", len(raw), MaxScoringBytes)
	}
	if err := CheckStrictJSON(raw, StrictJSONOptions{ExactIntegers: true}); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var j scoringJSON
	if err := dec.Decode(&j); err != nil {
		return nil, fmt.Errorf(`want an object such as {"evaluator":"TimesFMScore","rate_bps":10000,"batch":8}: %w`, err)
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	if j.Evaluator == nil {
		return nil, errors.New(`"evaluator" is required`)
	}
	if *j.Evaluator == EvaluatorNone {
		if j.Params != nil || j.RateBps != nil || j.Batch != nil || j.Corpus != nil || j.Test != nil || j.Forfeit != nil || j.MinGain != nil || j.Fuel != nil {
			return nil, errors.New(`evaluator "none" takes no other keys`)
		}
		return nil, nil
	}
	if !evaluatorRe.MatchString(*j.Evaluator) {
		return nil, fmt.Errorf("evaluator %q: want a score plugin id (TimesFMScore), sha256:<64 hex> or none", trunc(*j.Evaluator))
	}
	c := &Scoring{Evaluator: *j.Evaluator, RateBps: DefaultScoringRateBps, Batch: DefaultScoringBatch, Test: ScoreTestOwnImproves, Forfeit: DefaultScoringForfeit}
	if j.Test != nil {
		switch *j.Test {
		case ScoreTestOwnImproves, ScoreTestOwnBeatsControl, ScoreTestOwnGainsRelative, ScoreTestRunMeanGain:
		default:
			return nil, fmt.Errorf("test %q: want %s (default), %s, %s or %s", trunc(*j.Test), ScoreTestOwnImproves, ScoreTestOwnBeatsControl,
				ScoreTestOwnGainsRelative, ScoreTestRunMeanGain)
		}
		c.Test = *j.Test
	}
	if c.Test == ScoreTestRunMeanGain {
		c.MinGainPPM = DefaultMinGainPPM
	}
	if j.Forfeit != nil && c.Test == ScoreTestRunMeanGain {
		return nil, fmt.Errorf("forfeit does not apply to test %s (no per-check forfeit; min_gain_ppm is its threshold)", ScoreTestRunMeanGain)
	}
	if j.MinGain != nil {
		switch {
		case c.Test != ScoreTestRunMeanGain:
			return nil, fmt.Errorf("min_gain_ppm is the threshold of test %s; test is %s", ScoreTestRunMeanGain, c.Test)
		case *j.MinGain < 0 || *j.MinGain > MaxMinGainPPM:
			return nil, fmt.Errorf("min_gain_ppm is %d, want 0..%d (mean relative own gain in parts per million)", *j.MinGain, MaxMinGainPPM)
		}
		c.MinGainPPM = *j.MinGain
	}
	if j.Forfeit != nil {
		if *j.Forfeit < 1 || *j.Forfeit > MaxScoringForfeit {
			return nil, fmt.Errorf("forfeit is %d, want 1..%d (drawn inputs' worth a failed check takes back)", *j.Forfeit, MaxScoringForfeit)
		}
		c.Forfeit = *j.Forfeit
	}
	if j.RateBps != nil {
		if *j.RateBps < 1 || *j.RateBps > 10000 {
			return nil, fmt.Errorf("rate_bps is %d, want 1..10000 (basis points of the triples scored)", *j.RateBps)
		}
		c.RateBps = *j.RateBps
	}
	if j.Batch != nil {
		if *j.Batch < 1 || *j.Batch > MaxScoringBatch {
			return nil, fmt.Errorf("batch is %d, want 1..%d windows", *j.Batch, MaxScoringBatch)
		}
		c.Batch = *j.Batch
	}
	if j.Fuel != nil {
		if *j.Fuel < MinScoringFuel || *j.Fuel > MaxScoringFuel {
			return nil, fmt.Errorf("fuel is %d, want %d..%d (the fuel budget of each score call)", *j.Fuel, int64(MinScoringFuel), int64(MaxScoringFuel))
		}
		c.Fuel = uint64(*j.Fuel)
	}
	if j.Corpus != nil {
		h, err := ParseHash(*j.Corpus)
		if err != nil || h.IsZero() {
			return nil, fmt.Errorf("corpus %q: want the 64-hex content hash of the corpus file", trunc(*j.Corpus))
		}
		c.Corpus = h
	}
	params, err := scoringParams(j.Params)
	if err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	c.Params = params
	return c, nil
}

// scoringParams checks an object of at most 16 numbers with lower-case
// names and returns it canonical.
func scoringParams(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return json.RawMessage(`{}`), nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, errors.New("want an object of numbers")
	}
	if len(m) > 16 {
		return nil, fmt.Errorf("%d parameters, limit 16", len(m))
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if !scoreKeyRe.MatchString(k) {
			return nil, fmt.Errorf("parameter %q: want a lower-case name", trunc(k))
		}
		var x any
		d := json.NewDecoder(bytes.NewReader(v))
		d.UseNumber()
		n, ok := x.(json.Number)
		if err := d.Decode(&x); err == nil {
			n, ok = x.(json.Number)
		}
		if !ok {
			return nil, fmt.Errorf("parameter %s: want a number", k)
		}
		if _, err := n.Float64(); err != nil {
			return nil, fmt.Errorf("parameter %s: %w", k, err)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", k, bytes.TrimSpace(m[k]))
	}
	b.WriteByte('}')
	return jcs.Transform(b.Bytes())
}
