package syncer

import "container/list"

// sizedLRU is a map bounded by the bytes its entries declare: adding past
// the limit lets the least recently used entries go first. It is the
// bookkeeping of the node's speed-only caches (quantcache.go,
// inputcache.go); it is not safe for concurrent use (its owner locks).
type sizedLRU[K comparable, V any] struct {
	limit, used int64
	order       *list.List // of *lruEntry; front: most recently used
	m           map[K]*list.Element
}

type lruEntry[K comparable, V any] struct {
	key   K
	val   V
	bytes int64
}

func newSizedLRU[K comparable, V any](limit int64) sizedLRU[K, V] {
	return sizedLRU[K, V]{limit: limit, order: list.New(), m: map[K]*list.Element{}}
}

// get returns k's value and makes it the most recently used.
func (c *sizedLRU[K, V]) get(k K) (V, bool) {
	e, ok := c.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*lruEntry[K, V]).val, true
}

// add keeps v under k (replacing what k held) as the most recently used,
// then evicts the least recently used entries past the limit. An entry
// larger than the whole limit is not kept.
func (c *sizedLRU[K, V]) add(k K, v V, bytes int64) {
	if bytes > c.limit {
		return
	}
	if old, ok := c.m[k]; ok {
		c.used -= old.Value.(*lruEntry[K, V]).bytes
		c.order.Remove(old)
	}
	c.m[k] = c.order.PushFront(&lruEntry[K, V]{key: k, val: v, bytes: bytes})
	c.used += bytes
	for c.used > c.limit {
		old := c.order.Back()
		oe := old.Value.(*lruEntry[K, V])
		c.order.Remove(old)
		delete(c.m, oe.key)
		c.used -= oe.bytes
	}
}

// len is the number of entries kept.
func (c *sizedLRU[K, V]) len() int { return len(c.m) }
