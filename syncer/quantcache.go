package syncer

import (
	"encoding/json"
	"sync"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// The quantCache keeps, for each input a commit quantized, what a later
// round's stale rule needs to compare it without reading and decoding its
// payload again: the first values of its quantized form (a prefix of
// quantCachePrefix chunks at least, 1/256 of the values for long ones),
// the suffix sums of squares at those chunks' boundaries and its exact
// norm — enough for similar's early exit (copies.go), which proves honest
// pairs dissimilar within a few thousand values. When the prefix does not
// decide, the stale rule reads and decodes the payload as without the
// cache. Only the prefix is kept (not all the values): 256 KiB per input
// of any size, so the default budget holds about a thousand inputs where
// the full forms would hold seven of 8.65M values.
//
// Entries are keyed by what determines the decoded values exactly: the
// payload's hash, and the fragment's layout and the run's codec. A hit
// changes no verdict (the early exit's decision is a proof, the rest falls
// back), so a node with a cold cache — after a restart, or re-executing a
// commit it did not make — computes the same commit, only slower.

// DefaultQuantCacheBytes is the quantCache's default budget (Config.QuantCacheBytes).
const DefaultQuantCacheBytes = 256 << 20

// quantCachePrefix is the least number of chunks an entry keeps.
const quantCachePrefix = 16

// payloadKey names an input's decoded values exactly: its payload's hash,
// and the fragment's layout and the run's codec (layoutKey).
type payloadKey struct {
	payload wire.Hash
	layout  wire.Hash
}

type quantCache struct {
	mu sync.Mutex
	sizedLRU[payloadKey, *quantized]
	hits int64
	miss int64
}

func newQuantCache(limit int64) *quantCache {
	return &quantCache{sizedLRU: newSizedLRU[payloadKey, *quantized](limit)}
}

// layoutKey hashes what, beside the payload, decides an input's values.
func layoutKey(r *machine.Run, fs *machine.RunFragment) wire.Hash {
	b, err := json.Marshal(struct {
		Codec  *machine.RuleRef   `json:"codec"`
		Layout machine.FragLayout `json:"layout"`
	}{r.Codec, fs.FragLayout})
	if err != nil {
		return wire.Hash{} // not reached (plain data); a zero key matches nothing kept
	}
	return wire.ContentHash(b)
}

// prefixOf is the entry kept for q: a copy of its first integers (computed
// here if they were not yet) and of its bounds.
func prefixOf(q *quantized) *quantized {
	keep := prefixLen(q.n)
	if keep == q.n {
		q.full()
	} else {
		q.upto(keep)
	}
	chunks := (keep + simChunk - 1) / simChunk
	p := &quantized{n: q.n, zero: q.zero, norm: q.norm, q: append([]int32(nil), q.q[:keep]...),
		sq: append([]int64(nil), q.sq[:chunks]...), hi: append([]float64(nil), q.hi[:chunks+1]...)}
	p.lo = p.hi
	if &q.lo[0] != &q.hi[0] {
		p.lo = append([]float64(nil), q.lo[:chunks+1]...)
	}
	return p
}

// prefixLen is how many of n values' integers a kept prefix holds: at
// least quantCachePrefix chunks, and 1/256 of the values (whole chunks).
func prefixLen(n int) int {
	return min(n, max(quantCachePrefix*simChunk, (n/256+simChunk-1)/simChunk*simChunk))
}

// get returns the entry for the payload under the layout key (nil: none).
func (c *quantCache) get(payload, layout wire.Hash) *quantized {
	if c == nil || layout.IsZero() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q, ok := c.sizedLRU.get(payloadKey{payload, layout})
	if !ok {
		c.miss++
		return nil
	}
	c.hits++
	return q
}

// put keeps q's prefix for the payload, evicting the least recently used
// entries past the budget.
func (c *quantCache) put(payload, layout wire.Hash, q *quantized) {
	if c == nil || c.limit <= 0 || layout.IsZero() || q == nil {
		return
	}
	k := payloadKey{payload, layout}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sizedLRU.get(k); ok {
		return
	}
	p := prefixOf(q)
	c.add(k, p, int64(4*len(p.q)+8*len(p.sq)+16*len(p.hi))+256)
}

// keep puts every input of fc that qs quantized (keyed by its record's
// payload hash).
func (c *quantCache) keep(r *machine.Run, fs *machine.RunFragment, recs map[string]machine.Record, fc *wire.FragmentCommit, qs *commitQuant) {
	if c == nil || c.limit <= 0 {
		return
	}
	lk := layoutKey(r, fs)
	for j, in := range fc.Inputs {
		if qs.done[j] && qs.q[j] != nil {
			if rec, ok := recs[in.TrainerDID]; ok {
				c.put(rec.PayloadHash, lk, qs.q[j])
			}
		}
	}
}

// QuantCacheStats returns the stale rule's cache hits and misses since the
// node started (quantcache.go).
func (n *Node) QuantCacheStats() (hits, misses int64) {
	if n.quants == nil {
		return 0, 0
	}
	n.quants.mu.Lock()
	defer n.quants.mu.Unlock()
	return n.quants.hits, n.quants.miss
}
