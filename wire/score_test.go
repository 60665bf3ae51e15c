package wire_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/tenzro/train/wire"
)

// Vectors of docs/protocol/scoring.md §7.
const (
	// vecScoredResultHash is FragmentResultHash of vecCommit scored:
	// did:a scored (losses 0.5, 0.25, 0.5, 0.375: s_own 0.25 > s_ctl
	// 0.125, pass), did:b's evaluator failed, did:c rejected (no score).
	vecScoredResultHash = "a6d13bfdfbfeaaf057579053dfa193f37af64471b08f642e7b523392cd5f6690"
	// vecScoreSeed is ScoreSeed(SHA-256("block"), 17, "run-1", 2, 1).
	vecScoreSeed = "c939eca85873d8b7e7b6fc83704be403211e7bcc3f553e4001824057877d21a5"
)

func scoredCommit() *wire.FragmentCommit {
	c := vecCommit()
	c.Scoring = &wire.CommitScoring{Evaluator: "TimesFMScore", Hash: wire.SHA256([]byte("evaluator")), Params: json.RawMessage(`{}`), RateBps: 10000, Batch: 8,
		Seed: wire.SHA256([]byte("seed"))}
	c.Inputs[0].Score = &wire.InputScore{OwnBefore: wire.F64Of(0.5), OwnAfter: wire.F64Of(0.25), CtlBefore: wire.F64Of(0.5), CtlAfter: wire.F64Of(0.375), Pass: true}
	c.Inputs[1].Score = &wire.InputScore{Failed: "out of fuel"}
	return c
}

func TestFragmentResultHashScores(t *testing.T) {
	if got := wire.FragmentResultHash(vecCommit()).String(); got != vecResultHash {
		t.Fatalf("an unscored commit changed its hash: %s", got)
	}
	c := scoredCommit()
	res := wire.FragmentResultHash(c)
	if res.String() != vecScoredResultHash {
		t.Errorf("FragmentResultHash of the scored commit = %s, want %s", res, vecScoredResultHash)
	}
	// The chain fixes the header and the failure's text: not hashed.
	c2 := scoredCommit()
	c2.Scoring.Seed, c2.Scoring.Evaluator, c2.Inputs[1].Score.Failed = wire.Hash{}, "X", "another reason"
	if wire.FragmentResultHash(c2) != res {
		t.Error("FragmentResultHash depends on a scoring field that re-execution does not compute")
	}
	for i, mut := range []func(*wire.FragmentCommit){
		func(c *wire.FragmentCommit) { c.Inputs[0].Score.Pass = false },
		func(c *wire.FragmentCommit) { c.Inputs[0].Score.OwnBefore++ },
		func(c *wire.FragmentCommit) { c.Inputs[0].Score.OwnAfter++ },
		func(c *wire.FragmentCommit) { c.Inputs[0].Score.CtlBefore++ },
		func(c *wire.FragmentCommit) { c.Inputs[0].Score.CtlAfter++ },
		func(c *wire.FragmentCommit) { c.Inputs[0].Score = nil },
		func(c *wire.FragmentCommit) { c.Inputs[1].Score = nil },
		func(c *wire.FragmentCommit) { c.Inputs[2].Score = &wire.InputScore{Failed: "x"} },
		func(c *wire.FragmentCommit) { c.Scoring = nil },
	} {
		c := scoredCommit()
		mut(c)
		if wire.FragmentResultHash(c) == res {
			t.Errorf("mutation %d does not change FragmentResultHash", i)
		}
	}
}

func TestScorePasses(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		ob, oa, cb, ca float64
		want           bool
	}{
		{1, 0.5, 1, 0.9, true},    // own improves more than control
		{1, 0.5, 1, 0.5, false},   // no better than control
		{1, 1, 1, 1.5, false},     // own unchanged (a zero gradient)
		{1, 1.2, 1, 1.5, false},   // own worse, control worse still
		{1, 0.9, 1, 0.2, false},   // control improves more
		{nan, 0.5, 1, 1, false},   // NaN fails
		{1, 0.5, nan, nan, false}, // NaN control fails
		{1, math.Inf(-1), 1, 1, true},
	} {
		if got := wire.ScorePasses(tc.ob, tc.oa, tc.cb, tc.ca); got != tc.want {
			t.Errorf("%+v: %v", tc, got)
		}
	}
}

