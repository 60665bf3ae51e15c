package machine

import (
	"bytes"
	"context"
	"errors"
	"sort"
)

// Overlay is a KV that buffers writes over a parent KV: reads see the
// buffered writes first, Commit only buffers, and Flush writes everything to
// the parent in one batch (in bytewise key order within each key space).
// The machine runs each transition in an overlay, so a refused transition
// leaves its KV untouched. It is not safe for concurrent use.
type Overlay struct {
	parent KV
	w      map[Keyspace]map[string][]byte // nil value: deleted
}

// NewOverlay starts an empty overlay over parent.
func NewOverlay(parent KV) *Overlay {
	return &Overlay{parent: parent, w: map[Keyspace]map[string][]byte{}}
}

// Get implements KV.
func (o *Overlay) Get(ctx context.Context, ks Keyspace, key []byte) ([]byte, error) {
	if m, ok := o.w[ks]; ok {
		if v, ok := m[string(key)]; ok {
			if v == nil {
				return nil, ErrNotFound
			}
			return append([]byte(nil), v...), nil
		}
	}
	return o.parent.Get(ctx, ks, key)
}

// Scan implements KV: the parent's keys and the overlay's, merged in key
// order, buffered values and deletions taking precedence.
func (o *Overlay) Scan(ctx context.Context, ks Keyspace, prefix []byte, fn func(key, value []byte) error) error {
	var mine []string
	for k := range o.w[ks] {
		if bytes.HasPrefix([]byte(k), prefix) {
			mine = append(mine, k)
		}
	}
	sort.Strings(mine)
	w := o.w[ks]
	i := 0
	emit := func(upTo []byte) error { // buffered keys below upTo (all when nil)
		for i < len(mine) && (upTo == nil || mine[i] < string(upTo)) {
			if v := w[mine[i]]; v != nil {
				if err := fn([]byte(mine[i]), v); err != nil {
					return err
				}
			}
			i++
		}
		return nil
	}
	err := o.parent.Scan(ctx, ks, prefix, func(k, v []byte) error {
		if err := emit(k); err != nil {
			return err
		}
		if i < len(mine) && mine[i] == string(k) {
			nv := w[mine[i]]
			i++
			if nv == nil {
				return nil
			}
			return fn(k, nv)
		}
		return fn(k, v)
	})
	if err != nil {
		return err
	}
	return emit(nil)
}

// Commit implements KV: it buffers the batch's writes.
func (o *Overlay) Commit(_ context.Context, b *Batch) error {
	for _, op := range b.Ops {
		m := o.w[op.KS]
		if m == nil {
			m = map[string][]byte{}
			o.w[op.KS] = m
		}
		if op.Value == nil {
			m[string(op.Key)] = nil
		} else {
			m[string(op.Key)] = append([]byte{}, op.Value...)
		}
	}
	return nil
}

// Close implements KV; it does nothing.
func (o *Overlay) Close() error { return nil }

// Len is the number of buffered writes.
func (o *Overlay) Len() int {
	n := 0
	for _, m := range o.w {
		n += len(m)
	}
	return n
}

// Batch renders the buffered writes as one batch: key spaces in name
// order, keys in bytewise order.
func (o *Overlay) Batch() *Batch {
	var b Batch
	kss := make([]string, 0, len(o.w))
	for ks := range o.w {
		kss = append(kss, string(ks))
	}
	sort.Strings(kss)
	for _, ks := range kss {
		m := o.w[Keyspace(ks)]
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if v := m[k]; v == nil {
				b.Delete(Keyspace(ks), []byte(k))
			} else {
				b.Set(Keyspace(ks), []byte(k), v)
			}
		}
	}
	return &b
}

// Flush commits the buffered writes to the parent in one batch and empties
// the overlay.
func (o *Overlay) Flush(ctx context.Context) error {
	if o.Len() == 0 {
		return nil
	}
	if err := o.parent.Commit(ctx, o.Batch()); err != nil {
		return err
	}
	o.w = map[Keyspace]map[string][]byte{}
	return nil
}

// readOnly is a KV view that refuses writes.
type readOnly struct{ KV }

func (readOnly) Commit(context.Context, *Batch) error {
	return errors.New("syncer: write to a read-only view of the committed state")
}

// ReadOnly wraps kv so that Commit fails.
func ReadOnly(kv KV) KV { return readOnly{kv} }
