package syncer

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// TestIngestQuantResume: the ingest snapshot of an input's read pass,
// resumed over the same values at a commit, compares with every other
// input exactly as the values quantized afresh do (the same verdict, early
// exit and cosine), completes to the same integers, norm and bounds, and
// leaves the snapshot as it was — for F32 and BF16, inputs shorter than
// the kept prefix, just longer, much longer, all-zero, and near copies.
func TestIngestQuantResume(t *testing.T) {
	bf16 := func(v []float32) []byte {
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(x)>>16))
		}
		return b
	}
	scaled := func(v []float32, s float32) []float32 {
		out := slices.Clone(v)
		for i := range out {
			out[i] *= s
		}
		return out
	}
	for _, n := range []int{100, quantCachePrefix*simChunk + 7, 300_000} {
		for _, dt := range []machine.Dtype{machine.F32, machine.BF16} {
			enc := f32le
			if dt == machine.BF16 {
				enc = bf16
			}
			base := gauss(uint64(n), n, 1e-3)
			inputs := [][]byte{enc(base), enc(gauss(uint64(n)+1, n, 1e-3)), enc(scaled(base, 1.0001)), enc(make([]float32, n))}
			for a, va := range inputs {
				lazy, ok := quantizeLazy(va, dt, n)
				if !ok {
					t.Fatal("finite values refused")
				}
				snap := ingestQuant(&lazy)
				before := *snap
				for b, vb := range inputs {
					fresh, _ := quantizeLazy(va, dt, n)
					other, _ := quantizeLazy(vb, dt, n)
					other2, _ := quantizeLazy(vb, dt, n)
					src := va
					if snap.complete() {
						src = nil
					}
					resumed := snap.resume(src)
					want := compareQuantized(&fresh, &other, wire.DefaultCopyMinCosinePpm)
					got := compareQuantized(resumed, &other2, wire.DefaultCopyMinCosinePpm)
					if got != want {
						t.Fatalf("n %d %s inputs %d, %d: resumed %+v, fresh %+v", n, dt, a, b, got, want)
					}
					fresh.full()
					resumed.full()
					if !slices.Equal(fresh.q, resumed.q) || !slices.Equal(fresh.sq, resumed.sq) || fresh.norm.Cmp(resumed.norm) != 0 ||
						!slices.Equal(fresh.hi, resumed.hi) || fresh.zero != resumed.zero {
						t.Fatalf("n %d %s input %d: the resumed integers differ", n, dt, a)
					}
				}
				if len(snap.q) != len(before.q) || len(snap.sq) != len(before.sq) || snap.src != nil || snap.norm != before.norm {
					t.Fatalf("n %d %s input %d: the snapshot changed", n, dt, a)
				}
			}
		}
	}
}

// TestInputCacheBudget: the input cache holds entries within its byte
// budget, lets the least recently used go first, keys by payload and
// layout, refuses an entry larger than the budget, and a nil or zero-limit
// cache keeps nothing.
func TestInputCacheBudget(t *testing.T) {
	lazy, _ := quantizeLazy(f32le(gauss(3, 100_000, 1e-3)), machine.F32, 100_000)
	f := &inputFacts{bound: binding{"task", "did:x", 1, 0}, quantDone: true, q: ingestQuant(&lazy)}
	c := newInputCache(3 * f.bytes())
	lk := wire.ContentHash([]byte("layout"))
	h := func(i byte) wire.Hash { return wire.ContentHash([]byte{i}) }
	for i := byte(0); i < 3; i++ {
		c.put(h(i), lk, f)
	}
	if c.get(h(0), lk) == nil { // 0 becomes the most recent
		t.Fatal("entry 0 missing")
	}
	c.put(h(3), lk, f) // evicts 1
	if c.used > c.limit || c.len() != 3 || c.get(h(1), lk) != nil || c.get(h(0), lk) == nil || c.get(h(3), lk) == nil {
		t.Fatalf("used %d of %d, %d entries; LRU order not kept", c.used, c.limit, c.len())
	}
	if c.get(h(0), wire.ContentHash([]byte("other layout"))) != nil || c.get(h(0), wire.Hash{}) != nil {
		t.Fatal("an entry matched another layout")
	}
	small := newInputCache(f.bytes() - 1)
	small.put(h(0), lk, f)
	if small.len() != 0 {
		t.Fatal("an entry larger than the budget was kept")
	}
	var off *inputCache
	off.put(h(0), lk, f)
	if off.get(h(0), lk) != nil {
		t.Fatal("a nil cache kept something")
	}
	if hits, misses := c.hits, c.miss; hits != 3 || misses != 2 {
		t.Fatalf("hits %d misses %d", hits, misses)
	}
}