func TestScorePassesRelative(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		ob, oa, cb, ca float64
		want           bool
	}{
		{1, 0.5, 1, 0.9, true},        // 50% against 10%
		{1, 0.8, 3, 2.7, true},        // 20% against 10%: own_beats_control fails it (0.2 < 0.3)
		{2, 1.8, 1, 0.85, false},      // 10% against 15%: own_beats_control passes it (0.2 > 0.15)
		{1, 0.9, 2, 1.8, false},       // equal shares fail
		{1, 1, 1, 1.5, false},         // own unchanged (a zero gradient)
		{1, 1.2, 1, 1.5, false},       // own worse, control worse still
		{0, -1, 1, 1, false},          // own loss before not > 0
		{1, 0.5, 0, 0, false},         // control loss before not > 0
		{1, 0.5, -1, -1, false},       // negative control level
		{nan, 0.5, 1, 1, false},       // NaN fails
		{1, 0.5, nan, nan, false},     // NaN control fails
		{1, 0.5, inf, inf, false},     // Inf − Inf is NaN
		{1, math.Inf(-1), 1, 1, true}, // s_own = +Inf
	} {
		if got := wire.ScorePassesRelative(tc.ob, tc.oa, tc.cb, tc.ca); got != tc.want {
			t.Errorf("%+v: %v", tc, got)
		}
		if got := wire.ScorePassesTest(wire.ScoreTestOwnGainsRelative, tc.ob, tc.oa, tc.cb, tc.ca); got != tc.want {
			t.Errorf("ScorePassesTest %+v: %v", tc, got)
		}
	}
}

// TestGainPPM pins run_mean_gain's per-check integer from loss bits
// (scoring.md §8): truncation toward zero (not rounding, not floor), the
// clamps and NaN.
func TestGainPPM(t *testing.T) {
	for _, tc := range []struct {
		ob, oa uint64 // IEEE-754 bits
		want   int64
	}{
		{0x3ff0000000000000, 0x3fe8000000000000, 250000},      // 1 → 0.75
		{0x3fd3333333333333, 0x3fc999999999999a, 333333},      // 0.3 → 0.2: 333333.33333333326
		{0x3ff0000000000000, 0x3feccccccccccccd, 99999},       // 1 → 0.9: 99999.99999999997, truncated
		{0x3ff0000000000000, 0x3ff199999999999a, -100000},     // 1 → 1.1: −100000.00000000009, toward zero
		{0x4000000000000000, 0x4004000000000000, -250000},     // 2 → 2.5
		{0x3fe9fe5c91d14e3c, 0x3fe506f694467382, 191062},      // 0.8123 → 0.6571: 191062.41536378185
		{0x3ff0000000000000, 0x3ff0000000000000, 0},           // a zero gradient
		{0x3ff0000000000000, 0x0000000000000000, 1000000},     // to zero loss
		{0x0000000000000000, 0x0000000000000000, -1000000000}, // 0/0 is NaN: the worst
		{0x0000000000000000, 0x3ff0000000000000, -1000000000}, // −1/0 = −Inf
		{0x3ff0000000000000, 0x7ff8000000000000, -1000000000}, // NaN after the step
		{0x3ff0000000000000, 0x7ff0000000000000, -1000000000}, // +Inf after the step
		{0x3ff0000000000000, 0xc0c3880000000000, 1000000000},  // 1 → −10000: clamped
		{0x3ff0000000000000, 0x408f380000000000, -998000000},  // 1 → 999: −998 × 1e6, inside the clamp
	} {
		if got := wire.GainPPM(wire.F64(tc.ob), wire.F64(tc.oa)); got != tc.want {
			t.Errorf("GainPPM(%016x, %016x) = %d, want %d", tc.ob, tc.oa, got, tc.want)
		}
	}
}

// TestRunGainPasses: the seal's integer comparison sum ≥ min × count.
func TestRunGainPasses(t *testing.T) {
	for _, tc := range []struct {
		sum   int64
		count uint64
		min   int64
		want  bool
	}{
		{0, 0, 100000, true},               // never scored: paid as kept
		{-5000000, 0, 100000, true},        // count 0 wins whatever the sum
		{6 * 190000, 6, 100000, true},      // honest: mean 0.19
		{6 * 8000, 6, 100000, false},       // noise: mean 0.008
		{0, 6, 100000, false},              // zeros
		{600000, 6, 100000, true},          // exactly the threshold passes
		{599999, 6, 100000, false},         // one ppm short of it fails
		{-1, 1, 0, false},                  // threshold 0: a negative mean fails
		{0, 1, 0, true},                    // threshold 0: a zero mean passes
		{1 << 62, 1 << 62, 1000000, false}, // no overflow in min × count
		{1 << 62, 1 << 20, 1000000, true},
	} {
		if got := wire.RunGainPasses(tc.sum, tc.count, tc.min); got != tc.want {
			t.Errorf("RunGainPasses(%d, %d, %d) = %v, want %v", tc.sum, tc.count, tc.min, got, tc.want)
		}
	}
}

