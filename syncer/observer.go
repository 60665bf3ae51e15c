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

// Compute phases of one commit (ComputeObserver), a fixed set.
const (
	PhaseVerify    = "verify"     // re-checking each input: read, hash, parse, decode, per-input verifiers
	PhaseCopyStale = "copy_stale" // the copy rule and the stale rule (copies.md)
	PhaseFinalize  = "finalize"   // the engine's Finalize (round verifiers, aggregation, outer step), writes excluded
	PhaseWrite     = "write"      // hashing and storing the new weights and momentum
	PhaseScore     = "score"      // scoring the drawn inputs (scored runs)
)

// ComputePhases lists the phases, in the order a commit runs them.
var ComputePhases = []string{PhaseVerify, PhaseCopyStale, PhaseFinalize, PhaseWrite, PhaseScore}

// ComputeObserver, when Config.Observer implements it too, receives the
// compute time of each phase of each fragment commit this node's syncer
// made (re-executions are not included: see ChallengeObserver).
type ComputeObserver interface {
	CommitCompute(phase string, d time.Duration)
}
