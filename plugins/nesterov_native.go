package plugins

import (
	"context"
	"encoding/binary"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/builtin"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// The built-in outer step natively (DESIGN §4: a native fast path where a
// test proves it bit-identical). The Wasm Nesterov emulates a correctly
// rounded f32 FMA with a TwoSum and rounding to odd, one coordinate at a
// time: about 35 ns per coordinate here, 0.6 s for a fragment of 2^24
// values, five memory passes. syncer.NesterovStep is the same arithmetic in
// Go (syncer.FMA32 is the same emulation; TestNativeEngineMatchesPlugins),
// and it runs on every core.
//
// Fuel must not change: the transcript records it. The instrumented module
// charges, per call of tenzro_outer_step, a constant at entry plus a constant
// per loop iteration (the static cost of each loop body, whichever branches
// run), so its fuel for a given element type, momentum and nesterov flag
// is a line in n: base(n mod 4) + c4·⌊n/4⌋ (outerLine; a + b·n for the
// scalar loops). The engine measures it on the module itself (calls on 1,
// 2, 3, 4 and 8 coordinates) and checks it on 5, 6, 7, 16, 17 and 998…1001
// (any miss keeps the fast path off for that variant), and a real call
// still instantiates the module and makes its three allocations, whose fuel
// is read from the counter. When the total would exceed the budget the Wasm
// runs instead, so an out-of-fuel failure is the module's own.
// TestNativeOuterMatchesWasm compares bytes and fuel with the Wasm on
// adversarial values, both element types, every flag and many sizes.

// nesterovHash is the hash of the built-in module the fast path
// reproduces; another module (a rebuilt one included) runs in Wasm.
var nesterovHash = func() wire.Hash {
	m, err := builtin.Module("nesterov")
	if err != nil {
		return wire.Hash{}
	}
	return wire.SHA256(m)
}()

// nativeSteps counts outer steps computed natively (tests check the fast
// path runs).
var nativeSteps atomic.Int64

// outerLine is the fuel of one tenzro_outer_step variant:
// base(n mod 4) + c4·⌊n/4⌋. The scalar loop of the Nesterov variants costs
// a + b·n (base(r) = a + b·r, c4 = 4b); the compiler vectorised the loop
// of the F32 variants without Nesterov into 4-coordinate steps and a scalar
// tail, whose fuel is that line with its own base per remainder.
type outerLine struct {
	base [4]uint64
	c4   uint64
	ok   bool
}

func (l outerLine) fuel(n uint64) uint64 { return l.base[n%4] + n/4*l.c4 }

type outerVariant struct {
	d             machine.Dtype
	has, nesterov bool
}

// nativeOuter returns the fuel line of p's outer step for the variant when
// the fast path applies to p.
func (e *Engine) nativeOuter(ctx context.Context, p *plugin, v outerVariant) (outerLine, bool) {
	if e.cfg.WasmOuter || e.cfg.NoFuel || p.info.Hash != nesterovHash || p.compiled == nil {
		return outerLine{}, false
	}
	e.outerMu.Lock()
	defer e.outerMu.Unlock()
	if l, ok := e.outerLines[v]; ok {
		return l, l.ok
	}
	l := e.calibrateOuter(ctx, p, v)
	if ctx.Err() != nil {
		return outerLine{}, false // not cached: a cancelled calibration proves nothing
	}
	if e.outerLines == nil {
		e.outerLines = map[outerVariant]outerLine{}
	}
	e.outerLines[v] = l
	return l, l.ok
}

// calibrateOuter measures the fuel line of a variant on the module.
func (e *Engine) calibrateOuter(ctx context.Context, p *plugin, v outerVariant) outerLine {
	const most = 1001
	c, err := e.newCall(ctx, p, ProbeFuel, nil)
	if err != nil {
		return outerLine{}
	}
	defer c.close(ctx)
	es := uint64(v.d.Size())
	wPtr, err1 := c.alloc(ctx, most*es)
	mPtr, err2 := c.alloc(ctx, most*4)
	gPtr, err3 := c.alloc(ctx, most*4)
	if err1 != nil || err2 != nil || err3 != nil {
		return outerLine{}
	}
	dc, _ := dtypeCode(v.d)
	has, nest := uint64(0), uint64(0)
	if v.has {
		has = 1
	}
	if v.nesterov {
		nest = 1
	}
	cost := func(n uint64) (uint64, bool) {
		before := c.fuel.Get()
		res, err := c.invoke(ctx, "tenzro_outer_step", dc, n, uint64(wPtr), uint64(mPtr), has, uint64(gPtr),
			uint64(math.Float32bits(0.5)), uint64(math.Float32bits(0.9)), nest)
		if err != nil || uint32(res[0]) != 0 {
			return 0, false
		}
		return before - c.fuel.Get(), true
	}
	var f [9]uint64
	for _, n := range []uint64{1, 2, 3, 4, 8} {
		var ok bool
		if f[n], ok = cost(n); !ok {
			return outerLine{}
		}
	}
	if f[8] <= f[4] {
		return outerLine{}
	}
	l := outerLine{c4: f[8] - f[4], base: [4]uint64{0, f[1], f[2], f[3]}}
	if f[4] <= l.c4 {
		return outerLine{}
	}
	l.base[0] = f[4] - l.c4
	for _, n := range []uint64{5, 6, 7, 16, 17, 998, 999, most - 1, most} {
		if f, ok := cost(n); !ok || f != l.fuel(n) {
			return outerLine{}
		}
	}
	l.ok = true
	return l
}

// outerNative computes the outer step on coordinates [c0, c1) natively:
// the new state lands in wOut and mOut, as the module would leave it.
func outerNative(d machine.Dtype, w, m, g *source, c0, c1, es int, wOut, mOut dest, lr, beta float32, nesterov bool) error {
	n := c1 - c0
	wb, mb := wOut.bytes(), mOut.bytes()
	// The state is read where it is when it is in memory (a mapped blob
	// file), else copied into the outputs first and updated in place: the
	// step reads wIn and mIn and writes wb and mb.
	wIn, mIn := wb, mb
	var jobs []copyJob
	switch {
	case wOut.out.prefilled:
	case w.r == nil && w.b != nil && (es == 2 || aligned4(w.b)):
		wIn = w.b[c0*es : c1*es]
	default:
		jobs = append(jobs, copyJob{dst: wb, src: w, off: int64(c0 * es)})
	}
	switch {
	case m == nil || mOut.out.prefilled:
	case m.r == nil && m.b != nil && aligned4(m.b):
		mIn = m.b[c0*4 : c1*4]
	default:
		jobs = append(jobs, copyJob{dst: mb, src: m, off: int64(c0) * 4})
	}
	var gb []byte
	if g.r == nil && g.b != nil && aligned4(g.b[c0*4:]) {
		gb = g.b[c0*4 : c1*4]
	} else {
		gb = make([]byte, n*4)
		jobs = append(jobs, copyJob{dst: gb, src: g, off: int64(c0) * 4})
	}
	if err := runCopies(jobs); err != nil {
		return err
	}
	parallel(n, func(lo, hi int) { nesterovRange(d, wIn, wb, mIn, mb, gb, lo, hi, m != nil, lr, beta, nesterov) })
	return nil
}

// canonicalOut canonicalises the NaNs of an outer step's new state, unless
// the native step wrote them canonical already.
func canonicalOut(d machine.Dtype, wOut, mOut dest) {
	if wOut.out.canonical && mOut.out.canonical {
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		canonicalF32(mOut.bytes())
	}()
	if d == machine.BF16 {
		canonicalBF16(wOut.bytes())
	} else {
		canonicalF32(wOut.bytes())
	}
	wg.Wait()
}

// parallel runs fn on consecutive parts of [0, n), on every core for large
// n.
func parallel(n int, fn func(lo, hi int)) {
	parts := min(runtime.GOMAXPROCS(0), max(1, n/(1<<16)))
	var wg sync.WaitGroup
	for i := 1; i < parts; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(n*i/parts, n*(i+1)/parts)
		}()
	}
	fn(0, n/parts)
	wg.Wait()
}

