package syncer

import "time"

// Observer receives the syncer worker's measurements (the node's
// Prometheus metrics live in the rpc package): the commits this node made.
// Implementations must be quick and must not call back. A nil
// Config.Observer observes nothing.
type Observer interface {
	// FragmentCommitted: a fragment of task's round closed with status
	// (aggregated, no_quorum, rule_failed) sinceRoundStart after the round
	// opened (block time).
	FragmentCommitted(task string, round uint64, fragment int, status string, sinceRoundStart time.Duration)
	// RoundCommitted: task's round was committed (the last one seals the run).
	RoundCommitted(task string, round uint64)
}
