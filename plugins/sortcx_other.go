//go:build !amd64

package plugins

func compareExchange(a, b []int32) { compareExchangeGo(a, b) }

func sortKeys(dst []int32, src []float32)                   { sortKeysGo(dst, src) }
func addKeys(s []float64, keys []int32)                     { addKeysGo(s, keys) }
func finishTrimmed(out []float32, s []float64, cnt float64) { finishTrimmedGo(out, s, cnt) }

var haveCxAVX2 = false
