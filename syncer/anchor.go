package syncer

import (
	"context"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/machine"
)

// SealedRun implements RunAnchor from the chain's committed state.
func (n *Node) SealedRun(ctx context.Context, task string) (*audit.SealedRun, error) {
	var out *audit.SealedRun
	err := n.view(ctx, func(v machine.View) error {
		var err error
		if out, err = machine.SealedRunOf(ctx, v.KV, task); err == nil {
			out.Height = v.Block.Height
		}
		return err
	})
	return out, err
}
