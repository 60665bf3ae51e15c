package syncer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// Replication of the last committed state (and of the run's initial
// weights file). A fragment's weights and momentum are blobs that only the
// syncer that computed them holds at first. Every node whose key is an entrant of a running run's succession
// fetches them by hash as soon as a commit names them, so that when the
// syncer before it misses a round deadline it can take the round over from
// the last committed weights and momentum even if that syncer's node is
// gone, and so that any node can serve them.

// replicaRetry is how long replication of a run waits after a blob could
// not be fetched (wall clock: local, not a rule).
const replicaRetry = 2 * time.Second

// replicaHashes are the blobs a node whose key is me keeps for the run: the
// current weights and momentum of every fragment and the run's initial
// weights file, when me is an entrant of the run's succession (none
// otherwise). The initial weights file is what `tenzro receipt replay`
// starts from: without it here, a run posted through a node that few peers
// reach directly (a light client) could be replayed only through the nodes
// connected to that one.
func replicaHashes(r *machine.Run, me string) []wire.Hash {
	if !slices.Contains(r.Succession, me) {
		return nil
	}
	var out []wire.Hash
	if r.HasInit && !r.InitFile.IsZero() {
		out = append(out, r.InitFile)
	}
	for _, fs := range r.Fragments {
		out = append(out, fs.WeightsHash)
		if !fs.MomentumHash.IsZero() {
			out = append(out, fs.MomentumHash)
		}
	}
	return out
}

// forgetReplicas drops what replicate remembers of runs that no longer
// ask for replication.
func (n *Node) forgetReplicas(want map[string][]wire.Hash) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	for task := range n.w.held {
		if _, ok := want[task]; !ok {
			delete(n.w.held, task)
			delete(n.w.replicaWait, task)
		}
	}
}

// replicate fetches the hashes this node does not hold yet (n.blob: the
// local store, else the network by hash, then kept). What it holds is
// remembered, so a block costs no store read per fragment.
func (n *Node) replicate(ctx context.Context, task string, hs []wire.Hash) error {
	n.w.mu.Lock()
	prev, wait := n.w.held[task], n.w.replicaWait[task]
	n.w.mu.Unlock()
	if n.now().Before(wait) {
		return nil
	}
	held := make(map[wire.Hash]bool, len(hs))
	var errs []error
	for _, h := range hs {
		if prev[h] {
			held[h] = true
			continue
		}
		if ok, err := n.blobs.Has(ctx, h); err == nil && ok {
			held[h] = true
			continue
		}
		if _, err := n.blob(ctx, h, uint64(machine.MaxInitWeights), ""); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, fmt.Errorf("%s: %w", h, err))
			continue
		}
		held[h] = true
	}
	n.w.mu.Lock()
	n.w.held[task] = held
	if len(errs) > 0 {
		n.w.replicaWait[task] = n.now().Add(replicaRetry)
	} else {
		delete(n.w.replicaWait, task)
	}
	n.w.mu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("replicating the last committed weights and momentum: %w", errors.Join(errs...))
	}
	return nil
}
