package wire

import (
	"fmt"
	"math"
	"sort"
)

// Limits on a submission's metrics map.
const (
	MaxMetrics      = 16
	MaxMetricKeyLen = 32
)

// Well-known metric names (any name matching [a-z0-9_]{1,32} is allowed).
const (
	MetricTrainLoss  = "train_loss"
	MetricEvalLoss   = "eval_loss"
	MetricSamples    = "samples"
	MetricStepTimeMs = "step_time_ms"
)

// SubmissionMetrics is the optional, signed map a trainer attaches to a
// submission: what it measured while computing the outer gradient (train
// and eval loss, samples seen, mean inner step time). The node checks its
// shape, never its values' meaning; the dashboard plots it. PROTOCOL §4 and
// docs/protocol/metrics.md define its place in the signature preimage.
type SubmissionMetrics map[string]float64

// Validate checks the map's size, names and values (finite).
func (m SubmissionMetrics) Validate() error {
	if len(m) > MaxMetrics {
		return fmt.Errorf("metrics: %d entries, limit %d", len(m), MaxMetrics)
	}
	for k, v := range m {
		if len(k) == 0 || len(k) > MaxMetricKeyLen {
			return fmt.Errorf("metrics: name %q: want 1..%d characters", k, MaxMetricKeyLen)
		}
		for _, c := range []byte(k) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
				return fmt.Errorf("metrics: name %q: want [a-z0-9_]", k)
			}
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("metrics: %s is %v, want a finite number", k, v)
		}
	}
	return nil
}

// appendCanon appends the metrics to a preimage: Str("metrics") ‖ U64(n) ‖
// for each name in bytewise order Str(name) ‖ U64(IEEE-754 binary64 bits).
// An empty map appends nothing, so submissions without metrics keep the v1
// preimage.
func (m SubmissionMetrics) appendCanon(c *Canon) {
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	c.Str("metrics").U64(uint64(len(keys)))
	for _, k := range keys {
		c.Str(k).U64(math.Float64bits(m[k]))
	}
}

// MetricsReport is one trainer's reported metrics for one round, as the
// node keeps them for the dashboard.
type MetricsReport struct {
	Round      uint64            `json:"round"`
	TrainerDID string            `json:"trainer_did"`
	Metrics    SubmissionMetrics `json:"metrics"`
}
