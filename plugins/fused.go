package plugins

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"lukechampine.com/blake3"
	"lukechampine.com/blake3/guts"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/internal/b3leaf"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// The finalize in one sweep. When a finalize's rule runs natively (the
// built-in Mean or TrimmedMean on mapped F32 inputs) and its outer step
// does too (the built-in Nesterov on mapped F32 weights and momentum), the
// engine does not write the N-value aggregate and read it back twice (its
// hash, the step): each worker takes the next block of leafCoords
// coordinates, computes the block's aggregate from the inputs into a buffer
// that stays in its cache, hashes it as one complete BLAKE3 subtree, and runs
// the outer step of the block into the new weights and momentum. The
// subtrees' chaining values are merged into AggregateHash at the end
// (treeHash), which is BLAKE3 of the whole aggregate by construction of the
// BLAKE3 tree.
//
// Nothing else changes: both plugin calls are still made, in the same
// order, with the same instantiation, allocations and budgets, and each is
// charged its native line exactly as when it runs apart — the sweep only
// moves the aggregate's computation from the rule's call to the step's. The
// aggregate's call records what it would have computed (a fusion carried in
// the context); the step's call runs the sweep when its own native path is
// taken on the whole range. Any other outcome — a budget that would run out,
// a chunked step, state not in memory, a step that fails before it runs —
// computes the aggregate first (materialize) and continues exactly as today.

// leafCoords is the coordinates of one sweep block: 16 KiB of aggregate,
// 16 BLAKE3 chunks, a complete subtree of the aggregate's hash tree.
const (
	leafBytes  = guts.MaxSIMD * guts.ChunkSize
	leafCoords = leafBytes / 4
)

// fusedSweeps counts finalizes computed in one sweep (tests check that it
// runs).
var fusedSweeps atomic.Int64

// A blockKernel gives each worker its function computing the aggregate of
// coordinates [b0, b1) into out (b1−b0 values), with its own scratch.
type blockKernel func() func(b0, b1 int, out []float32)

// runKernel computes the n-coordinate aggregate of kern into out on every
// core.
func runKernel(kern blockKernel, n int, out []float32) {
	parallel(n, func(lo, hi int) {
		agg := kern()
		for b0 := lo; b0 < hi; b0 += leafCoords {
			b1 := min(b0+leafCoords, hi)
			agg(b0, b1, out[b0:b1])
		}
	})
}

// fusion is one finalize's plan to sweep: set by the aggregate's native
// path, run by the outer step's.
type fusion struct {
	n       int
	pending bool        // the aggregate is owed: kernel into dst
	kernel  blockKernel // the rule's kernel over coordinates [0, n)
	dst     dest        // where a materialized aggregate goes
	swept   bool        // the sweep ran: the aggregate exists only as hash
	hash    wire.Hash   // its ContentHash, when swept
	// head, when set, is the bytes that precede the new weights in their
	// blob (syncer.FinalizeInput.WeightsHeader): the sweep then hashes the
	// two new blobs too, and state holds their hashes.
	head  []byte
	state *syncer.StateHashes
	// srcs is the inputs the kernel reads in place (4 bytes a coordinate):
	// the sweep prefetches their next block.
	srcs []*source
}

type fusionKey struct{}

// withFusion marks ctx: a native aggregate of the whole range made with it
// is left to fz.
func withFusion(ctx context.Context, fz *fusion) context.Context {
	return context.WithValue(ctx, fusionKey{}, fz)
}

// fusionOf is ctx's fusion, or nil.
func fusionOf(ctx context.Context) *fusion {
	fz, _ := ctx.Value(fusionKey{}).(*fusion)
	return fz
}

// owe records a native aggregate of [c0, c1) instead of computing it, when
// ctx carries a fusion and the call covers the whole range.
// srcs is the inputs kern reads (see fusion.srcs).
func (fz *fusion) owe(c0, c1 int, kern blockKernel, dst dest, srcs []*source) bool {
	if fz == nil || fz.pending || fz.swept || c0 != 0 || c1 != fz.n {
		return false
	}
	fz.pending, fz.kernel, fz.dst, fz.srcs = true, kern, dst, srcs
	return true
}

