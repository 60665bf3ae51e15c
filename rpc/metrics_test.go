package rpc_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/wire"
)

func TestMetricsCountCallsByMethodAndCode(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := rpc.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, rpc.Options{Observer: m})
	h.post(t, call(wire.MethodGetRun, `{"task_id":"t1"}`))
	h.post(t, call(wire.MethodGetRun, `{"task_id":"missing"}`))
	h.post(t, call(wire.MethodGetRun, `{"task_id":"missing"}`))
	h.post(t, call("no_such_method", `{}`)) // unknown names are not labels
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	histograms := 0
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "tenzro_rpc_requests_total":
				counts[labels["method"]+" "+labels["code"]] = mt.GetCounter().GetValue()
			case "tenzro_rpc_request_duration_seconds":
				histograms++
				if mt.GetHistogram().GetSampleCount() != 3 {
					t.Errorf("latency samples %d", mt.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	want := map[string]float64{"tenzro_training_getRun 0": 1, "tenzro_training_getRun -32001": 2}
	if len(counts) != len(want) || histograms != 1 {
		t.Fatalf("counts %v, histograms %d", counts, histograms)
	}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s = %v, want %v", k, counts[k], v)
		}
	}
}
