package syncer

import (
	"context"
	"io"
	"math/big"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// View is the last committed state of the chain: a read-only KV in the
// machine's key spaces and the block that produced it.
type View struct {
	KV    KV
	Block Block
}

// Chain is the node's seam to the replicated state (chain.Local implements
// it over the in-process CometBFT node; tests use chain.Manual). The node
// reads only committed state and changes it only by transactions.
type Chain interface {
	// View runs fn over the last committed state. fn must be quick: the
	// next commit waits for it.
	View(ctx context.Context, fn func(View) error) error
	// Submit admits an encoded transaction (wire.EncodeTx) to the chain
	// (CheckTx) and returns a Pending for its block. Transactions admitted
	// one after the other enter blocks in that order. A refusal by the
	// machine is an *Error with its kind and message; any other error is
	// the node's (transport).
	Submit(ctx context.Context, tx []byte) (Pending, error)
	// Changed returns a channel that is closed at the next commit.
	Changed() <-chan struct{}
}

// Pending is an admitted transaction.
type Pending interface {
	// Wait returns the transaction's result once a block committed it, or
	// its refusal (an *Error) by the block or by a recheck.
	Wait(ctx context.Context) (*TxResult, error)
}

// Broadcast submits tx and waits for its block.
func Broadcast(ctx context.Context, c Chain, tx []byte) (*TxResult, error) {
	p, err := c.Submit(ctx, tx)
	if err != nil {
		return nil, err
	}
	return p.Wait(ctx)
}

// StaleNonce is the refusal of a nonce that is not above the signer's last
// (it matches ErrStaleNonce and is a KindUnauthorized *Error).
func StaleNonce(msg string) error { return nonceError{e: &Error{Kind: KindUnauthorized, Msg: msg}} }

// TxResult is a committed transaction's result.
type TxResult struct {
	Height int64
	// Data is the transition's result (JSON of the method's result type).
	Data []byte
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

// Balance is a DID's balance in a committed state.
func Balance(ctx context.Context, kv KV, d string) (*wire.Balance, error) {
	if _, err := did.Parse(d); err != nil {
		return nil, Errf(KindInvalid, "%v", err)
	}
	v, err := AccountBalance(ctx, kv, acctDID(d))
	if err != nil {
		return nil, err
	}
	return &wire.Balance{DID: d, Balance: v.String()}, nil
}

// AccountBalance is a ledger account's balance (did:…, escrow:…, stake:…,
// syncer-stake:…, syncer-unbonding:…, issuer).
func AccountBalance(ctx context.Context, kv KV, acct string) (*big.Int, error) {
	v, err := newLedgerTx(ctx, kv).balance(acct)
	if err != nil {
		return nil, err
	}
	return new(big.Int).Set(v), nil
}

// NativeBuiltins are the native engine's implementations by hash (the
// built-ins a chain accepts besides the embedded Wasm modules).
func NativeBuiltins() map[wire.Hash]string {
	return map[wire.Hash]string{nativeHash("Mean"): "Mean", nativeHash("Finite"): "Finite", nativeHash("Nesterov"): "Nesterov"}
}

// SealInfo is what the chain holds of a sealed run: its run root and place
// in the run log, and who signed its receipt.
type SealInfo struct {
	TaskID      string    `json:"task_id"`
	Status      string    `json:"status"`
	RunRoot     wire.Hash `json:"run_root"`
	RunLogIndex uint64    `json:"run_log_index"`
	Height      int64     `json:"height"`
	Signed      bool      `json:"signed"`
	SignedBy    string    `json:"signed_by,omitempty"`
}

// RunSeal reads a sealed run's SealInfo (KindConflict when it is not sealed).
func RunSeal(ctx context.Context, kv KV, task string) (*SealInfo, error) {
	r, err := loadRun(ctx, kv, task)
	if err != nil {
		return nil, err
	}
	if r.Seal == nil {
		return nil, Errf(KindConflict, "run %s is %s: it has no sealed run root", task, r.Status)
	}
	return &SealInfo{TaskID: task, Status: r.Status, RunRoot: r.Seal.RunRoot, RunLogIndex: r.Seal.RunLogIndex, Height: r.Seal.Height,
		Signed: r.Seal.Signed, SignedBy: r.Seal.SignedBy}, nil
}
