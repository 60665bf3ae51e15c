package plugins

import (
	"context"
	"math"
	"sync/atomic"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/builtin"
	"github.com/tenzro/train/wire"
)

// The built-in TrimmedMean natively, on inputs read in place, like the
// native Mean (mean_native.go), bit for bit and fuel for fuel:
//
//   - bytes: trimmedmean.c (sortbased.h) sorts each coordinate's K values
//     by a key that is a total order on bit patterns (NaN made canonical
//     and last, −0 before +0), so the sorted sequence is unique: any
//     correct sorting network gives the same bits, and this one uses
//     Batcher's merge-exchange on the same int32 keys (signed compare, as
//     the module's i32x4.lt). The module then adds the kept values
//     [t, K−t) in ascending order in f64 from +0 (the trimmed ones add +0,
//     which leaves a sum that starts at +0 unchanged), divides by K−2t in
//     f64 and rounds once to f32: the same IEEE operations in Go. NaNs are
//     written canonical, as the host rewrites the module's.
//   - fuel: the module's loop has no branch on the values (the network is
//     straight-line code per K from 3 to 16, compare-exchanges are
//     i32x4.lt + v128.bitselect, NaNs are made canonical by bitselect, and
//     the kept range is chosen from t and K only), so its fuel is a function
//     of (K, n, alpha): the engine measures the line per K and alpha on the
//     module and checks it on further sizes (calibrateLine), exactly as
//     for Mean; TestNativeTrimmedMatchesWasm checks the fuel on adversarial
//     values (NaN, ±0, ±Inf, subnormals, ties, sorted, reversed).
//
// Only F32 inputs and K from 3 to 16 (the module's sorting networks) take
// the fast path; other K, BF16 inputs and parameters the module refuses run
// the Wasm.

// trimmedHash is the hash of the built-in TrimmedMean module.
var trimmedHash = func() wire.Hash {
	m, err := builtin.Module("trimmedmean")
	if err != nil {
		return wire.Hash{}
	}
	return wire.SHA256(m)
}()

// nativeTrims counts aggregations computed natively (tests check that the
// fast path runs).
var nativeTrims atomic.Int64

// trimKey names one calibrated fuel line of TrimmedMean.
type trimKey struct {
	k     int
	alpha int64
}

// trimmedParams returns t, the number of values trimmed at each end, when
// the module would accept params for k inputs (tz_param_int: the first
// parameter truncated toward zero, default 1000).
func trimmedParams(params []float64, k int) (alpha int64, t int, ok bool) {
	alpha = 1000
	if len(params) > 0 {
		a := params[0]
		if !(a > -1 && a < 5000) { // also refuses NaN
			return 0, 0, false
		}
		alpha = int64(a)
	}
	if alpha < 0 || alpha >= 5000 {
		return 0, 0, false
	}
	t = int(alpha * int64(k) / 10000)
	if 2*t >= k {
		return 0, 0, false
	}
	return alpha, t, true
}

// nativeTrimmed returns the fuel line of p's TrimmedMean for k F32 inputs
// with params, and t, when the fast path applies to p.
func (e *Engine) nativeTrimmed(ctx context.Context, p *plugin, d machine.Dtype, k int, params []float64) (meanLine, int, bool) {
	if e.cfg.WasmTrimmedMean || e.cfg.NoFuel || d != machine.F32 || p.info.Hash != trimmedHash || p.compiled == nil || k < 3 || k > 16 {
		return meanLine{}, 0, false
	}
	alpha, t, ok := trimmedParams(params, k)
	if !ok {
		return meanLine{}, 0, false
	}
	key := trimKey{k, alpha}
	e.outerMu.Lock()
	defer e.outerMu.Unlock()
	if l, ok := e.trimLines[key]; ok {
		return l, t, l.ok
	}
	l := e.calibrateLine(ctx, p, k, params)
	if ctx.Err() != nil {
		return meanLine{}, 0, false
	}
	if e.trimLines == nil {
		e.trimLines = map[trimKey]meanLine{}
	}
	e.trimLines[key] = l
	return l, t, l.ok
}

