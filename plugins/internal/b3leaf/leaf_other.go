//go:build !amd64 || purego

package b3leaf

// useAVX2 is never set here: CV is cvGuts.
var useAVX2 = false

func cvAVX2(buf *[Size]byte, counter uint64, _ *Lines, _ uintptr) [8]uint32 {
	return cvGuts(buf, counter)
}
