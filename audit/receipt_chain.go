package audit

import (
	"bytes"
	"context"
	"fmt"

	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/wire"
)

// SealedRun is what a node's committed state holds about a sealed run, for
// verifying its receipt against the chain.
type SealedRun struct {
	TaskID string `json:"task_id"`
	// RunRoot is the run root committed for the run.
	RunRoot wire.Hash `json:"run_root"`
	// Height is the block height of the state read.
	Height int64 `json:"height"`
	// Election is the run's election record (every entrant).
	Election *wire.Election `json:"election,omitempty"`
	// ChallengesHash is the hash of the run's challenge list (absent when
	// the run had no challenge).
	ChallengesHash *wire.Hash `json:"challenges_hash,omitempty"`
}

// RunAnchor reads sealed runs from a node's committed state: the seam
// between receipt verification and the chain. *Node implements it from its
// replica's committed state, chain.Client over a node's CometBFT RPC.
type RunAnchor interface {
	SealedRun(ctx context.Context, taskID string) (*SealedRun, error)
}

// CheckReceiptAgainst verifies a receipt against a's committed state:
// CheckReceipt, then the run is sealed with the receipt's run root, and every
// syncer the receipt names is the election record's entrant at its ticket
// (same DID, stake, proof and output at that index of the succession), so a
// key that listed itself with a VRF proof of its own is refused. It returns
// what it read.
func CheckReceiptAgainst(ctx context.Context, a RunAnchor, receipt []byte) (*SealedRun, error) {
	rc, err := checkReceipt(receipt, nil)
	if err != nil {
		return nil, err
	}
	run, err := a.SealedRun(ctx, rc.TaskID)
	if err != nil {
		return nil, fmt.Errorf("run %s on chain: %w", rc.TaskID, err)
	}
	if run.RunRoot != rc.RunRoot {
		return run, fmt.Errorf("run root %s is not the one committed on chain for %s (%s, height %d)", rc.RunRoot, rc.TaskID, run.RunRoot, run.Height)
	}
	if run.Election == nil {
		return run, fmt.Errorf("run %s has no election record on chain", rc.TaskID)
	}
	if (run.ChallengesHash == nil) != (rc.ChallengesHash == nil) || run.ChallengesHash != nil && *run.ChallengesHash != *rc.ChallengesHash {
		return run, fmt.Errorf("the receipt's challenge list (%s) is not the one on chain for %s (%s)", hashText(rc.ChallengesHash), rc.TaskID, hashText(run.ChallengesHash))
	}
	order, err := election.Succession(*run.Election)
	if err != nil {
		return run, fmt.Errorf("run %s's election record on chain: %w", rc.TaskID, err)
	}
	for _, s := range rc.Syncers {
		if s.Ticket >= uint64(len(order)) {
			return run, fmt.Errorf("syncer %s claims ticket %d; the run's election on chain has %d entrants", s.DID, s.Ticket, len(order))
		}
		e := order[s.Ticket]
		if e.DID != s.DID || e.Stake != s.Stake || !bytes.Equal(e.Proof, s.Proof) || !bytes.Equal(e.Output, s.Output) {
			return run, fmt.Errorf("syncer %s at ticket %d is not the entrant the election on chain has there (%s)", s.DID, s.Ticket, e.DID)
		}
	}
	return run, nil
}

// VerifyReceiptAgainst is tenzro_training_verifyReceipt, the seed's
// TRAINING_VERIFY (0x1008) with the chain as the root of trust: with root
// nil, valid when CheckReceiptAgainst accepts the receipt (the result
// carries the chain's run root and height); with a claimed root, the pure
// check against it (VerifyReceipt). a nil: the pure check with the
// receipt's own root.
func VerifyReceiptAgainst(ctx context.Context, a RunAnchor, receipt, root []byte) *wire.VerifyReceiptResult {
	if root != nil || a == nil {
		if err := CheckReceipt(receipt, root); err != nil {
			return &wire.VerifyReceiptResult{Valid: 0, Reason: err.Error()}
		}
		return &wire.VerifyReceiptResult{Valid: 1}
	}
	run, err := CheckReceiptAgainst(ctx, a, receipt)
	res := &wire.VerifyReceiptResult{Valid: 1}
	if run != nil {
		r := run.RunRoot
		res.Root, res.Height = &r, run.Height
	}
	if err != nil {
		res.Valid, res.Reason = 0, err.Error()
	}
	return res
}

func hashText(h *wire.Hash) string {
	if h == nil {
		return "none"
	}
	return h.String()
}
