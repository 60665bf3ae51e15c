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

//go:noescape
func keysAVX2(dst *int32, src *float32, n int)

//go:noescape
func addKeysAVX2(s *float64, keys *int32, n int)

//go:noescape
func finishAVX2(out *float32, s *float64, cnt float64, n int)

// sortKeys sets dst[j] to the sort key of src[j] (len(dst) ≥ len(src)).
func sortKeys(dst []int32, src []float32) {
	if v := len(src) &^ 7; haveCxAVX2 && v > 0 {
		_ = dst[v-1]
		keysAVX2(&dst[0], &src[0], v)
		dst, src = dst[v:], src[v:]
	}
	sortKeysGo(dst, src)
}

// addKeys adds the f32 value of every key in keys to s (len(s) ≥ len(keys)).
func addKeys(s []float64, keys []int32) {
	if v := len(keys) &^ 3; haveCxAVX2 && v > 0 {
		_ = s[v-1]
		addKeysAVX2(&s[0], &keys[0], v)
		s, keys = s[v:], keys[v:]
	}
	addKeysGo(s, keys)
}

// finishTrimmed sets out[j] to float32(s[j] / cnt), NaN canonical
// (len(s) ≥ len(out)).
func finishTrimmed(out []float32, s []float64, cnt float64) {
	if v := len(out) &^ 3; haveCxAVX2 && v > 0 {
		_ = s[v-1]
		finishAVX2(&out[0], &s[0], cnt, v)
		out, s = out[v:], s[v:]
	}
	finishTrimmedGo(out, s, cnt)
}
