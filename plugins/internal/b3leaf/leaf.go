package b3leaf

import "lukechampine.com/blake3/guts"

// Size is the bytes of a leaf: a complete subtree of 16 chunks.
const Size = 16 * guts.ChunkSize

// CV is the chaining value of the 16 chunks in buf, the first at chunk
// counter counter: guts.ChainingValue(guts.CompressBuffer(buf, Size,
// &guts.IV, counter, 0)).
func CV(buf *[Size]byte, counter uint64) [8]uint32 {
	if useAVX2 {
		return cvAVX2(buf, counter)
	}
	return cvGuts(buf, counter)
}

// cvGuts is CV by lukechampine.com/blake3 (the fallback, and the reference
// of the tests).
func cvGuts(buf *[Size]byte, counter uint64) [8]uint32 {
	return guts.ChainingValue(guts.CompressBuffer(buf, Size, &guts.IV, counter, 0))
}