// materialize computes an owed aggregate into its destination (a path
// that needs its bytes).
func (fz *fusion) materialize() {
	if fz == nil || !fz.pending {
		return
	}
	fz.pending = false
	runKernel(fz.kernel, fz.n, f32View(fz.dst.bytes()))
}

// sweepable reports whether the owed aggregate can be swept with an F32
// step reading w and m in place into wOut and mOut.
func (fz *fusion) sweepable(c0, c1 int, w, m *source, wOut, mOut dest) bool {
	inPlace := func(s *source) bool {
		return s.r == nil && s.b != nil && int64(len(s.b)) >= int64(fz.n)*4 && aligned4(s.b)
	}
	return fz != nil && fz.pending && c0 == 0 && c1 == fz.n && inPlace(w) && (m == nil || inPlace(m)) &&
		!wOut.out.prefilled && !mOut.out.prefilled && aligned4(wOut.bytes()) && aligned4(mOut.bytes())
}

// sweep computes the owed aggregate and the F32 outer step together, block
// by block on every core, and the aggregate's hash; the aggregate itself is
// never written out.
func (fz *fusion) sweep(w, m *source, wOut, mOut dest, lr, beta float32, nesterov bool) {
	n := fz.n
	wIn, wo, mo := w.b[:4*n], wOut.bytes(), mOut.bytes()
	var mIn []byte
	if m != nil {
		mIn = m.b[:4*n]
	}
	th := newTreeHash(int64(n) * 4)
	var ws, ms *blobHash
	if fz.head != nil {
		ws, ms = newBlobHash(fz.head, wo[:4*n]), newBlobHash(nil, mo[:4*n])
	}
	blocks := (n + leafCoords - 1) / leafCoords
	// The streams a block reads and writes in memory, prefetched: the
	// kernel's inputs, the weights and momentum, and the new ones (a line
	// read before the step writes it arrives exclusive, so the step's
	// store does not stall on its read for ownership).
	var streams [][]byte
	for _, s := range fz.srcs {
		streams = append(streams, s.b[:4*n])
	}
	streams = append(streams, wIn)
	if mIn != nil {
		streams = append(streams, mIn)
	}
	streams = append(streams, wo[:4*n], mo[:4*n])
	prefetch := sweepPrefetch
	var next atomic.Int64
	claim := func() int { return int(next.Add(sweepRun) - sweepRun) }
	work := func() {
		agg := fz.kernel()
		buf := make([]float32, leafCoords)
		var pf *[3]b3leaf.Lines
		if prefetch {
			pf = prefetchLines(streams)
		}
		// Blocks are claimed in runs of consecutive ones; the next run is
		// claimed as the last block of one starts, so that a block always
		// knows the one it will do next, whose lines its hashes prefetch.
		for lo := claim(); lo < blocks; {
			hi := min(lo+sweepRun, blocks)
			nlo := lo
			for b := lo; b < hi; b++ {
				nb := b + 1
				if nb == hi {
					nlo = claim()
					nb = nlo
				}
				var p [3]leafPrefetch
				if pf != nil && (nb+1)*leafCoords <= n {
					d := uintptr(nb) * leafBytes
					p = [3]leafPrefetch{{&pf[0], d}, {&pf[1], d}, {&pf[2], d}}
				}
				b0 := b * leafCoords
				b1 := min(b0+leafCoords, n)
				g := buf[:b1-b0]
				agg(b0, b1, g)
				gb := unsafe.Slice((*byte)(unsafe.Pointer(&g[0])), 4*len(g))
				th.leaf(b, gb, p[0])
				var mi []byte
				if mIn != nil {
					mi = mIn[4*b0 : 4*b1]
				}
				nesterovRange(machine.F32, wIn[4*b0:4*b1], wo[4*b0:4*b1], mi, mo[4*b0:4*b1], gb, 0, b1-b0, m != nil, lr, beta, nesterov)
				if ws != nil {
					ws.written(int64(4*b0), int64(4*b1), p[1])
					ms.written(int64(4*b0), int64(4*b1), p[2])
				}
			}
			lo = nlo
		}
	}
	workers := min(runtime.GOMAXPROCS(0), blocks)
	var wg sync.WaitGroup
	for i := 1; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
	fz.pending, fz.swept, fz.hash = false, true, th.sum()
	if ws != nil {
		fz.state = &syncer.StateHashes{Weights: ws.sum(), Momentum: ms.sum()}
	}
	fusedSweeps.Add(1)
}

