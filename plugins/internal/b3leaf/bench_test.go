package b3leaf

import (
	"testing"

	zeebo "github.com/zeebo/blake3"
	"lukechampine.com/blake3/guts"
)

// BenchmarkLeafCV hashes one 16 KiB leaf by the kernel (CV), the fallback
// (guts.CompressBuffer) and github.com/zeebo/blake3's Sum256, in one run.
func BenchmarkLeafCV(b *testing.B) {
	buf := new([Size]byte)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	var sink [8]uint32
	b.Run("kernel", func(b *testing.B) {
		b.SetBytes(Size)
		for i := 0; b.Loop(); i++ {
			sink = CV(buf, uint64(i)*16)
		}
	})
	b.Run("guts", func(b *testing.B) {
		b.SetBytes(Size)
		for i := 0; b.Loop(); i++ {
			sink = guts.ChainingValue(guts.CompressBuffer(buf, Size, &guts.IV, uint64(i)*16, 0))
		}
	})
	b.Run("zeebo", func(b *testing.B) {
		b.SetBytes(Size)
		for b.Loop() {
			s := zeebo.Sum256(buf[:])
			sink[0] += uint32(s[0])
		}
	})
	_ = sink
}