// canonF32 is the canonical NaN as an f32 value (moves keep its bits).
var canonF32 = math.Float32frombits(canonNaN32)

// nesterovRange is tenzro_outer_step (plugins/builtin/src/nesterov.c) on
// coordinates [lo, hi) of little-endian buffers, reading the weights and
// momentum from wIn and mIn and writing them to w and m (the same buffers
// for a step in place), its NaN results written canonical (as the host
// rewrites the module's: nonfinite.go). fma32 is written out in the loop
// (the compiler does not inline it).
func nesterovRange(d machine.Dtype, wIn, w, mIn, m, g []byte, lo, hi int, has bool, lr, beta float32, nesterov bool) {
	if hi <= lo {
		return
	}
	gv, mv := f32View(g)[lo:hi], f32View(m)[lo:hi]
	var mi []float32
	if has {
		mi = f32View(mIn)[lo:hi]
	}
	nlr, b64, nlr64 := -lr, float64(beta), float64(-lr)
	var wf, wi []float32
	var wh, whi []byte
	if d == machine.BF16 {
		wh, whi = w[2*lo:2*hi], wIn[2*lo:2*hi]
	} else {
		wf, wi = f32View(w)[lo:hi], f32View(wIn)[lo:hi]
		// F32 weights: the assembly (sweep_amd64.s) does whole vectors,
		// this loop the rest.
		if v := stepF32(wf, wi, mv, mi, gv, has, lr, beta, nesterov); v > 0 {
			gv, mv, wf, wi = gv[v:], mv[v:], wf[v:], wi[v:]
			if has {
				mi = mi[v:]
			}
		}
	}
	for c, gc := range gv {
		buf := gc
		if has {
			buf = float32(mi[c]*beta) + gc
		}
		mv[c] = buf
		if buf != buf {
			mv[c] = canonF32
		}
		dd := buf
		if nesterov {
			r := math.FMA(float64(buf), b64, float64(gc))
			if bits := math.Float64bits(r); (bits>>52&0x7ff)-(1023-126) > 253 || bits&(1<<29-1) == 1<<28 {
				dd = fma32Slow(buf, beta, gc)
			} else {
				dd = float32(r)
			}
		}
		var wc float32
		if wf != nil {
			wc = wi[c]
		} else {
			wc = math.Float32frombits(uint32(binary.LittleEndian.Uint16(whi[2*c:])) << 16)
		}
		r := math.FMA(float64(dd), nlr64, float64(wc))
		var nw float32
		if bits := math.Float64bits(r); (bits>>52&0x7ff)-(1023-126) > 253 || bits&(1<<29-1) == 1<<28 {
			nw = fma32Slow(dd, nlr, wc)
		} else {
			nw = float32(r)
		}
		switch {
		case nw != nw && wf != nil:
			wf[c] = canonF32
		case nw != nw:
			binary.LittleEndian.PutUint16(wh[2*c:], canonNaN16)
		case wf != nil:
			wf[c] = nw
		default:
			binary.LittleEndian.PutUint16(wh[2*c:], f32ToBF16(nw))
		}
	}
}