// sweepPrefetch turns on the sweep's prefetch. The sweep's memory-bound
// part (the Mean reads K inputs, the step reads and writes weights and
// momentum) and its compute-bound hashing would simply add if a block
// waited for its data: the three leaf hashes of each block prefetch the
// lines of the block the worker does next (b3leaf.CVPrefetch, a few per
// compression), so that the next Mean and step find them in cache
// (BenchmarkSweep's paired runs: 13 % less wall time and CPU on two AMD
// EPYC cores). Only TestSweepModes and BenchmarkSweep turn it off.
var sweepPrefetch = true

// sweepRun is the blocks a sweep worker claims at once: consecutive, so
// that the block after the current one is known (and its streams continue
// the current ones'). Claiming in runs alone changed nothing measurable.
const sweepRun = 8

// leafPrefetch is what one leaf hash prefetches (b3leaf.CVPrefetch): the
// lines at lines[i]+delta; lines nil for none.
type leafPrefetch struct {
	lines *b3leaf.Lines
	delta uintptr
}

// prefetchLines lists the cache lines of block 0 of every stream (the
// first leafBytes of each), stream by stream, spread over the three leaf
// hashes of a sweep block: the first gets the first lines (the kernel's
// inputs, read first). Slots past the lines repeat them from the start;
// lines past the slots are not prefetched (the kernel's slots,
// 3·b3leaf.PrefetchLines = 2592, hold K = 6 inputs and four state streams
// of 256 or 257 lines; with more inputs the last state streams go
// unprefetched, with fewer some lines are prefetched twice). A block moves the list to its next block by delta
// = that block's offset in bytes, the same in every stream (4 bytes a
// coordinate).
func prefetchLines(streams [][]byte) *[3]b3leaf.Lines {
	var all []uintptr
	for _, s := range streams {
		if len(s) < leafBytes {
			continue
		}
		p := uintptr(unsafe.Pointer(&s[0]))
		for l := p &^ 63; l < p+leafBytes; l += 64 {
			all = append(all, l)
		}
	}
	if len(all) == 0 {
		return nil
	}
	pf := new([3]b3leaf.Lines)
	for i := range 3 * b3leaf.PrefetchLines {
		pf[i/b3leaf.PrefetchLines][i%b3leaf.PrefetchLines] = all[i%len(all)]
	}
	return pf
}

// treeHash is BLAKE3-256 of n bytes given as blocks of leafBytes (the last
// may be shorter), each hashed on its own as it is produced, in any order
// and on any goroutine: a full block is a complete subtree of 16 chunks at
// chunk counter 16·i, so its chaining value does not depend on the rest;
// sum merges them as BLAKE3's tree does (a left subtree holds the largest
// power of two of chunks that leaves the right one non-empty).
type treeHash struct {
	n    int64
	cvs  [][8]uint32 // full blocks
	tail []byte      // the last block when shorter (or the whole, n ≤ leafBytes)
}

func newTreeHash(n int64) *treeHash {
	return &treeHash{n: n, cvs: make([][8]uint32, n/leafBytes)}
}

// leaf hashes block i, b (leafBytes, or the rest of n for the last block),
// prefetching pf's lines while it hashes a full block (none for the zero
// leafPrefetch). Distinct blocks may be given concurrently.
func (t *treeHash) leaf(i int, b []byte, pf leafPrefetch) {
	if t.n > leafBytes && len(b) == leafBytes {
		t.cvs[i] = b3leaf.CVPrefetch((*[b3leaf.Size]byte)(b), uint64(i)*guts.MaxSIMD, pf.lines, pf.delta)
		return
	}
	t.tail = append([]byte(nil), b...)
}

// sum is the hash of the n bytes.
func (t *treeHash) sum() wire.Hash {
	if t.n <= leafBytes {
		return blake3.Sum256(t.tail)
	}
	left := leftLen(t.n)
	root := guts.ParentNode(t.cv(0, left), t.cv(left, t.n), &guts.IV, 0)
	root.Flags |= guts.FlagRoot
	words := guts.CompressNode(root)
	var h wire.Hash
	b := guts.WordsToBytes(words)
	copy(h[:], b[:])
	return h
}

