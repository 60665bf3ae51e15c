package chain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// The chain keeps its replicated state in a store of its own, in two of the
// store's key spaces: ksState is the replicated state (the machine's key
// spaces mapped to key prefixes; every write enters the app hash), ksMeta
// the last commit's height, block and hashes (derived, not hashed).
const (
	ksState = machine.KSLedger
	ksMeta  = machine.KSMeta
)

// Domain tags of the chain (docs/protocol/chain.md).
const (
	DomainAppHash    = "tenzro/train/app-hash/v1"
	DomainStateDelta = "tenzro/train/state-delta/v1"
	DomainRunLog     = machine.DomainRunLog
)

// StateKey is where the machine's (key space, key) lives in the chain's
// state: the key space's name, "/", the key. No key space's name is a
// prefix of another's, so the bytewise order of state keys is the order of
// (key space name, key).
func StateKey(ks machine.Keyspace, key []byte) []byte {
	out := make([]byte, 0, len(ks)+1+len(key))
	out = append(out, ks...)
	out = append(out, '/')
	return append(out, key...)
}

// stateKV is the machine's view of the chain's committed state: a
// syncer.KV that maps key spaces to prefixes of ksState. Writes reach it
// only through App.Commit.
type stateKV struct{ kv machine.KV }

func (s stateKV) Get(ctx context.Context, ks machine.Keyspace, key []byte) ([]byte, error) {
	return s.kv.Get(ctx, ksState, StateKey(ks, key))
}

func (s stateKV) Scan(ctx context.Context, ks machine.Keyspace, prefix []byte, fn func(k, v []byte) error) error {
	p := StateKey(ks, prefix)
	n := len(ks) + 1
	return s.kv.Scan(ctx, ksState, p, func(k, v []byte) error { return fn(k[n:], v) })
}

func (s stateKV) Commit(ctx context.Context, b *machine.Batch) error {
	var out machine.Batch
	for _, op := range b.Ops {
		if op.Value == nil {
			out.Delete(ksState, StateKey(op.KS, op.Key))
		} else {
			out.Set(ksState, StateKey(op.KS, op.Key), op.Value)
		}
	}
	return s.kv.Commit(ctx, &out)
}

func (s stateKV) Close() error { return nil }

// write is one state write of a block: a key and its new value, or a
// deletion.
type write struct {
	key   []byte
	value []byte // nil: deleted
}

// blockWrites lists an overlay's writes as state keys in bytewise order.
func blockWrites(o *machine.Overlay) []write {
	b := o.Batch()
	out := make([]write, len(b.Ops))
	for i, op := range b.Ops {
		out[i] = write{key: StateKey(op.KS, op.Key), value: op.Value}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].key, out[j].key) < 0 })
	return out
}

// StateHash is the incremental commitment to the whole state after block
// h (docs/protocol/chain.md §3): SHA-256(Str(DomainStateDelta) ‖
// Hash(previous state hash) ‖ U64(h) ‖ for each key written in the block in
// bytewise order: Str(key) ‖ U64(1) ‖ Bytes(value), or for a deletion
// Str(key) ‖ U64(0) ‖ Bytes("")). The state before genesis has the zero
// hash. It is a deterministic function of the write history, so it commits
// to the state without rescanning it.
func StateHash(prev wire.Hash, height int64, ws []write) wire.Hash {
	c := wire.NewCanon(DomainStateDelta).Hash(prev).U64(uint64(height))
	for _, w := range ws {
		c.Bytes(w.key)
		if w.value == nil {
			c.U64(0).Bytes(nil)
		} else {
			c.U64(1).Bytes(w.value)
		}
	}
	return c.Sum()
}

// AppHash is SHA-256(Str(DomainAppHash) ‖ U64(height) ‖ Hash(state hash) ‖
// U64(run log size) ‖ Hash(run log root)) (docs/protocol/chain.md).
func AppHash(height int64, state wire.Hash, logSize uint64, logRoot wire.Hash) wire.Hash {
	return wire.NewCanon(DomainAppHash).U64(uint64(height)).Hash(state).U64(logSize).Hash(logRoot).Sum()
}

// RunLogLeaf is a sealed run's leaf in the run log:
// Str(DomainRunLog) ‖ Str(task_id) ‖ Hash(run_root).
func RunLogLeaf(taskID string, runRoot wire.Hash) []byte { return machine.RunLogLeaf(taskID, runRoot) }

var rf = compact.RangeFactory{Hash: rfc6962.DefaultHasher.HashChildren}

// treeRoot is the RFC 6962 root over leaves given one by one.
type treeRoot struct {
	r *compact.Range
	n uint64
}

func newTreeRoot() *treeRoot { return &treeRoot{r: rf.NewEmptyRange(0)} }

func (t *treeRoot) add(leaf []byte) error {
	t.n++
	return t.r.Append(rfc6962.DefaultHasher.HashLeaf(leaf), nil)
}

func (t *treeRoot) root() (wire.Hash, error) {
	if t.n == 0 {
		return wire.Hash(rfc6962.DefaultHasher.EmptyRoot()), nil
	}
	r, err := t.r.GetRootHash(nil)
	if err != nil {
		return wire.Hash{}, fmt.Errorf("merkle root: %w", err)
	}
	return wire.Hash(r), nil
}

// runLog is the run log's size and RFC 6962 root.
type runLog struct {
	size uint64
	root wire.Hash
}

// emptyRunLog is the run log before any seal: RFC 6962's empty root
// (SHA-256 of the empty string).
var emptyRunLog = runLog{root: wire.Hash(rfc6962.DefaultHasher.EmptyRoot())}

// readRunLog computes the run log's root from its leaves in kv.
func readRunLog(ctx context.Context, kv machine.KV) (runLog, error) {
	leaves, err := machine.RunLogLeaves(ctx, kv)
	if err != nil {
		return runLog{}, fmt.Errorf("run log: %w", err)
	}
	t := newTreeRoot()
	for _, l := range leaves {
		if err := t.add(l); err != nil {
			return runLog{}, err
		}
	}
	root, err := t.root()
	return runLog{size: t.n, root: root}, err
}

// errNotFound reports whether err is the store's not-found.
func errNotFound(err error) bool { return errors.Is(err, machine.ErrNotFound) }
