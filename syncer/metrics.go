package syncer

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/tenzro/train/wire"
)

// Trainers' reported metrics (the signed, optional metrics map of their
// submissions) are kept per run, round and trainer in KSMeta for the
// dashboard. They are information, not state: no commit, receipt or reward
// depends on them, and a trainer's later submission in the same round
// replaces its earlier report.

func metricsPrefix(task string) []byte { return []byte("lm/" + task + "/") }

func metricsKey(task string, round uint64, trainer string) []byte {
	return append(binary.BigEndian.AppendUint64(metricsPrefix(task), round), trainer...)
}

// stageMetrics adds an accepted submission's metrics to its batch.
func stageMetrics(b *Batch, g *wire.OuterGradient) {
	if len(g.Metrics) == 0 {
		return
	}
	raw, _ := json.Marshal(wire.MetricsReport{Round: g.Round, TrainerDID: g.TrainerDID, Metrics: g.Metrics})
	b.Set(KSMeta, metricsKey(g.TaskID, g.Round, g.TrainerDID), raw)
}

// ReportedMetrics returns what the run's trainers reported with their
// accepted submissions, in round then trainer order.
func (n *Node) ReportedMetrics(ctx context.Context, task string) ([]wire.MetricsReport, error) {
	if _, err := n.load(ctx, task); err != nil {
		return nil, err
	}
	out := []wire.MetricsReport{}
	err := n.kv.Scan(ctx, KSMeta, metricsPrefix(task), func(_, v []byte) error {
		var m wire.MetricsReport
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("stored metrics of %s: %w", task, err)
		}
		out = append(out, m)
		return nil
	})
	return out, err
}
