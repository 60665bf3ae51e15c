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
		var dk, dg, dz time.Duration
		for b.Loop() {
			t0 := time.Now()
			for i := range 16 {
				sink = CV(buf, uint64(i)*16)
			}
			t1 := time.Now()
			for i := range 16 {
				sink = guts.ChainingValue(guts.CompressBuffer(buf, Size, &guts.IV, uint64(i)*16, 0))
			}
			t2 := time.Now()
			for range 16 {
				s := zeebo.Sum256(buf[:])
				sink[0] += uint32(s[0])
			}
			t3 := time.Now()
			dk, dg, dz = dk+t1.Sub(t0), dg+t2.Sub(t1), dz+t3.Sub(t2)
		}
		n := float64(16*b.N) / 1e6 // MB per second from seconds
		b.ReportMetric(n*Size/dk.Seconds(), "kernel-MB/s")
		b.ReportMetric(n*Size/dg.Seconds(), "guts-MB/s")
		b.ReportMetric(n*Size/dz.Seconds(), "zeebo-MB/s")
		b.ReportMetric(float64(dg)/float64(dk), "×guts")
		b.ReportMetric(float64(dz)/float64(dk), "×zeebo")
	})
	// prefetch: CV against CVPrefetch with a list of the leaf's own lines
	// (in cache), alternating in rounds of 16 leaves: the cost of the
	// prefetches themselves, as pf-overhead-% of CV's time.
	b.Run("prefetch", func(b *testing.B) {
		lines := new(Lines)
		for k := range lines {
			lines[k] = uintptr(unsafe.Pointer(&buf[64*k%Size]))
		}
		var dk, dp time.Duration
		for b.Loop() {
			t0 := time.Now()
			for i := range 16 {
				sink = CV(buf, uint64(i)*16)
			}
			t1 := time.Now()
			for i := range 16 {
				sink = CVPrefetch(buf, uint64(i)*16, lines, 0)
			}
			t2 := time.Now()
			dk, dp = dk+t1.Sub(t0), dp+t2.Sub(t1)
		}
		n := float64(16*b.N) / 1e6
		b.ReportMetric(n*Size/dk.Seconds(), "kernel-MB/s")
		b.ReportMetric(n*Size/dp.Seconds(), "prefetch-MB/s")
		b.ReportMetric(100*(float64(dp)/float64(dk)-1), "pf-overhead-%")
	})
	_ = sink
}