func TestF64JSON(t *testing.T) {
	for _, x := range []float64{0, math.Copysign(0, -1), 1, 0.1, math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1), math.NaN()} {
		v := wire.F64Of(x)
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var back wire.F64
		if err := json.Unmarshal(b, &back); err != nil || back != v {
			t.Fatalf("%v → %s → %x (%v)", x, b, uint64(back), err)
		}
	}
	if b, _ := json.Marshal(wire.F64Of(1)); string(b) != `"3ff0000000000000"` {
		t.Fatalf("1.0 = %s", b)
	}
	for _, bad := range []string{`"3FF0000000000000"`, `"3ff000000000000"`, `"3ff00000000000000"`, `1`, `"0x3ff0000000000000"`, `null`, `"3ff000000000000g"`} {
		var v wire.F64
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func FuzzF64JSON(f *testing.F) {
	f.Add([]byte(`"3ff0000000000000"`))
	f.Add([]byte(`"zz"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var v wire.F64
		if json.Unmarshal(b, &v) != nil {
			return
		}
		out, _ := json.Marshal(v)
		if string(out) != string(b) {
			t.Fatalf("%s re-encodes as %s", b, out)
		}
	})
}

// TestScoreSampled: rate 10000 scores everything, rate 1 almost nothing,
// rate 2500 about a quarter, and the draw is a function of its inputs.
func TestScoreSampled(t *testing.T) {
	block := wire.SHA256([]byte("block"))
	seed := wire.ScoreSeed(block[:], 17, "run-1", 2, 1)
	if seed.String() != vecScoreSeed {
		t.Errorf("ScoreSeed = %s, want %s", seed, vecScoreSeed)
	}
	if wire.ScoreSeed(nil, 17, "run-1", 2, 1) == wire.ScoreSeed(nil, 18, "run-1", 2, 1) {
		t.Error("without a block hash the seed does not depend on the height")
	}
	n, all, quarter := 4000, 0, 0
	for i := 0; i < n; i++ {
		d := "did:t:" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		if wire.ScoreSampled(seed, "run-1", 2, 1, d, 10000) {
			all++
		}
		if wire.ScoreSampled(seed, "run-1", 2, 1, d, 2500) {
			quarter++
		}
		if wire.ScoreSampled(seed, "run-1", 2, 1, d, 2500) != wire.ScoreSampled(seed, "run-1", 2, 1, d, 2500) {
			t.Fatal("the draw is not a function")
		}
	}
	if all != n || quarter < 900 || quarter > 1100 {
		t.Fatalf("rate 10000 drew %d of %d, rate 2500 drew %d", all, n, quarter)
	}
	if got := wire.ScoreSampled(seed, "run-1", 2, 1, "did:x", 5000); got != vecSampledX {
		t.Errorf("ScoreSampled(did:x, 5000) = %v", got)
	}
}

// vecSampledX is whether did:x of the seed vector is drawn at 5000 bps.
const vecSampledX = true

// TestRunGainWorkedExample is scoring.md §8.1's worked example: an honest
// trainer with one false failure is paid, noise at the honest norm and
// zeros are not (T = 100000, six checks).
func TestRunGainWorkedExample(t *testing.T) {
	for _, tc := range []struct {
		name   string
		losses [][2]float64
		sum    int64
		pass   bool
	}{
		{"honest", [][2]float64{{1, 0.8}, {1, 0.75}, {0.9, 0.6}, {1, 1.01}, {0.8, 0.6}, {0.7, 0.5}}, 1309046, true},
		{"noise", [][2]float64{{1, 0.99}, {1, 1.005}, {1, 0.99}, {1, 0.996}, {1, 1.002}, {1, 0.998}}, 19001, false},
		{"zeros", [][2]float64{{1, 1}, {0.9, 0.9}, {0.8, 0.8}, {1, 1}, {0.7, 0.7}, {0.5, 0.5}}, 0, false},
	} {
		var sum int64
		for _, l := range tc.losses {
			sum += wire.GainPPM(wire.F64Of(l[0]), wire.F64Of(l[1]))
		}
		if p := wire.RunGainPasses(sum, uint64(len(tc.losses)), wire.DefaultMinGainPPM); sum != tc.sum || p != tc.pass {
			t.Errorf("%s: sum %d (want %d), passes %v (want %v)", tc.name, sum, tc.sum, p, tc.pass)
		}
	}
}

// FuzzGainPPM: any loss bits give a value within the clamp, the same on a
// second call, and the sign of the gain when the quotient is finite.
func FuzzGainPPM(f *testing.F) {
	f.Add(uint64(0x3ff0000000000000), uint64(0x3feccccccccccccd))
	f.Add(uint64(0), uint64(0))
	f.Add(uint64(0x7ff8000000000000), uint64(0x3ff0000000000000))
	f.Fuzz(func(t *testing.T, ob, oa uint64) {
		g := wire.GainPPM(wire.F64(ob), wire.F64(oa))
		if g < -wire.MaxGainPPM || g > wire.MaxGainPPM || g != wire.GainPPM(wire.F64(ob), wire.F64(oa)) {
			t.Fatalf("GainPPM(%016x, %016x) = %d", ob, oa, g)
		}
		q := (wire.F64(ob).Float() - wire.F64(oa).Float()) / wire.F64(ob).Float()
		if !math.IsNaN(q) && ((q > 0 && g < 0) || (q < 0 && g > 0)) {
			t.Fatalf("GainPPM(%016x, %016x) = %d, quotient %v", ob, oa, g, q)
		}
	})
}
