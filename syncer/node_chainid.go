package syncer

import (
	"context"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// ChainID returns the chain id this node's chain recorded at genesis: what
// every request and submission must be signed for (tenzro_node_info
// reports it to clients).
func (n *Node) ChainID(ctx context.Context) (string, error) {
	var id string
	err := n.view(ctx, func(v machine.View) error {
		var err error
		id, err = machine.ChainID(ctx, v.KV)
		return err
	})
	return id, err
}

// signedFor is the Signed of one of this node's own transactions.
func (n *Node) signedFor(ctx context.Context, nonce uint64) (wire.Signed, error) {
	id, err := n.ChainID(ctx)
	return wire.Signed{ChainID: id, Nonce: nonce}, err
}
