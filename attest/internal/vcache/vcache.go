// Package vcache is the bounded, expiry-aware store the attestation
// verifiers keep their verified intermediate results in (certificate chains
// to a pinned root, verified collateral) and their parsed inputs.
//
// An entry is keyed by a SHA-256 over a domain and every byte its
// verification depended on (NewKey, length-prefixed), so a cached outcome can
// only be found again for exactly the same input. Each entry carries the
// window [from, until] of the verification times it stays true for — the
// intersection of the validity of every certificate in it and of every
// collateral's next update — and Get returns it only for a time inside that
// window: a verification time before or after it is a miss, and the caller
// verifies again (and fails as it would have without a cache). Callers store
// only what verified. The cache holds at most a fixed number of entries and
// evicts the least recently used one first. A nil *Cache caches nothing.
package vcache

import (
	"container/list"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"hash"
	"sync"
	"time"
)

// Key identifies an entry: SHA-256 over a domain and length-prefixed parts.
type Key [32]byte

// Builder hashes the parts of a key.
type Builder struct{ h hash.Hash }

// NewBuilder starts a key in domain (which names the kind of entry and its
// version, so keys of different kinds never collide).
func NewBuilder(domain string) *Builder {
	b := &Builder{h: sha256.New()}
	return b.String(domain)
}

// Bytes adds p, prefixed with its length.
func (b *Builder) Bytes(p []byte) *Builder {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(p)))
	b.h.Write(n[:])
	b.h.Write(p)
	return b
}

// String adds s, prefixed with its length.
func (b *Builder) String(s string) *Builder {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	b.h.Write(n[:])
	_, _ = b.h.Write([]byte(s))
	return b
}

// Sum returns the key.
func (b *Builder) Sum() Key {
	var k Key
	b.h.Sum(k[:0])
	return k
}

// NewKey is NewBuilder(domain).Bytes(p) for each part, summed.
func NewKey(domain string, parts ...[]byte) Key {
	b := NewBuilder(domain)
	for _, p := range parts {
		b.Bytes(p)
	}
	return b.Sum()
}

// Window returns the intersection of the validity periods of certs: the
// latest NotBefore and the earliest NotAfter. With no certificate it is
// Always.
func Window(certs ...*x509.Certificate) (from, until time.Time) {
	from, until = Always()
	for _, c := range certs {
		from, until = Narrow(from, until, c.NotBefore, c.NotAfter)
	}
	return from, until
}

// Narrow intersects the window [from, until] with [nb, na]; a zero bound
// of the second leaves that side as it is.
func Narrow(from, until, nb, na time.Time) (time.Time, time.Time) {
	if !nb.IsZero() && nb.After(from) {
		from = nb
	}
	if !na.IsZero() && na.Before(until) {
		until = na
	}
	return from, until
}

// Always is the window of an entry that does not expire (a parse result:
// nothing in it is trusted).
func Always() (from, until time.Time) {
	return time.Unix(0, 0).AddDate(-2000, 0, 0).UTC(), time.Unix(1<<40, 0).UTC()
}

// Cache is a bounded LRU of verified (or parsed) values with validity
// windows. It is safe for concurrent use.
type Cache[V any] struct {
	mu    sync.Mutex
	max   int
	ll    list.List // of *entry[V], most recently used first
	items map[Key]*list.Element
	stats Stats
}

type entry[V any] struct {
	key         Key
	val         V
	from, until time.Time
}

// Stats counts lookups.
type Stats struct {
	Hits, Misses, Expired, Evictions uint64
}

// New returns a cache holding at most max entries; max <= 0 returns nil
// (a cache that holds nothing).
func New[V any](max int) *Cache[V] {
	if max <= 0 {
		return nil
	}
	return &Cache[V]{max: max, items: make(map[Key]*list.Element)}
}

// Get returns the value stored under k if at lies inside its window
// (from <= at <= until, the bounds included as the verifiers include them).
// Outside the window it is a miss; the entry stays, since verification
// times are the caller's and need not increase.
func (c *Cache[V]) Get(k Key, at time.Time) (v V, ok bool) {
	if c == nil {
		return v, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, found := c.items[k]
	if !found {
		c.stats.Misses++
		return v, false
	}
	e := el.Value.(*entry[V])
	if at.Before(e.from) || at.After(e.until) {
		c.stats.Expired++
		return v, false
	}
	c.ll.MoveToFront(el)
	c.stats.Hits++
	return e.val, true
}

// Put stores v under k for verification times in [from, until]; an empty
// window stores nothing. When full, the least recently used entry goes.
func (c *Cache[V]) Put(k Key, v V, from, until time.Time) {
	if c == nil || until.Before(from) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		e := el.Value.(*entry[V])
		e.val, e.from, e.until = v, from, until
		c.ll.MoveToFront(el)
		return
	}
	c.items[k] = c.ll.PushFront(&entry[V]{key: k, val: v, from: from, until: until})
	for c.ll.Len() > c.max {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.items, last.Value.(*entry[V]).key)
		c.stats.Evictions++
	}
}

// Len is the number of entries held.
func (c *Cache[V]) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

// Max is the bound (0 for a nil cache).
func (c *Cache[V]) Max() int {
	if c == nil {
		return 0
	}
	return c.max
}

// Stats returns the lookup counters.
func (c *Cache[V]) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// ParseCertificate is x509.ParseCertificate through c, keyed by the SHA-256
// of der. Only certificates that parsed are kept; nothing about them is
// trusted. The result is shared between callers and must not be modified.
func ParseCertificate(c *Cache[*x509.Certificate], der []byte) (*x509.Certificate, error) {
	if c == nil {
		return x509.ParseCertificate(der)
	}
	k := Key(sha256.Sum256(der))
	if cert, ok := c.Get(k, time.Time{}); ok {
		return cert, nil
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	from, until := Always()
	c.Put(k, cert, from, until)
	return cert, nil
}