// fma32 is syncer.FMA32 — a·b+c rounded once to f32, as the module's
// tz_fmaf — on the hardware FMA: math.FMA rounds a·b+c once to f64, and
// rounding that to f32 gives the correctly rounded result unless it landed
// exactly on a midpoint between two f32 values (rounding is monotone and
// every midpoint is an f64, so that is the only way the second rounding can
// go wrong) or outside f32's normal range (subnormal, overflowing, zero,
// infinite or NaN results); those take the emulation.
func fma32(a, b, c float32) float32 {
	r := math.FMA(float64(a), float64(b), float64(c))
	bits := math.Float64bits(r)
	if exp := bits >> 52 & 0x7ff; exp-(1023-126) > 253 || bits&(1<<29-1) == 1<<28 {
		return fma32Slow(a, b, c)
	}
	return float32(r)
}

//go:noinline
func fma32Slow(a, b, c float32) float32 { return syncer.FMA32(a, b, c) }

// f32ToBF16 is tz_f32_to_bf16: round to nearest even, NaN stays a quiet
// NaN (safetensors.F32ToBF16, the Go side's one implementation).
func f32ToBF16(f float32) uint16 { return safetensors.F32ToBF16(f) }

func aligned4(b []byte) bool { return len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%4 == 0 }

// f32View is b's little-endian f32 values in place (this package runs on
// little-endian machines only: wazero's memory is little-endian and shared
// with the host as bytes).
func f32View(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
