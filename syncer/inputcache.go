package syncer

import (
	"encoding/json"
	"math/big"
	"slices"
	"sync"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// The input cache keeps, for each submission this node accepted (Submit),
// what a commit needs of that input alone, so that the commit does not
// compute it again: that its payload is bound to its record's task,
// trainer, round and fragment; that the run's per-submission verifiers
// accepted its values; and the copy rule's read pass over it (the largest
// magnitude, each chunk's bounds and the first integers, quantizeLazy).
// Each is a function of the payload's bytes and the run's fixed
// parameters only, so a hit changes no verdict: entries are keyed by the
// payload's hash and the fragment's layout and the run's codec (what
// decides the values, layoutKey), and the verifiers' verdict holds only
// for the same verifiers (plugin hash and params, verifiersKey) and the
// binding only for the same record fields. Only accepted submissions are
// kept, so an entry says "passed"; anything that depends on the round
// (evidence, the copy and stale comparisons) is decided at the commit.
//
// A miss — the node restarted, the entry was evicted, or the payload came
// from another node — takes the full path: a commit computed warm, cold
// and after a restart writes the same bytes. Validators' re-execution and
// replay never read it. Nothing is persisted.

// DefaultInputCacheBytes is the input cache's default budget
// (Config.InputCacheBytes): an input of 8.65M f32 values takes ≈ 0.3 MiB
// (its first 64 Ki integers and 2 × 2,113 chunk bounds), so 128 MiB holds
// the inputs of ≈ 70 such rounds at K = 6.
const DefaultInputCacheBytes = 128 << 20

// binding is the record fields a payload's binding was checked against.
type binding struct {
	task, trainer   string
	round, fragment uint64
}

// inputFacts is what the input cache keeps of one accepted payload.
type inputFacts struct {
	bound binding
	// verified names the per-submission verifiers that accepted the
	// payload's values (verifiersKey).
	verified wire.Hash
	// quantDone: the copy rule's read pass ran at ingest; q is its result
	// (nil: a value is not finite), a snapshot without its source
	// (ingestQuant).
	quantDone bool
	q         *quantized
}

// skips says which of checkInput's checks the facts answer for rec under
// the verifiers vk (a nil receiver answers none).
func (f *inputFacts) skips(rec *machine.Record, vk wire.Hash) inputSkips {
	if f == nil {
		return inputSkips{}
	}
	return inputSkips{
		binding:   f.bound == binding{rec.TaskID, rec.TrainerDID, rec.Round, rec.FragmentIndex},
		verifiers: !vk.IsZero() && f.verified == vk,
	}
}

// inputSkips are the checks of checkInput already known to pass.
type inputSkips struct{ binding, verifiers bool }

func (f *inputFacts) bytes() int64 {
	b := int64(256 + len(f.bound.task) + len(f.bound.trainer))
	if f.q != nil {
		b += int64(4*len(f.q.q) + 8*len(f.q.sq) + 8*len(f.q.hi))
		if len(f.q.lo) > 0 && &f.q.lo[0] != &f.q.hi[0] {
			b += int64(8 * len(f.q.lo))
		}
	}
	return b
}

type inputCache struct {
	mu sync.Mutex
	sizedLRU[payloadKey, *inputFacts]
	hits, miss int64
}

func newInputCache(limit int64) *inputCache {
	return &inputCache{sizedLRU: newSizedLRU[payloadKey, *inputFacts](limit)}
}

// get returns the facts kept for the payload under the layout key (nil:
// none, or the cache is off).
func (c *inputCache) get(payload, layout wire.Hash) *inputFacts {
	if c == nil || layout.IsZero() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.sizedLRU.get(payloadKey{payload, layout})
	if !ok {
		c.miss++
		return nil
	}
	c.hits++
	return f
}

// put keeps f for the payload under the layout key.
func (c *inputCache) put(payload, layout wire.Hash, f *inputFacts) {
	if c == nil || c.limit <= 0 || layout.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(payloadKey{payload, layout}, f, f.bytes())
}

// InputCacheStats returns the input cache's hits and misses at commits
// since the node started (inputcache.go).
func (n *Node) InputCacheStats() (hits, misses int64) {
	if n.inputs == nil {
		return 0, 0
	}
	n.inputs.mu.Lock()
	defer n.inputs.mu.Unlock()
	return n.inputs.hits, n.inputs.miss
}

// verifiersKey hashes run r's per-submission verifiers (name, plugin hash
// and params, in order): a payload's verdict under them is a function of
// its values and these. Zero when the run has none.
func verifiersKey(r *machine.Run) wire.Hash {
	var vs []RuleRef
	for _, v := range r.Verifiers {
		if !v.RoundLevel {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return wire.Hash{}
	}
	b, err := json.Marshal(vs)
	if err != nil {
		return wire.Hash{} // not reached (plain data); a zero key matches nothing kept
	}
	return wire.ContentHash(b)
}

// ingestFacts starts the facts of an input being accepted: its binding,
// and — when run r's copy rule is on — the copy rule's read pass over its
// values (quantizeLazy), whose finiteness answers the built-in Finite
// verifier too (finite). The verifiers' verdict is added once they accept.
func ingestFacts(r *machine.Run, fs *machine.RunFragment, rec binding, values []byte) (f *inputFacts, finite bool) {
	f = &inputFacts{bound: rec}
	q, finite := readPass(r, fs, values)
	if q != nil {
		f.quantDone, f.q = true, ingestQuant(q)
	}
	return f, finite
}

// readPass is the copy rule's read pass over an input's values
// (quantizeLazy) when run r's copy rule is on; finite says it ran and
// found every value finite (then q is its result; nil otherwise).
func readPass(r *machine.Run, fs *machine.RunFragment, values []byte) (q *quantized, finite bool) {
	if r.TaskSpec().CopyThresholdPpm() >= wire.CopyRuleOff || fs.Dtype.Size() == 0 || int64(len(values)) != fs.N*int64(fs.Dtype.Size()) {
		return nil, false
	}
	lq, ok := quantizeLazy(values, fs.Dtype, int(fs.N))
	if !ok {
		return nil, false
	}
	return &lq, true
}

// ingestQuant is what the input cache keeps of q: its bounds and the
// prefix of integers the quantCache keeps (prefixLen), without its source.
// resume continues it over the same values at a commit.
func ingestQuant(q *quantized) *quantized {
	keep := prefixLen(q.n)
	if keep == q.n {
		q.full()
	} else {
		q.upto(keep)
	}
	if q.zero {
		return &quantized{n: q.n, zero: true}
	}
	p := &quantized{n: q.n, norm: q.norm, bf16: q.bf16, scale: q.scale,
		q: slices.Clone(q.q[:keep]), sq: slices.Clone(q.sq[:(keep+simChunk-1)/simChunk]), hi: slices.Clone(q.hi)}
	p.lo = p.hi
	if &q.lo[0] != &q.hi[0] {
		p.lo = slices.Clone(q.lo)
	}
	return p
}

// resume is the snapshot p continued over src, the same values it was
// computed from (want bytes; nil when p needs none): a quantized exactly
// as quantizeLazy(src) would give, with p's prefix already computed. The
// snapshot is not changed (its slices are copied).
func (p *quantized) resume(src []byte) *quantized {
	chunks := (p.n + simChunk - 1) / simChunk
	if p.zero {
		return &quantized{n: p.n, zero: true, q: make([]int32, p.n), norm: new(big.Int), sq: make([]int64, chunks),
			hi: make([]float64, chunks+1), lo: make([]float64, chunks+1)}
	}
	q := &quantized{n: p.n, norm: p.norm, bf16: p.bf16, scale: p.scale, q: slices.Clone(p.q), sq: slices.Clone(p.sq),
		hi: slices.Clone(p.hi)}
	q.lo = q.hi
	if &p.lo[0] != &p.hi[0] {
		q.lo = slices.Clone(p.lo)
	}
	if len(q.q) < q.n {
		q.src = src
	}
	return q
}

// complete says whether the snapshot holds every integer (resume needs no
// source).
func (p *quantized) complete() bool { return p.zero || len(p.q) == p.n }