// cv is the chaining value of the subtree over bytes [lo, hi): a full
// block, the tail, or a parent of two.
func (t *treeHash) cv(lo, hi int64) [8]uint32 {
	switch l := hi - lo; {
	case l == leafBytes && lo/leafBytes < int64(len(t.cvs)):
		return t.cvs[lo/leafBytes]
	case l < leafBytes: // the tail (every shorter range ends at n)
		var buf [leafBytes]byte
		copy(buf[:], t.tail)
		return guts.ChainingValue(guts.CompressBuffer(&buf, len(t.tail), &guts.IV, uint64(lo/guts.ChunkSize), 0))
	default:
		left := leftLen(l)
		return guts.ChainingValue(guts.ParentNode(t.cv(lo, lo+left), t.cv(lo+left, hi), &guts.IV, 0))
	}
}

// leftLen is the bytes of the left subtree of a BLAKE3 tree over l >
// ChunkSize bytes: the largest power-of-two number of chunks below l.
func leftLen(l int64) int64 {
	left := int64(guts.ChunkSize)
	for 2*left < l {
		left *= 2
	}
	return left
}

// blobHash is BLAKE3-256 of a blob made of head followed by data, hashed
// while data is produced by the sweep's blocks, in any order and on any
// goroutine (the new weights' safetensors file: its header, then the
// values; the momentum: no head). Its leaves are the blob's own 16 KiB
// subtrees (treeHash), which head's length shifts against the sweep's
// blocks: a leaf lying wholly in data is hashed by the block that writes
// its last missing byte (at most two blocks write one), right after, while
// its bytes are still in a cache; the leaves holding head bytes and a
// shorter last leaf are hashed by sum, after the sweep. Each byte is read
// once for its hash.
type blobHash struct {
	th     *treeHash
	head   []byte
	data   []byte
	size   int64          // len(head) + len(data)
	remain []atomic.Int32 // per leaf hashed in the sweep: blocks still to write it
}

func newBlobHash(head, data []byte) *blobHash {
	h := int64(len(head))
	size := h + int64(len(data))
	b := &blobHash{th: newTreeHash(size), head: head, data: data, size: size, remain: make([]atomic.Int32, size/leafBytes)}
	for k := range b.remain {
		if b.inSweep(int64(k)) {
			d0, d1 := int64(k)*leafBytes-h, int64(k+1)*leafBytes-h // its data bytes
			b.remain[k].Store(int32((d1-1)/leafBytes - d0/leafBytes + 1))
		}
	}
	return b
}

// inSweep says whether leaf k is full and lies wholly in data.
func (b *blobHash) inSweep(k int64) bool {
	return k*leafBytes >= int64(len(b.head)) && (k+1)*leafBytes <= b.size && b.size > leafBytes
}

// written records that data bytes [d0, d1) (one sweep block, d0 a multiple
// of leafBytes) are final, hashing each leaf they complete, each hash
// prefetching pf's lines.
func (b *blobHash) written(d0, d1 int64, pf leafPrefetch) {
	h := int64(len(b.head))
	for k := (h + d0) / leafBytes; k <= (h+d1-1)/leafBytes; k++ {
		if k < int64(len(b.remain)) && b.inSweep(k) && b.remain[k].Add(-1) == 0 {
			b.th.leaf(int(k), b.data[k*leafBytes-h:(k+1)*leafBytes-h], pf)
		}
	}
}

// sum hashes the leaves the sweep did not (those holding head bytes, a
// shorter last one) and returns the blob's hash. Every block of data must
// have been written.
func (b *blobHash) sum() wire.Hash {
	var buf [leafBytes]byte
	h := int64(len(b.head))
	for k := int64(0); k*leafBytes < b.size || k == 0; k++ {
		if b.inSweep(k) {
			continue
		}
		lo, hi := k*leafBytes, min((k+1)*leafBytes, b.size)
		l := buf[:hi-lo]
		if lo < h {
			copy(l, b.head[lo:min(hi, h)])
		}
		if hi > h {
			copy(l[max(h-lo, 0):], b.data[max(lo-h, 0):hi-h])
		}
		b.th.leaf(int(k), l, leafPrefetch{})
	}
	return b.th.sum()
}
