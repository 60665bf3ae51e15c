package chain

import (
	"context"
	"encoding/json"
	"fmt"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/tenzro/train/syncer"
)

var (
	_ syncer.RunAnchor = (*Service)(nil)
	_ syncer.RunAnchor = (*Client)(nil)
)

// SealedRun implements syncer.RunAnchor from this node's committed state:
// the /run record's run root and election, at the last committed height.
// tenzro_training_verifyReceipt checks receipts against it.
func (s *Service) SealedRun(ctx context.Context, task string) (*syncer.SealedRun, error) {
	res, err := s.app.Query(ctx, &abci.RequestQuery{Path: QueryRun, Data: []byte(task)})
	if err != nil {
		return nil, err
	}
	if res.Code != CodeOK {
		return nil, syncer.Errf(kindOf(res.Code), "%s", res.Log)
	}
	var r runRecord
	if err := json.Unmarshal(res.Value, &r); err != nil {
		return nil, fmt.Errorf("run record %s: %w", task, err)
	}
	if r.RunRoot == nil {
		return nil, syncer.Errf(syncer.KindConflict, "run %s is %s on chain at height %d: it has no sealed run root", task, r.Status, res.Height)
	}
	return &syncer.SealedRun{TaskID: task, RunRoot: *r.RunRoot, Height: res.Height, Election: r.Election}, nil
}

// SealedRun implements syncer.RunAnchor over a node's CometBFT RPC: the
// /run record's run root and election at the node's last committed height.
func (c *Client) SealedRun(ctx context.Context, task string) (*syncer.SealedRun, error) {
	v, h, err := c.Query(ctx, QueryRun, task)
	if err != nil {
		return nil, err
	}
	var r runRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("run record %s: %w", task, err)
	}
	if r.RunRoot == nil {
		return nil, fmt.Errorf("run %s is %s on chain at height %d: it has no sealed run root", task, r.Status, h)
	}
	return &syncer.SealedRun{TaskID: task, RunRoot: *r.RunRoot, Height: h, Election: r.Election}, nil
}
