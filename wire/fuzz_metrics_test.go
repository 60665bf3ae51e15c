package wire_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/tenzro/train/wire"
)

// FuzzSubmissionMetrics: any JSON the node decodes as a metrics map either
// fails Validate or yields a preimage that is deterministic and starts with
// the v1 preimage.
func FuzzSubmissionMetrics(f *testing.F) {
	for _, s := range []string{`{}`, `{"train_loss":1.5}`, `{"Bad":1}`, `{"a":1e308,"b":-0}`, `{"x":1,"y":2,"z":3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 {
			return
		}
		var m wire.SubmissionMetrics
		if json.Unmarshal(b, &m) != nil || m.Validate() != nil {
			return
		}
		plain := wire.SubmissionPreimage("c", "t", "d", 1, 2, wire.Hash{})
		a := wire.SubmissionPreimageWithMetrics("c", "t", "d", 1, 2, wire.Hash{}, m)
		c := wire.SubmissionPreimageWithMetrics("c", "t", "d", 1, 2, wire.Hash{}, m)
		if string(a) != string(c) || string(a[:len(plain)]) != string(plain) || (len(m) == 0) != (len(a) == len(plain)) {
			t.Fatalf("metrics %v: preimage not deterministic or not an extension", m)
		}
	})
}

func TestSubmissionMetricsValidate(t *testing.T) {
	long := ""
	for i := 0; i < 33; i++ {
		long += "a"
	}
	many := wire.SubmissionMetrics{}
	for i := 0; i < 17; i++ {
		many[string(rune('a'+i))] = 1
	}
	for _, tc := range []struct {
		name string
		m    wire.SubmissionMetrics
		ok   bool
	}{
		{"empty", nil, true},
		{"well-known", wire.SubmissionMetrics{wire.MetricTrainLoss: 1, wire.MetricEvalLoss: 2, wire.MetricSamples: 3, wire.MetricStepTimeMs: 4}, true},
		{"upper case", wire.SubmissionMetrics{"Loss": 1}, false},
		{"empty name", wire.SubmissionMetrics{"": 1}, false},
		{"long name", wire.SubmissionMetrics{long: 1}, false},
		{"too many", many, false},
		{"NaN", wire.SubmissionMetrics{"x": math.NaN()}, false},
		{"Inf", wire.SubmissionMetrics{"x": math.Inf(-1)}, false},
	} {
		if err := tc.m.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
