package machine

import (
	"context"
	"errors"
)

// Keyspace names one of the store's key spaces. The store maps each to a
// distinct key prefix; the syncer never sees how.
type Keyspace string

// The node's key spaces (DESIGN §8). Runs and Receipts are the seed's
// CF_TRAINING_RUNS and CF_TRAINING_RECEIPTS.
const (
	KSRuns       Keyspace = "runs"
	KSReceipts   Keyspace = "receipts"
	KSLedger     Keyspace = "ledger"
	KSTranscript Keyspace = "transcript"
	KSWeights    Keyspace = "weights"
	KSBlobs      Keyspace = "blobs"
	KSMeta       Keyspace = "meta"
	KSPlugins    Keyspace = "plugins"
	KSEvidence   Keyspace = "evidence"
)

// AllKeyspaces lists every key space.
var AllKeyspaces = []Keyspace{KSRuns, KSReceipts, KSLedger, KSTranscript, KSWeights, KSBlobs, KSMeta, KSPlugins, KSEvidence}

// ErrNotFound is returned by KV.Get for a missing key.
var ErrNotFound = errors.New("not found")

// KV is the seam to persistent storage. The store package implements it on
// Pebble. Every state transition is one Batch committed with Commit, which
// is atomic and durable (synced) when it returns nil.
type KV interface {
	// Get returns a copy of the value, or ErrNotFound.
	Get(ctx context.Context, ks Keyspace, key []byte) ([]byte, error)
	// Scan calls fn for each key with the given prefix in ascending key
	// order. The slices passed to fn are only valid during the call.
	Scan(ctx context.Context, ks Keyspace, prefix []byte, fn func(key, value []byte) error) error
	// Commit applies the batch atomically and syncs it to disk.
	Commit(ctx context.Context, b *Batch) error
	Close() error
}

// Op is one write in a batch; Value nil means delete.
type Op struct {
	KS    Keyspace
	Key   []byte
	Value []byte
}

// Batch collects writes to commit atomically.
type Batch struct{ Ops []Op }

// Set queues a write. The batch keeps k and v; callers must not modify them.
func (b *Batch) Set(ks Keyspace, k, v []byte) {
	if v == nil {
		v = []byte{}
	}
	b.Ops = append(b.Ops, Op{KS: ks, Key: k, Value: v})
}

// Delete queues a deletion.
func (b *Batch) Delete(ks Keyspace, k []byte) { b.Ops = append(b.Ops, Op{KS: ks, Key: k}) }

// Len reports the number of queued writes.
func (b *Batch) Len() int { return len(b.Ops) }
