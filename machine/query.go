package machine

import (
	"context"
	"math/big"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// View is the last committed state of the chain: a read-only KV in the
// machine's key spaces and the block that produced it.
type View struct {
	KV    KV
	Block Block
}

// Pending is an admitted transaction.
type Pending interface {
	// Wait returns the transaction's result once a block committed it, or
	// its refusal (an *Error) by the block or by a recheck.
	Wait(ctx context.Context) (*TxResult, error)
}

// TxResult is a committed transaction's result.
type TxResult struct {
	Height int64
	// Data is the transition's result (JSON of the method's result type).
	Data []byte
}

// Balance is a DID's balance in a committed state.
func Balance(ctx context.Context, kv KV, d string) (*wire.Balance, error) {
	if _, err := did.Parse(d); err != nil {
		return nil, Errf(KindInvalid, "%v", err)
	}
	v, err := AccountBalance(ctx, kv, AcctDID(d))
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
	r, err := LoadRun(ctx, kv, task)
	if err != nil {
		return nil, err
	}
	if r.Seal == nil {
		return nil, Errf(KindConflict, "run %s is %s: it has no sealed run root", task, r.Status)
	}
	return &SealInfo{TaskID: task, Status: r.Status, RunRoot: r.Seal.RunRoot, RunLogIndex: r.Seal.RunLogIndex, Height: r.Seal.Height,
		Signed: r.Seal.Signed, SignedBy: r.Seal.SignedBy}, nil
}

// SealedRunOf reads a sealed run's SealedRun from a committed state (Height
// is the caller's to set).
func SealedRunOf(ctx context.Context, kv KV, task string) (*audit.SealedRun, error) {
	r, err := LoadRun(ctx, kv, task)
	if err != nil {
		return nil, err
	}
	if r.Seal == nil {
		return nil, Errf(KindConflict, "run %s is %s: it has no sealed run root", task, r.Status)
	}
	out := &audit.SealedRun{TaskID: task, RunRoot: r.Seal.RunRoot, Election: r.Election}
	if r.Challenges > 0 {
		list, err := ChainChallengeList(ctx, kv, task)
		if err != nil {
			return nil, err
		}
		h := audit.BlobHash(list)
		out.ChallengesHash = &h
	}
	return out, nil
}
