package chain

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tenzro/train/audit"
)

var _ audit.RunAnchor = (*Client)(nil)

// SealedRun implements syncer.RunAnchor over a node's CometBFT RPC: the
// sealed run's root and election (/sealed) at the node's last committed
// height.
func (c *Client) SealedRun(ctx context.Context, task string) (*audit.SealedRun, error) {
	v, h, err := c.Query(ctx, QuerySealed, task)
	if err != nil {
		return nil, err
	}
	var r audit.SealedRun
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("sealed run %s: %w", task, err)
	}
	r.Height = h
	return &r, nil
}
