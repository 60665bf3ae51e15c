package chain

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// QueryRunProof: data task_id → RunRootProof JSON (the last committed
// height's).
const QueryRunProof = "/runproof"

// RunRootProof proves that a sealed run's root is in the run log committed
// by the app hash of Height: RFC 6962 inclusion of RunLogLeaf(task_id,
// run_root) at LeafIndex in the log of LogSize leaves with root LogRoot, and
// AppHash(Height, StateRoot, LogSize, LogRoot) equal to the app hash that
// the header of block Height+1 carries (CometBFT puts the app hash of the
// state after block h into the header of block h+1).
type RunRootProof struct {
	TaskID  string    `json:"task_id"`
	RunRoot wire.Hash `json:"run_root"`
	Height  int64     `json:"height"`
	// StateRoot is the state hash after Height (the incremental commitment
	// of docs/protocol/chain.md §3; the name is the proof format's).
	StateRoot wire.Hash   `json:"state_root"`
	LogSize   uint64      `json:"log_size"`
	LogRoot   wire.Hash   `json:"log_root"`
	LeafIndex uint64      `json:"leaf_index"`
	Path      []wire.Hash `json:"path"`
}

// VerifyRunRootProof checks p against appHash (the app hash of the state
// after p.Height, taken from a header the caller trusts) and, when runRoot
// is not zero, that p proves that run root. It needs no chain.
func VerifyRunRootProof(p *RunRootProof, appHash wire.Hash, runRoot wire.Hash) error {
	if !runRoot.IsZero() && p.RunRoot != runRoot {
		return fmt.Errorf("run root proof: proves %s, the receipt's run root is %s", p.RunRoot, runRoot)
	}
	path := make([][]byte, len(p.Path))
	for i := range p.Path {
		path[i] = p.Path[i][:]
	}
	leaf := rfc6962.DefaultHasher.HashLeaf(RunLogLeaf(p.TaskID, p.RunRoot))
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.LeafIndex, p.LogSize, leaf, path, p.LogRoot[:]); err != nil {
		return fmt.Errorf("run root proof: inclusion in the run log: %w", err)
	}
	if got := AppHash(p.Height, p.StateRoot, p.LogSize, p.LogRoot); got != appHash {
		return fmt.Errorf("run root proof: app hash of height %d recomputes to %s, the header says %s", p.Height, got, appHash)
	}
	return nil
}

// inclusionPath is RFC 6962 §2.1.1 PATH(m, D[n]) over leaf hashes.
func inclusionPath(leaves [][]byte, m uint64) [][]byte {
	n := uint64(len(leaves))
	if n <= 1 {
		return nil
	}
	k := uint64(1)
	for k<<1 < n {
		k <<= 1
	}
	if m < k {
		return append(inclusionPath(leaves[:k], m), subtreeHash(leaves[k:]))
	}
	return append(inclusionPath(leaves[k:], m-k), subtreeHash(leaves[:k]))
}

// subtreeHash is RFC 6962 MTH over leaf hashes.
func subtreeHash(leaves [][]byte) []byte {
	if len(leaves) == 1 {
		return leaves[0]
	}
	k := 1
	for k<<1 < len(leaves) {
		k <<= 1
	}
	return rfc6962.DefaultHasher.HashChildren(subtreeHash(leaves[:k]), subtreeHash(leaves[k:]))
}

// runProof builds the proof for task from the last committed state
// (called with the read lock held).
func (a *App) runProof(ctx context.Context, task string) ([]byte, error) {
	kv := machine.ReadOnly(a.state)
	si, err := machine.RunSeal(ctx, kv, task)
	if err != nil {
		return nil, err
	}
	raw, err := machine.RunLogLeaves(ctx, kv)
	if err != nil {
		return nil, err
	}
	leaves := make([][]byte, len(raw))
	for i, l := range raw {
		leaves[i] = rfc6962.DefaultHasher.HashLeaf(l)
	}
	if si.RunLogIndex >= uint64(len(leaves)) {
		return nil, fmt.Errorf("run %s: run log index %d beyond the log's %d leaves", task, si.RunLogIndex, len(leaves))
	}
	p := RunRootProof{TaskID: task, RunRoot: si.RunRoot, Height: a.height, StateRoot: a.stateHash, LogSize: a.runLog.size,
		LogRoot: a.runLog.root, LeafIndex: si.RunLogIndex, Path: []wire.Hash{}}
	for _, h := range inclusionPath(leaves, si.RunLogIndex) {
		p.Path = append(p.Path, wire.Hash(h))
	}
	return json.Marshal(p)
}
