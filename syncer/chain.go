package syncer

import (
	"context"
	"io"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// Chain is the node's seam to the replicated state (chain.Local implements
// it over the in-process CometBFT node; tests use chain.Manual). The node
// reads only committed state and changes it only by transactions.
type Chain interface {
	// View runs fn over the last committed state. fn must be quick: the
	// next commit waits for it.
	View(ctx context.Context, fn func(machine.View) error) error
	// Submit admits an encoded transaction (wire.EncodeTx) to the chain
	// (CheckTx) and returns a Pending for its block. Transactions admitted
	// one after the other enter blocks in that order. A refusal by the
	// machine is an *Error with its kind and message; any other error is
	// the node's (transport).
	Submit(ctx context.Context, tx []byte) (machine.Pending, error)
	// Changed returns a channel that is closed at the next commit.
	Changed() <-chan struct{}
}

// Broadcast submits tx and waits for its block.
func Broadcast(ctx context.Context, c Chain, tx []byte) (*machine.TxResult, error) {
	p, err := c.Submit(ctx, tx)
	if err != nil {
		return nil, err
	}
	return p.Wait(ctx)
}

// Blobs is the node's content-addressed store of bytes it holds off chain:
// payloads, initial weights, fragment weights and momentum, evidence. Keys
// are content hashes (wire.ContentHash); Put is durable when it returns.
type Blobs interface {
	Has(ctx context.Context, h wire.Hash) (bool, error)
	// Get returns the blob's bytes, or an error matching ErrNotFound.
	Get(ctx context.Context, h wire.Hash) ([]byte, error)
	// Put stores b under h (the caller computed h over b).
	Put(ctx context.Context, h wire.Hash, b []byte) error
	// Open reads a large blob as a stream, with its size.
	Open(ctx context.Context, h wire.Hash) (io.ReadCloser, int64, error)
}

// PayloadFetcher gets a blob this node does not hold from the network (the
// record's provider hint first, then peers). nil means local blobs only.
type PayloadFetcher interface {
	Fetch(ctx context.Context, h wire.Hash, maxSize uint64, provider string) ([]byte, error)
}