// mergeExchange is Batcher's merge-exchange sorting network for k inputs
// (Knuth, TAOCP vol. 3, 5.2.2 Algorithm M): the compare-exchanges (i, j),
// i < j, in order.
func mergeExchange(k int) [][2]int {
	if k < 2 {
		return nil
	}
	tt := 0
	for 1<<tt < k {
		tt++
	}
	var net [][2]int
	for p := 1 << (tt - 1); p > 0; p >>= 1 {
		q, r, d := 1<<(tt-1), 0, p
		for {
			for i := 0; i+d < k; i++ {
				if i&p == r {
					net = append(net, [2]int{i, i + d})
				}
			}
			if q == p {
				break
			}
			d, q, r = q-p, q>>1, p
		}
	}
	return net
}

// sortNets holds mergeExchange(k) for k up to 16.
var sortNets = func() (n [17][][2]int) {
	for k := range n {
		n[k] = mergeExchange(k)
	}
	return n
}()

// f32Key maps an f32's bits to the module's sort key (tz_key after
// tz_canon_nan): signed order of keys is −Inf < … < −0 < +0 < … < +Inf <
// NaN. The map is its own inverse on canonical values.
func f32Key(b uint32) int32 {
	s := int32(b)
	return s ^ (s >> 31 & 0x7fffffff)
}

// trimmedKernel is trimmedmean.c's aggregate, t values trimmed at each
// end, of coordinates [c0, c1) of srcs (F32 bytes in memory, 4-aligned) as
// a block kernel (fused.go); each worker sorts 512-coordinate pieces in its
// own key buffers.
func trimmedKernel(srcs []*source, c0, c1, t int) blockKernel {
	k := len(srcs)
	in := make([][]float32, k)
	for i, s := range srcs {
		in[i] = f32View(s.b[4*c0 : 4*c1])
	}
	net := sortNets[k]
	cnt := float64(k - 2*t)
	return func() func(b0, b1 int, out []float32) {
		const block = 512
		keys := make([][]int32, k)
		for i := range keys {
			keys[i] = make([]int32, block)
		}
		acc := make([]float64, block)
		return func(b0, b1 int, o []float32) {
			for p0 := b0; p0 < b1; p0 += block {
				p1 := min(p0+block, b1)
				m := p1 - p0
				for i, x := range in {
					sortKeys(keys[i], x[p0:p1])
				}
				mm := (m + 7) &^ 7 // whole vectors: lanes past m are never read
				for _, pr := range net {
					compareExchange(keys[pr[0]][:mm], keys[pr[1]][:mm])
				}
				s := acc[:m]
				clear(s) // +0, as the module's sums start
				for i := t; i < k-t; i++ {
					addKeys(s, keys[i][:m])
				}
				finishTrimmed(o[p0-b0:p1-b0], s, cnt)
			}
		}
	}
}

// compareExchangeGo sets a[j], b[j] to their signed min and max for every j
// (len(b) ≥ len(a)).
func compareExchangeGo(a, b []int32) {
	b = b[:len(a)]
	for j := range a {
		x, y := a[j], b[j]
		a[j], b[j] = min(x, y), max(x, y)
	}
}

// sortKeysGo sets dst[j] to the sort key of src[j] (len(dst) ≥ len(src)).
func sortKeysGo(dst []int32, src []float32) {
	dst = dst[:len(src)]
	for j, v := range src {
		b := math.Float32bits(v)
		if v != v {
			b = canonNaN32
		}
		dst[j] = f32Key(b)
	}
}

// addKeysGo adds the f32 value of every key in keys to s (len(s) ≥
// len(keys)).
func addKeysGo(s []float64, keys []int32) {
	s = s[:len(keys)]
	for j, kv := range keys {
		s[j] += float64(math.Float32frombits(uint32(f32Key(uint32(kv)))))
	}
}

// finishTrimmedGo sets out[j] to float32(s[j] / cnt), NaN canonical
// (len(s) ≥ len(out)).
func finishTrimmedGo(out []float32, s []float64, cnt float64) {
	s = s[:len(out)]
	for j, v := range s {
		r := float32(v / cnt)
		if r != r {
			r = canonF32
		}
		out[j] = r
	}
}
