//go:build amd64 && !purego

package b3leaf

import (
	"unsafe"

	"golang.org/x/sys/cpu"
	"lukechampine.com/blake3/guts"
)

// useAVX2 selects the kernel; tests clear it to run the fallback.
var useAVX2 = cpu.X86.HasAVX2

// hash8AVX2 compresses eight lanes of blocks 64-byte blocks each, lane j's
// first block at in+j·stride and its blocks consecutive, from the key IV:
// block b of lane j at counter ctr[j] | ctr[8+j]<<32 with flags flags[b]
// and length 64. out[j] is lane j's chaining value after its last block.
//
//go:noescape
func hash8AVX2(out *[8][8]uint32, in *byte, stride, blocks uintptr, ctr *[16]uint32, flags *[16]uint32)

// hash8AVX2PF is hash8AVX2 that, during each of its blocks compressions,
// prefetches the PrefetchPerCompression lines at lines[i]+delta, reading
// lines[0 : blocks·PrefetchPerCompression].
//
//go:noescape
func hash8AVX2PF(out *[8][8]uint32, in *byte, stride, blocks uintptr, ctr *[16]uint32, flags *[16]uint32, lines *uintptr, delta uintptr)

// hash8 is hash8AVX2, or hash8AVX2PF with lines[*next:] when lines is set
// (then *next moves past the entries it reads).
func hash8(out *[8][8]uint32, in *byte, stride, blocks uintptr, ctr *[16]uint32, flags *[16]uint32, lines *Lines, next *int, delta uintptr) {
	if lines == nil {
		hash8AVX2(out, in, stride, blocks, ctr, flags)
		return
	}
	hash8AVX2PF(out, in, stride, blocks, ctr, flags, &lines[*next], delta)
	*next += int(blocks) * PrefetchPerCompression
}

var (
	chunkFlags  = [16]uint32{0: guts.FlagChunkStart, 15: guts.FlagChunkEnd}
	parentFlags = [16]uint32{0: guts.FlagParent}
	zeroCtr     [16]uint32
)

// cvAVX2 is CV by the kernel; with lines, CVPrefetch (its Compressions
// compressions read every entry).
func cvAVX2(buf *[Size]byte, counter uint64, lines *Lines, delta uintptr) [8]uint32 {
	var cvs [16][8]uint32
	next := 0
	for h := 0; h < 2; h++ {
		var ctr [16]uint32
		for j := 0; j < 8; j++ {
			c := counter + uint64(8*h+j)
			ctr[j], ctr[8+j] = uint32(c), uint32(c>>32)
		}
		hash8((*[8][8]uint32)(cvs[8*h:]), &buf[8*h*guts.ChunkSize], guts.ChunkSize, guts.ChunkSize/guts.BlockSize, &ctr, &chunkFlags, lines, &next, delta)
	}
	// The parents, a level per call, in place (a call reads its blocks
	// before it writes): parent j's block is cvs[2j] ‖ cvs[2j+1], 64 bytes
	// at 64·j. Levels below eight parents fill the spare lanes with the
	// buffer's stale values, whose results are not used.
	for range 4 {
		hash8((*[8][8]uint32)(cvs[:8]), (*byte)(unsafe.Pointer(&cvs)), 64, 1, &zeroCtr, &parentFlags, lines, &next, delta)
	}
	return cvs[0]
}
