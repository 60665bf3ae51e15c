package b3leaf

import (
	"testing"
	"time"
	"unsafe"

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
	// paired: the three alternate in rounds of 16 leaves each, so that a
	// shared machine's load falls on all of them; reports each one's MB/s
	// and the kernel's speed as a multiple of guts' and of zeebo's.
	b.Run("paired", func(b *testing.B) {
		d := alternate(b,
			func(i int) { sink = CV(buf, uint64(i)*16) },
			func(i int) { sink = guts.ChainingValue(guts.CompressBuffer(buf, Size, &guts.IV, uint64(i)*16, 0)) },
			func(int) { s := zeebo.Sum256(buf[:]); sink[0] += uint32(s[0]) })
		n := float64(16*b.N) / 1e6 // MB per second from seconds
		b.ReportMetric(n*Size/d[0].Seconds(), "kernel-MB/s")
		b.ReportMetric(n*Size/d[1].Seconds(), "guts-MB/s")
		b.ReportMetric(n*Size/d[2].Seconds(), "zeebo-MB/s")
		b.ReportMetric(float64(d[1])/float64(d[0]), "×guts")
		b.ReportMetric(float64(d[2])/float64(d[0]), "×zeebo")
	})
	// prefetch: CV against CVPrefetch with a list of the leaf's own lines
	// (in cache), alternating in rounds of 16 leaves: the cost of the
	// prefetches themselves, as pf-overhead-% of CV's time.
	b.Run("prefetch", func(b *testing.B) {
		lines := new(Lines)
		for k := range lines {
			lines[k] = uintptr(unsafe.Pointer(&buf[64*k%Size]))
		}
		d := alternate(b,
			func(i int) { sink = CV(buf, uint64(i)*16) },
			func(i int) { sink = CVPrefetch(buf, uint64(i)*16, lines, 0) })
		n := float64(16*b.N) / 1e6
		b.ReportMetric(n*Size/d[0].Seconds(), "kernel-MB/s")
		b.ReportMetric(n*Size/d[1].Seconds(), "prefetch-MB/s")
		b.ReportMetric(100*(float64(d[1])/float64(d[0])-1), "pf-overhead-%")
	})
	_ = sink
}

// alternate runs each of fns on leaves 0..15 in turn, once per op, and
// returns the time each took in all.
func alternate(b *testing.B, fns ...func(i int)) []time.Duration {
	d := make([]time.Duration, len(fns))
	for b.Loop() {
		for j, f := range fns {
			t0 := time.Now()
			for i := range 16 {
				f(i)
			}
			d[j] += time.Since(t0)
		}
	}
	return d
}
