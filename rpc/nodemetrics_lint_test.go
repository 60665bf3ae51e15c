package rpc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/syncer"
)

// TestNodeMetricsLint: every node series passes Prometheus' linter
// (promtool check metrics), and the commit compute histogram has exactly
// the fixed phase labels, each observed where a commit reports it.
func TestNodeMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := rpc.NewNodeMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rpc.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	one := func() float64 { return 1 }
	if err := rpc.RegisterGauges(reg, rpc.NodeGauges{Pending: one, Peers: one, BlobBytes: one, BlobCount: one, BlobCap: one,
		BlobUploadBytes: one, ReplayRuns: one, ReplayHits: one, InputCacheHits: one, InputCacheMisses: one}); err != nil {
		t.Fatal(err)
	}
	m.FragmentCommitted("t", 0, 0, "aggregated", time.Second)
	for i, ph := range syncer.ComputePhases {
		m.CommitCompute(ph, time.Duration(i+1)*time.Millisecond)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	var sb strings.Builder
	for _, mf := range mfs {
		if mf.GetName() == "tenzro_syncer_commit_compute_seconds" {
			for _, mm := range mf.GetMetric() {
				sb.WriteString(mm.GetLabel()[0].GetValue())
				sb.WriteString(" ")
				if mm.GetHistogram().GetSampleCount() != 1 {
					t.Errorf("%s: %d samples", mm.GetLabel()[0].GetValue(), mm.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	var lookups []string
	for _, mf := range mfs {
		if mf.GetName() == "tenzro_syncer_input_cache_lookups_total" {
			for _, mm := range mf.GetMetric() {
				lookups = append(lookups, mm.GetLabel()[0].GetValue())
			}
		}
	}
	if strings.Join(lookups, " ") != "hit miss" {
		t.Errorf("input cache lookups by result: %q", lookups)
	}
	if got := sb.String(); got != "copy_stale finalize score verify write " {
		t.Fatalf("compute series by phase: %q", got)
	}
}
