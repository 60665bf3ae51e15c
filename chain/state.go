package chain

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// The chain keeps its replicated state in a store of its own (the node's
// store holds payloads and caches), in two of the store's keyspaces:
// ksState is the replicated state (every key of it enters the app hash),
// ksMeta the last commit's height and app hash (derived, not hashed).
const (
	ksState = syncer.KSLedger
	ksMeta  = syncer.KSMeta
)

// Domain tags of the chain (docs/protocol/chain.md).
const (
	DomainAppHash   = "tenzro/train/app-hash/v1"
	DomainStateLeaf = "tenzro/train/state-leaf/v1"
	DomainRunLog    = "tenzro/train/run-log/v1"
)

// overlay stages writes over the committed state. The block overlay holds a
// block's accepted transactions; each transaction runs in a child overlay
// that is merged into the block only when the transaction succeeds, so a
// refused transaction changes nothing. Maps serve lookups only: anything
// that leaves an overlay is sorted by key first.
type overlay struct {
	kv     syncer.KV
	parent *overlay
	w      map[string][]byte
}

func newOverlay(kv syncer.KV, parent *overlay) *overlay {
	return &overlay{kv: kv, parent: parent, w: map[string][]byte{}}
}

func (o *overlay) get(ctx context.Context, key string) ([]byte, bool, error) {
	for x := o; x != nil; x = x.parent {
		if v, ok := x.w[key]; ok {
			return v, true, nil
		}
	}
	v, err := o.kv.Get(ctx, ksState, []byte(key))
	if errors.Is(err, syncer.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("state read %q: %w", key, err)
	}
	return v, true, nil
}

func (o *overlay) set(key string, v []byte) { o.w[key] = v }

// mergeInto moves o's writes into its parent.
func (o *overlay) mergeInto() {
	for k, v := range o.w {
		o.parent.w[k] = v
	}
}

// sortedKeys returns the overlay's own keys in bytewise order.
func (o *overlay) sortedKeys() []string {
	ks := make([]string, 0, len(o.w))
	for k := range o.w {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// batch renders the overlay's writes, in key order, as a store batch.
func (o *overlay) batch(b *syncer.Batch) {
	for _, k := range o.sortedKeys() {
		b.Set(ksState, []byte(k), o.w[k])
	}
}

// stateLeaf is the leaf of one state entry:
// Str(DomainStateLeaf) ‖ Str(key) ‖ Bytes(value).
func stateLeaf(key string, value []byte) []byte {
	return wire.NewCanon(DomainStateLeaf).Str(key).Bytes(value).Out()
}

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

// StateRoot is the RFC 6962 root over every state entry in bytewise key
// order, each leaf being stateLeaf(key, value): the committed state with the
// block overlay's writes applied.
func stateRoot(ctx context.Context, kv syncer.KV, block *overlay) (wire.Hash, error) {
	pending := block.sortedKeys()
	t := newTreeRoot()
	i := 0
	emitPending := func(upTo []byte) error {
		for i < len(pending) && (upTo == nil || pending[i] < string(upTo)) {
			if err := t.add(stateLeaf(pending[i], block.w[pending[i]])); err != nil {
				return err
			}
			i++
		}
		return nil
	}
	err := kv.Scan(ctx, ksState, nil, func(k, v []byte) error {
		if err := emitPending(k); err != nil {
			return err
		}
		if i < len(pending) && pending[i] == string(k) {
			// Overwritten in this block: the pending value replaces it.
			err := t.add(stateLeaf(pending[i], block.w[pending[i]]))
			i++
			return err
		}
		return t.add(stateLeaf(string(k), v))
	})
	if err != nil {
		return wire.Hash{}, fmt.Errorf("state root: %w", err)
	}
	// Pending keys above every stored key.
	if err := emitPending(nil); err != nil {
		return wire.Hash{}, err
	}
	return t.root()
}

// AppHash is SHA-256(Str(DomainAppHash) ‖ U64(height) ‖ Hash(state root) ‖
// U64(run log size) ‖ Hash(run log root)) (docs/protocol/chain.md).
func AppHash(height int64, state wire.Hash, logSize uint64, logRoot wire.Hash) wire.Hash {
	return wire.NewCanon(DomainAppHash).U64(uint64(height)).Hash(state).U64(logSize).Hash(logRoot).Sum()
}

// RunLogLeaf is a sealed run's leaf in the run log:
// Str(DomainRunLog) ‖ Str(task_id) ‖ Hash(run_root).
func RunLogLeaf(taskID string, runRoot wire.Hash) []byte {
	return wire.NewCanon(DomainRunLog).Str(taskID).Hash(runRoot).Out()
}

// scan calls fn for every key with the prefix in bytewise order, over the
// committed state with every overlay level's writes applied.
func (o *overlay) scan(ctx context.Context, prefix string, fn func(k string, v []byte) error) error {
	m := map[string][]byte{}
	err := o.kv.Scan(ctx, ksState, []byte(prefix), func(k, v []byte) error {
		m[string(k)] = append([]byte(nil), v...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("state scan %q: %w", prefix, err)
	}
	var levels []*overlay
	for x := o; x != nil; x = x.parent {
		levels = append(levels, x)
	}
	for i := len(levels) - 1; i >= 0; i-- {
		for k, v := range levels[i].w {
			if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
				m[k] = v
			}
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := fn(k, m[k]); err != nil {
			return err
		}
	}
	return nil
}

// runLogRoot is the RFC 6962 root and size of the run log.
func runLogRoot(ctx context.Context, o *overlay) (uint64, wire.Hash, error) {
	t := newTreeRoot()
	err := o.scan(ctx, "runlog/leaf/", func(_ string, v []byte) error { return t.add(v) })
	if err != nil {
		return 0, wire.Hash{}, err
	}
	root, err := t.root()
	return t.n, root, err
}
