package plugins

import "golang.org/x/sys/cpu"

// cxAVX2 sets a[i], b[i] to their signed min and max for i in [0, n), n a
// multiple of 8 (sortcx_amd64.s).
//
//go:noescape
func cxAVX2(a, b *int32, n int)

var haveCxAVX2 = cpu.X86.HasAVX2

// compareExchange sets a[j], b[j] to their signed min and max for every j
// (len(b) ≥ len(a)); with AVX2, len(a) must be a multiple of 8.
func compareExchange(a, b []int32) {
	if haveCxAVX2 && len(a) > 0 {
		_ = b[len(a)-1]
		cxAVX2(&a[0], &b[0], len(a))
		return
	}
	compareExchangeGo(a, b)
}
