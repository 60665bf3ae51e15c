package rpc_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/syncer"
)

// TestChallengeMetrics: the watcher's and the voter's series.
func TestChallengeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := rpc.NewNodeMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var o syncer.ChallengeObserver = m
	o.Reexecuted("watch", true, false, 2*time.Second)
	o.Reexecuted("watch", false, false, time.Second)
	o.Reexecuted("vote", false, true, time.Second)
	o.ChallengeSent("t", 0, 1)
	o.ChallengeDecided("syncer_wrong")
	o.VoteSent(false)
	o.VoteSent(true)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			k := mf.GetName()
			for _, l := range mt.GetLabel() {
				k += " " + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case mt.GetCounter() != nil:
				got[k] = mt.GetCounter().GetValue()
			case mt.GetHistogram() != nil:
				got[k] = float64(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	for k, v := range map[string]float64{
		"tenzro_reexecutions_total result=agree why=watch":      1,
		"tenzro_reexecutions_total result=disagree why=watch":   1,
		"tenzro_reexecutions_total result=unavailable why=vote": 1,
		"tenzro_reexecution_seconds why=watch":                  2,
		"tenzro_challenges_sent_total":                          1,
		"tenzro_challenge_outcomes_total outcome=syncer_wrong":  1,
		"tenzro_challenge_votes_total vote=result":              1,
		"tenzro_challenge_votes_total vote=unavailable":         1,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
