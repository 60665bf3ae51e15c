package syncer

import "time"

// Observer receives the state machine's measurements (the node's
// Prometheus metrics live in the rpc package). Calls happen under the
// node's lock, so implementations must be quick and must not call back.
// A nil Config.Observer observes nothing.
type Observer interface {
	// FragmentCommitted: a fragment of task's round closed with status
	// (aggregated, no_quorum, rule_failed) sinceRoundStart after the round
	// opened (by the node's clock).
	FragmentCommitted(task string, round uint64, fragment int, status string, sinceRoundStart time.Duration)
	// RoundCommitted: task's round was committed (the last one seals the run).
	RoundCommitted(task string, round uint64)
}

func (n *Node) observeFragment(r *runState, i int, status string) {
	if n.cfg.Observer == nil {
		return
	}
	d := time.Duration(n.now().UnixMilli()-r.RoundMs) * time.Millisecond
	n.cfg.Observer.FragmentCommitted(r.spec.TaskID, r.Round, i, status, max(d, 0))
}

func (n *Node) observeRound(task string, round uint64) {
	if n.cfg.Observer != nil {
		n.cfg.Observer.RoundCommitted(task, round)
	}
}
