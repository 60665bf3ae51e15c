package b3leaf

import "lukechampine.com/blake3/guts"

// Size is the bytes of a leaf: a complete subtree of 16 chunks.
const Size = 16 * guts.ChunkSize

// Compressions is the eight-lane compressions of one CV by the kernel: 2
// calls of 16 chunk blocks, then the 4 parent levels, one each.
const Compressions = 2*16 + 4

// PrefetchPerCompression is the cache lines CVPrefetch prefetches during
// each compression (a constant of the generated kernel, gen_test.go): 24,
// so that the three leaf hashes of a sweep block (3·36·24 = 2592 lines)
// cover the next block's six inputs, weights, momentum and the two
// outputs (10·16 KiB, 2560 lines, 2570 unaligned).
const PrefetchPerCompression = 24

// PrefetchLines is the entries of a CVPrefetch list.
const PrefetchLines = Compressions * PrefetchPerCompression

// Lines is CVPrefetch's list of addresses to prefetch.
type Lines [PrefetchLines]uintptr

// CV is the chaining value of the 16 chunks in buf, the first at chunk
// counter counter: guts.ChainingValue(guts.CompressBuffer(buf, Size,
// &guts.IV, counter, 0)).
func CV(buf *[Size]byte, counter uint64) [8]uint32 { return CVPrefetch(buf, counter, nil, 0) }

// CVPrefetch is CV(buf, counter), and while it hashes it prefetches
// (PREFETCHT1) the cache line at lines[i]+delta for every i, a fixed number
// during each compression, spread over its rounds. It exists for a caller
// that is memory bound between hashes (the finalize's sweep): the lines it
// will read next arrive while the hash computes, instead of stalling the
// next loads. A prefetch never faults and changes no value: the result is
// CV's for any list. delta lets a caller keep one list (for example of
// its block 0) and move it by the block's offset. A nil list prefetches
// nothing (CV); the fallback (no AVX2) ignores the list.
func CVPrefetch(buf *[Size]byte, counter uint64, lines *Lines, delta uintptr) [8]uint32 {
	if useAVX2 {
		return cvAVX2(buf, counter, lines, delta)
	}
	return cvGuts(buf, counter)
}

// cvGuts is CV by lukechampine.com/blake3 (the fallback, and the reference
// of the tests).
func cvGuts(buf *[Size]byte, counter uint64) [8]uint32 {
	return guts.ChainingValue(guts.CompressBuffer(buf, Size, &guts.IV, counter, 0))
}
