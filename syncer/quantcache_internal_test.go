package syncer

import (
	"math/rand/v2"
	"testing"

	"github.com/tenzro/train/wire"
)

// TestQuantCacheBudget: entries are prefixes (of quantCachePrefix chunks,
// or 1/256 of long inputs), the budget holds, the least recently used go
// first, and a kept prefix decides like the full values or not at all.
func TestQuantCacheBudget(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	full := newQuantized(randQ(r, 40*simChunk+7, 1e5))
	p := prefixOf(&full)
	if len(p.q) != quantCachePrefix*simChunk || p.n != full.n || p.norm.Cmp(full.norm) != 0 || len(p.hi) != quantCachePrefix+1 {
		t.Fatalf("prefix: %d values of %d, %d suffix sums", len(p.q), p.n, len(p.hi))
	}
	if long := newQuantized(make([]int32, 300*quantCachePrefix*simChunk)); len(prefixOf(&long).q) != 300*quantCachePrefix*simChunk/256+simChunk-(300*quantCachePrefix*simChunk/256)%simChunk {
		t.Fatalf("a long input keeps %d values", len(prefixOf(&long).q))
	}
	small := newQuantized(randQ(r, 100, 1e5))
	if ps := prefixOf(&small); len(ps.q) != 100 {
		t.Fatalf("a short input keeps %d of 100 values", len(ps.q))
	}
	entry := int64(4*len(p.q)+8*len(p.sq)+16*len(p.hi)) + 256
	c := newQuantCache(3 * entry)
	lk := wire.ContentHash([]byte("layout"))
	h := func(i byte) wire.Hash { return wire.ContentHash([]byte{i}) }
	for i := byte(0); i < 3; i++ {
		c.put(h(i), lk, &full)
	}
	if c.get(h(0), lk) == nil { // 0 becomes the most recent
		t.Fatal("entry 0 missing")
	}
	c.put(h(3), lk, &full) // evicts 1
	if c.used > c.limit || c.get(h(1), lk) != nil || c.get(h(0), lk) == nil || c.get(h(3), lk) == nil {
		t.Fatalf("used %d of %d; LRU order not kept", c.used, c.limit)
	}
	if c.get(h(0), wire.ContentHash([]byte("other layout"))) != nil {
		t.Fatal("an entry matched another layout")
	}
	var off *quantCache
	off.put(h(0), lk, &full)
	if off.get(h(0), lk) != nil {
		t.Fatal("a nil cache kept something")
	}
	// The kept prefix against the full values: an honest pair is decided
	// (not similar); an identical pair is left to the payload.
	other := newQuantized(randQ(r, full.n, 1e5))
	if cmp := compareQuantized(&other, c.get(h(0), lk), wire.DefaultCopyMinCosinePpm); !cmp.decided || cmp.sim {
		t.Fatalf("honest pair on the prefix: %+v", cmp)
	}
	if cmp := compareQuantized(&full, c.get(h(0), lk), wire.DefaultCopyMinCosinePpm); cmp.decided {
		t.Fatalf("a replay decided on the prefix: %+v", cmp)
	}
}
