package wire

import (
	"strings"
	"testing"
)

func TestParseScoring(t *testing.T) {
	h := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		in, eval, params string
		rate, batch      int
		err              string
	}{
		{`{"evaluator":"TimesFMScore"}`, "TimesFMScore", `{}`, 10000, DefaultScoringBatch, ""},
		{`{"evaluator":"TimesFMScore","params":{"n_layers":2,"d_model":64.0},"rate_bps":2500,"batch":16}`, "TimesFMScore", `{"d_model":64,"n_layers":2}`, 2500, 16, ""},
		{`{"batch":1,"evaluator":"` + h + `","params":null}`, h, `{}`, 10000, 1, ""},
		{`{"evaluator":"none"}`, "", "", 0, 0, ""},
		{`{"evaluator":"none","rate_bps":5}`, "", "", 0, 0, `evaluator "none" takes no other keys`},
		{`{"rate_bps":100}`, "", "", 0, 0, `"evaluator" is required`},
		{`{"evaluator":"timesfm"}`, "", "", 0, 0, "want a score plugin id"},
		{`{"evaluator":7}`, "", "", 0, 0, "want an object such as"},
		{`{"evaluator":"TimesFMScore","rate_bps":0}`, "", "", 0, 0, "rate_bps is 0, want 1..10000"},
		{`{"evaluator":"TimesFMScore","rate_bps":10001}`, "", "", 0, 0, "rate_bps is 10001"},
		{`{"evaluator":"TimesFMScore","rate_bps":0.5}`, "", "", 0, 0, "want an object such as"},
		{`{"evaluator":"TimesFMScore","batch":4097}`, "", "", 0, 0, "batch is 4097, want 1..4096"},
		{`{"evaluator":"TimesFMScore","extra":1}`, "", "", 0, 0, `unknown field "extra"`},
		{`{"evaluator":"TimesFMScore","evaluator":"X"}`, "", "", 0, 0, "duplicate member"},
		{`{"evaluator":"TimesFMScore","params":{"D":1}}`, "", "", 0, 0, `parameter "D"`},
		{`{"evaluator":"TimesFMScore","params":{"d":"1"}}`, "", "", 0, 0, "parameter d: want a number"},
		{`{"evaluator":"TimesFMScore","params":[1]}`, "", "", 0, 0, "want an object of numbers"},
		{`{"evaluator":"TimesFMScore","batch":9007199254740993}`, "", "", 0, 0, "batch"},
		{`{"evaluator":"TimesFMScore"} {}`, "", "", 0, 0, "trailing data"},
		{`["TimesFMScore"]`, "", "", 0, 0, "want an object such as"},
		{`{"evaluator":"TimesFMScore","params":{` + strings.Repeat(`"a":1,`, 0) + manyParams(17) + `}}`, "", "", 0, 0, "17 parameters, limit 16"},
	} {
		c, err := ParseScoring([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if tc.eval == "" {
			if c != nil {
				t.Errorf("%s: got %+v, want none", tc.in, c)
			}
			continue
		}
		if c.Evaluator != tc.eval || string(c.Params) != tc.params || c.RateBps != tc.rate || c.Batch != tc.batch {
			t.Errorf("%s: got %+v (params %s)", tc.in, c, c.Params)
		}
	}
}

func manyParams(n int) string {
	var parts []string
	for i := 0; i < n; i++ {
		parts = append(parts, `"p`+string(rune('a'+i))+`":1`)
	}
	return strings.Join(parts, ",")
}

func TestSpecScoringValidated(t *testing.T) {
	s := TaskSpec{Scoring: []byte(`{"evaluator":"TimesFMScore","rate_bps":-1}`)}
	if _, err := s.ScoringRef(); err == nil || !strings.Contains(err.Error(), "spec: scoring: rate_bps") {
		t.Fatalf("err = %v", err)
	}
	s.Scoring = nil
	if c, err := s.ScoringRef(); c != nil || err != nil {
		t.Fatalf("absent field: %v %v", c, err)
	}
}

func FuzzParseScoring(f *testing.F) {
	f.Add([]byte(`{"evaluator":"TimesFMScore","params":{"d_model":64},"rate_bps":2500,"batch":16}`))
	f.Add([]byte(`{"evaluator":"none"}`))
	f.Add([]byte(`{"evaluator":"TimesFMScore","test":"run_mean_gain","min_gain_ppm":150000}`))
	f.Add([]byte(`{"evaluator":"TimesFMScore","batch":1,"rate_bps":100,"fuel":200000000000}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseScoring(b)
		if err != nil || c == nil {
			return
		}
		if c.RateBps < 1 || c.RateBps > 10000 || c.Batch < 1 || c.Batch > MaxScoringBatch || !evaluatorRe.MatchString(c.Evaluator) {
			t.Fatalf("accepted %+v", c)
		}
		if c.Test == ScoreTestRunMeanGain && c.MinGainPPM == 0 && !strings.Contains(string(b), "min_gain_ppm") {
			t.Fatalf("run_mean_gain without its default threshold: %+v", c) // 0 only when given
		}
		if c.MinGainPPM < 0 || c.MinGainPPM > MaxMinGainPPM || (c.Test != ScoreTestRunMeanGain && c.MinGainPPM != 0) {
			t.Fatalf("threshold %d under test %s", c.MinGainPPM, c.Test)
		}
		if c.Fuel != 0 && (c.Fuel < MinScoringFuel || c.Fuel > MaxScoringFuel) {
			t.Fatalf("fuel %d accepted", c.Fuel)
		}
		if _, err := ParseScoring([]byte(`{"evaluator":"X","params":` + string(c.Params) + `}`)); err != nil {
			t.Fatalf("canonical params %s do not parse again: %v", c.Params, err)
		}
	})
}

// TestParseScoringCorpusAndTest: the corpus hash and the pay test.
func TestParseScoringCorpusAndTest(t *testing.T) {
	h := strings.Repeat("ab", 32)
	c, err := ParseScoring([]byte(`{"evaluator":"TimesFMScore","corpus":"` + h + `","test":"own_improves"}`))
	if err != nil || c.Corpus.String() != h || c.Test != ScoreTestOwnImproves {
		t.Fatalf("%+v %v", c, err)
	}
	if c, err := ParseScoring([]byte(`{"evaluator":"TimesFMScore","test":"own_gains_relative"}`)); err != nil || c.Test != ScoreTestOwnGainsRelative {
		t.Fatalf("relative: %+v %v", c, err)
	}
	if c, err := ParseScoring([]byte(`{"evaluator":"TimesFMScore"}`)); err != nil || !c.Corpus.IsZero() || c.Test != ScoreTestOwnImproves || c.Forfeit != DefaultScoringForfeit {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for in, want := range map[string]string{
		`{"evaluator":"TimesFMScore","corpus":"` + strings.Repeat("0", 64) + `"}`: "content hash",
		`{"evaluator":"TimesFMScore","corpus":"abc"}`:                             "content hash",
		`{"evaluator":"TimesFMScore","corpus":1}`:                                 "want an object",
		`{"evaluator":"TimesFMScore","test":"own"}`:                               "want own_improves (default), own_beats_control, own_gains_relative or run_mean_gain",
		`{"evaluator":"none","test":"own_improves"}`:                              "takes no other keys",
		`{"evaluator":"none","forfeit":3}`:                                        "takes no other keys",
		`{"evaluator":"TimesFMScore","forfeit":0}`:                                "forfeit is 0",
		`{"evaluator":"TimesFMScore","forfeit":101}`:                              "forfeit is 101",
		`{"evaluator":"none","corpus":"` + h + `"}`:                               "takes no other keys",
	} {
		if _, err := ParseScoring([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}

// TestParseScoringRunMeanGain: run_mean_gain takes min_gain_ppm (default
// 100000, 0..1000000), no other test does, and it takes no forfeit.
func TestParseScoringRunMeanGain(t *testing.T) {
	for _, tc := range []struct {
		in   string
		min  int64
		want string // error substring; "" = ok
	}{
		{`{"evaluator":"TimesFMScore","test":"run_mean_gain"}`, DefaultMinGainPPM, ""},
		{`{"evaluator":"TimesFMScore","test":"run_mean_gain","min_gain_ppm":0}`, 0, ""},
		{`{"evaluator":"TimesFMScore","test":"run_mean_gain","min_gain_ppm":250000}`, 250000, ""},
		{`{"evaluator":"TimesFMScore","min_gain_ppm":250000,"test":"run_mean_gain"}`, 250000, ""},
		{`{"evaluator":"TimesFMScore","test":"run_mean_gain","min_gain_ppm":1000000}`, MaxMinGainPPM, ""},
		{`{"evaluator":"TimesFMScore","test":"run_mean_gain","min_gain_ppm":1000001}`, 0, "min_gain_ppm is 1000001, want 0..1000000"},
		{`{"evaluator":"TimesFMScore","test":"run_mean_gain","min_gain_ppm":-1}`, 0, "min_gain_ppm is -1"},
		{`{"evaluator":"TimesFMScore","test":"run_mean_gain","min_gain_ppm":0.5}`, 0, "min_gain_ppm of type int64"},
		{`{"evaluator":"TimesFMScore","test":"run_mean_gain","min_gain_ppm":"1"}`, 0, "want an object"},
		{`{"evaluator":"TimesFMScore","min_gain_ppm":100000}`, 0, "min_gain_ppm is the threshold of test run_mean_gain; test is own_improves"},
		{`{"evaluator":"TimesFMScore","test":"own_beats_control","min_gain_ppm":1}`, 0, "test is own_beats_control"},
		{`{"evaluator":"TimesFMScore","test":"run_mean_gain","forfeit":3}`, 0, "forfeit does not apply to test run_mean_gain"},
		{`{"evaluator":"none","min_gain_ppm":1}`, 0, "takes no other keys"},
	} {
		c, err := ParseScoring([]byte(tc.in))
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
			}
			continue
		}
		if err != nil || c.Test != ScoreTestRunMeanGain || c.MinGainPPM != tc.min {
			t.Errorf("%s: %+v %v, want min %d", tc.in, c, err, tc.min)
		}
	}
	// Other tests carry no threshold.
	if c, err := ParseScoring([]byte(`{"evaluator":"TimesFMScore"}`)); err != nil || c.MinGainPPM != 0 {
		t.Fatalf("default test: %+v %v", c, err)
	}
}

// TestParseScoringFuel: the score calls' fuel budget — absent means the
// engine's (0), bounds MinScoringFuel..MaxScoringFuel, an exact integer.
func TestParseScoringFuel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		fuel uint64
		want string // error substring; "" = ok
	}{
		{`{"evaluator":"TimesFMScore"}`, 0, ""},
		{`{"evaluator":"TimesFMScore","fuel":1000000}`, MinScoringFuel, ""},
		{`{"evaluator":"TimesFMScore","fuel":1500000000000}`, 1_500_000_000_000, ""},
		{`{"evaluator":"TimesFMScore","fuel":10000000000000}`, MaxScoringFuel, ""},
		{`{"evaluator":"TimesFMScore","fuel":999999}`, 0, "fuel is 999999, want 1000000..10000000000000"},
		{`{"evaluator":"TimesFMScore","fuel":10000000000001}`, 0, "fuel is 10000000000001, want"},
		{`{"evaluator":"TimesFMScore","fuel":0}`, 0, "fuel is 0"},
		{`{"evaluator":"TimesFMScore","fuel":-5}`, 0, "fuel is -5"},
		{`{"evaluator":"TimesFMScore","fuel":1e12}`, 0, "want an object such as"},
		{`{"evaluator":"TimesFMScore","fuel":1000000.5}`, 0, "want an object such as"},
		{`{"evaluator":"TimesFMScore","fuel":"1000000"}`, 0, "want an object such as"},
		{`{"evaluator":"TimesFMScore","fuel":null}`, 0, ""},
		{`{"evaluator":"TimesFMScore","fuel":1000000,"fuel":2000000}`, 0, "duplicate member"},
		{`{"evaluator":"TimesFMScore","fuel":9007199254740993}`, 0, "fuel"},
		{`{"evaluator":"none","fuel":1000000}`, 0, "takes no other keys"},
	} {
		c, err := ParseScoring([]byte(tc.in))
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
			}
			continue
		}
		if err != nil || c.Fuel != tc.fuel {
			t.Errorf("%s: %+v %v, want fuel %d", tc.in, c, err, tc.fuel)
		}
	}
}

// TestSpecHashWithoutScoringFuel pins the hash of a scored spec without
// "fuel": the field is optional, so every spec posted before it hashes as
// it did; with it the hash changes (the spec commits to the budget).
func TestSpecHashWithoutScoringFuel(t *testing.T) {
	const spec = `{"task_id":"t","scoring":{"evaluator":"TimesFMScore","batch":8,"rate_bps":2500}}`
	s, canon, err := ParseSpec([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if sc, err := s.ScoringRef(); err != nil || sc.Fuel != 0 {
		t.Fatalf("scoring %+v %v", sc, err)
	}
	const pinned = "b429d27b341273c445b68444c89d1348145c7fc65bc3bba9a6545e477c8e7a2b"
	if got := SpecHash(canon).String(); got != pinned {
		t.Errorf("spec hash without fuel %s, pinned %s", got, pinned)
	}
	s, withFuel, err := ParseSpec([]byte(strings.Replace(spec, `"batch":8`, `"batch":8,"fuel":200000000000`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if sc, err := s.ScoringRef(); err != nil || sc.Fuel != 200_000_000_000 {
		t.Fatalf("scoring %+v %v", sc, err)
	}
	if SpecHash(withFuel) == SpecHash(canon) {
		t.Error("the spec hash ignores scoring.fuel")
	}
}
