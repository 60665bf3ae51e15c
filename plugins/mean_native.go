package plugins

import (
	"context"
	"sync/atomic"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/builtin"
	"github.com/tenzro/train/wire"
)

// The built-in Mean natively, on inputs read in place (mapped blob files in
// a worker): no copy of the K inputs into guest memory, one pass over them.
// Like the native outer step (nesterov_native.go) it reproduces the module
// bit for bit and fuel for fuel:
//
//   - bytes: mean.c sums each coordinate in f64, from +0, in input order,
//     divides by K in f64 and rounds once to f32; IEEE arithmetic gives the
//     same bits in Go. Its NaNs are written canonical (the module's NaN
//     payloads may differ, and the host canonicalises every aggregate's).
//   - fuel: the instrumented module charges a constant per loop iteration,
//     so for a given K the call costs base(n mod 4) + q·c16 + t·c4, q being
//     the 16-coordinate steps and t the full 4-coordinate steps of the tail
//     (the partial step of a tail that is not a multiple of 4 is in the
//     base). The engine measures the line per K on the module itself and
//     checks it on further sizes; any mismatch keeps the fast path off for
//     that K. A real call still instantiates the module and makes its
//     allocations, whose fuel is read from the counter, and the Wasm runs
//     instead whenever the total would exceed the budget, so an out-of-fuel
//     failure is the module's own.
//
// Only F32 inputs take the fast path (BF16 inputs go through the module's
// own conversion, whose allocation and fuel are the module's).
// TestNativeMeanMatchesWasm compares bytes, selection and fuel with the
// Wasm.

// meanHash is the hash of the built-in Mean module.
var meanHash = func() wire.Hash {
	m, err := builtin.Module("mean")
	if err != nil {
		return wire.Hash{}
	}
	return wire.SHA256(m)
}()

// nativeMeans counts aggregations computed natively (tests check that the
// fast path runs).
var nativeMeans atomic.Int64

// meanLine is the fuel of tenzro_aggregate for one K.
type meanLine struct {
	base     [4]uint64 // by n mod 4
	c16, c4  uint64
	ok       bool
	measured bool
}

func (l meanLine) fuel(n int) uint64 {
	q, rest := uint64(n/16), n%16
	return l.base[n%4] + q*l.c16 + uint64(rest/4)*l.c4
}

// nativeMean returns the fuel line of p's Mean for k F32 inputs when the
// fast path applies to p.
func (e *Engine) nativeMean(ctx context.Context, p *plugin, d machine.Dtype, k int) (meanLine, bool) {
	if e.cfg.WasmMean || e.cfg.NoFuel || d != machine.F32 || p.info.Hash != meanHash || p.compiled == nil || k <= 0 || k > MaxK {
		return meanLine{}, false
	}
	e.outerMu.Lock()
	defer e.outerMu.Unlock()
	if l, ok := e.meanLines[k]; ok {
		return l, l.ok
	}
	l := e.calibrateLine(ctx, p, k, nil)
	if ctx.Err() != nil {
		return meanLine{}, false // not cached: a cancelled calibration proves nothing
	}
	if e.meanLines == nil {
		e.meanLines = map[int]meanLine{}
	}
	e.meanLines[k] = l
	return l, l.ok
}

// calibrateLine measures the fuel line of p's tenzro_aggregate over k F32
// inputs with params on the module, and checks it on sizes it was not
// derived from. It holds for rules whose instrumented code has no branch on
// the values (Mean, TrimmedMean): the probe inputs are zeros.
func (e *Engine) calibrateLine(ctx context.Context, p *plugin, k int, params []float64) meanLine {
	const most = 4099
	c, err := e.newCall(ctx, p, ProbeFuel, nil)
	if err != nil {
		return meanLine{}
	}
	defer c.close(ctx)
	inPtr, err1 := c.alloc(ctx, uint64(k)*most*4)
	outPtr, err2 := c.alloc(ctx, most*4)
	selPtr, err3 := c.alloc(ctx, uint64(k))
	scPtr, err4 := c.alloc(ctx, uint64(k)*8)
	parPtr, err5 := c.alloc(ctx, uint64(len(params))*8+8)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil {
		return meanLine{}
	}
	if err := c.write(parPtr, f64Bytes(params)); err != nil {
		return meanLine{}
	}
	dc, _ := dtypeCode(machine.F32)
	cost := func(n int) (int64, bool) {
		before := c.fuel.Get()
		res, err := c.invoke(ctx, "tenzro_aggregate", dc, uint64(k), uint64(n), uint64(inPtr), uint64(parPtr), uint64(len(params)),
			uint64(outPtr), uint64(selPtr), uint64(scPtr))
		if err != nil || uint32(res[0]) != 0 {
			return 0, false
		}
		return int64(before - c.fuel.Get()), true
	}
	f16, ok1 := cost(16)
	f32, ok2 := cost(32)
	f4, ok3 := cost(4)
	f8, ok4 := cost(8)
	if !ok1 || !ok2 || !ok3 || !ok4 || f32 <= f16 || f8 <= f4 {
		return meanLine{}
	}
	c16, c4 := f32-f16, f8-f4
	base := [4]int64{f16 - c16}
	for r := 1; r < 4; r++ {
		f, ok := cost(r)
		if !ok {
			return meanLine{}
		}
		base[r] = f
	}
	l := meanLine{c16: uint64(c16), c4: uint64(c4), measured: true}
	for r, b := range base {
		if b <= 0 {
			return meanLine{}
		}
		l.base[r] = uint64(b)
	}
	if f4 != base[0]+c4 {
		return meanLine{}
	}
	for _, n := range []int{5, 12, 13, 17, 31, 35, 63, 1000, 1001, 1002, 1003, most} {
		if f, ok := cost(n); !ok || uint64(f) != l.fuel(n) {
			return meanLine{}
		}
	}
	l.ok = true
	return l
}

// meanKernel is mean.c's aggregate of coordinates [c0, c1) of srcs (F32
// bytes in memory, 4-aligned: meanInPlace) as a block kernel (fused.go):
// block [b0, b1) of the aggregate from the inputs read in place.
func meanKernel(srcs []*source, c0, c1 int) blockKernel {
	in := make([][]float32, len(srcs))
	for i, s := range srcs {
		in[i] = f32View(s.b[4*c0 : 4*c1])
	}
	return func() func(b0, b1 int, out []float32) {
		return func(b0, b1 int, out []float32) { meanBlock(in, b0, b1, out) }
	}
}

// meanBlockGo sets out[j] to mean.c's value at coordinate b0+j: the sum of
// in[i][b0+j] in f64 from +0 in input order (−0 inputs sum to +0, as in the
// module), divided by K in f64 and rounded once, NaN canonical.
func meanBlockGo(in [][]float32, b0, b1 int, out []float32) {
	const block = 2048
	var acc [block]float64
	kk := float64(len(in))
	for s0 := b0; s0 < b1; s0 += block {
		s1 := min(s0+block, b1)
		a := acc[:s1-s0]
		clear(a)
		for _, x := range in {
			for j, v := range x[s0:s1] {
				a[j] += float64(v)
			}
		}
		ob := out[s0-b0 : s1-b0]
		for j, s := range a {
			m := float32(s / kk)
			if m != m {
				m = canonF32
			}
			ob[j] = m
		}
	}
}

// meanInPlace reports whether every source's values are bytes in memory,
// 4-aligned, which the native kernels read in place.
func meanInPlace(srcs []*source) bool {
	for _, s := range srcs {
		if s.r != nil || s.b == nil || !aligned4(s.b) {
			return false
		}
	}
	return true
}
