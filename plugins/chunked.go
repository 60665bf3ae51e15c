package plugins

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/abi"
	"github.com/tenzro/train/syncer"
)

// ChunkPasses is the manifest's "chunking" value for rules implementing the
// chunked passes protocol (ABI.md §6).
const ChunkPasses = abi.ChunkPasses

// Chunked-mode limits (ABI.md §6).
const (
	// MaxPasses bounds the passes a plan may ask for.
	MaxPasses = 4096
	// MaxCarryBytes bounds the carried state of a plan.
	MaxCarryBytes = 8 << 20
	// ChunkAlign: every chunk but the last is a multiple of this many
	// coordinates, and every chunk starts at a multiple of it.
	ChunkAlign = 1024
)

// CodeBadPlan is the host code for a plugin that broke the chunked-mode
// contract (a plan outside the ABI bounds).
const CodeBadPlan = 1005

// chunkFor returns the coordinates per chunk for a call whose fixed part
// needs fixed bytes and each coordinate per bytes: half the guest memory
// goes to the chunk's data (guests, a Go runtime in particular, need room
// of their own), rounded down to ChunkAlign. The engine's test override
// takes precedence.
func (e *Engine) chunkFor(name string, per, fixed uint64) (int, error) {
	if e.chunkOverride > 0 {
		return e.chunkOverride, nil
	}
	half := e.memBudget() / 2
	if fixed >= half {
		return 0, &syncer.RuleFailure{Rule: name, Code: CodeTooLarge, Reason: fmt.Sprintf("memory limit %d pages too small for one chunk", e.cfg.MemoryPages)}
	}
	chunk := (half - fixed) / per &^ (ChunkAlign - 1)
	if chunk == 0 {
		return 0, &syncer.RuleFailure{Rule: name, Code: CodeTooLarge, Reason: fmt.Sprintf("memory limit %d pages too small for one chunk", e.cfg.MemoryPages)}
	}
	if chunk > math.MaxInt32 {
		chunk = math.MaxInt32 &^ (ChunkAlign - 1)
	}
	return int(chunk), nil
}

// wantChunks reports whether a call of need bytes runs chunked: when it does
// not fit, or when a test forces chunking on a chunkable rule.
func (e *Engine) wantChunks(p *plugin, need uint64) bool {
	if need > e.memBudget() {
		return true
	}
	return e.chunkOverride > 0 && (p.manifest.Chunking == ChunkCoordinate || p.manifest.Chunking == ChunkPasses)
}

// fuelMeter spreads one Aggregate, Verify or OuterStep call's fuel budget
// over its chunked sub-calls: each gets what the earlier ones left, so a
// chunked call is bounded by the same budget as a whole one.
type fuelMeter struct {
	limit  uint64
	noFuel bool
	used   uint64
}

func (e *Engine) newMeter(ctx context.Context) *fuelMeter {
	return &fuelMeter{limit: e.fuelFor(ctx), noFuel: e.cfg.NoFuel}
}

// budget is the fuel the next sub-call may use.
func (m *fuelMeter) budget() uint64 {
	if m.noFuel {
		return m.limit
	}
	return m.limit - min(m.used, m.limit)
}

// add records a sub-call's fuel and returns the total so far.
func (m *fuelMeter) add(f uint64) uint64 {
	if m.used+f < m.used {
		m.used = math.MaxUint64
	} else {
		m.used += f
	}
	return m.used
}

// chunkPlan asks the plugin for its passes and carry size (one fresh
// instance, tenzro_chunk_plan).
func (e *Engine) chunkPlan(ctx context.Context, p *plugin, k, n int, params []float64) (passes int, carry uint64, fuel uint64, err error) {
	c, err := e.newCall(ctx, p, e.fuelFor(ctx), nil)
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.close(ctx)
	defer func() { fuel = c.used() }()
	parPtr, err := c.alloc(ctx, uint64(len(params))*8+8)
	if err != nil {
		return 0, 0, 0, err
	}
	planPtr, err := c.alloc(ctx, 8)
	if err != nil {
		return 0, 0, 0, err
	}
	if err := c.write(parPtr, f64Bytes(params)); err != nil {
		return 0, 0, 0, err
	}
	res, err := c.invoke(ctx, "tenzro_chunk_plan", uint64(k), uint64(n), uint64(parPtr), uint64(len(params)), uint64(planPtr))
	if err != nil {
		return 0, 0, 0, err
	}
	if rc := uint32(res[0]); rc != 0 {
		return 0, 0, 0, c.guestError(ctx, rc)
	}
	b, err := c.read(planPtr, 8)
	if err != nil {
		return 0, 0, 0, err
	}
	np, cb := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
	if np < 1 || np > MaxPasses || cb > MaxCarryBytes {
		return 0, 0, 0, c.fail(CodeBadPlan, "tenzro_chunk_plan asked for %d passes and %d carry bytes (limits 1..%d, %d)", np, cb, MaxPasses, MaxCarryBytes)
	}
	return int(np), uint64(cb), 0, nil
}

// aggregatePasses runs an aggregation rule in chunked passes (ABI.md §6):
// every pass visits the chunks in ascending order; the carried state goes
// from each call to the next untouched, and so does each chunk's output
// from one pass to the next.
func (e *Engine) aggregatePasses(ctx context.Context, p *plugin, d machine.Dtype, n, es int, srcs []*source, params []float64, agg dest, f *feeder) (syncer.AggregateOutput, error) {
	var out syncer.AggregateOutput
	k := len(srcs)
	meter := e.newMeter(ctx)
	passes, carryBytes, fuel, err := e.chunkPlan(ctx, p, k, n, params)
	out.Fuel = meter.add(fuel)
	if err != nil {
		return out, err
	}
	per := uint64(k)*uint64(es) + 4
	if es == 2 {
		per += uint64(k) * 4 // the guest's f32 copy of bf16 inputs
	}
	chunk, err := e.chunkFor(p.info.Name, per, aggregateBytes(k, 0, es, len(params))+carryBytes)
	if err != nil {
		return out, err
	}
	carry := make([]byte, carryBytes)
	if agg.out.placed { // zeros before the first pass
		clear(agg.bytes())
	} else {
		agg.out.zero = true
	}
	for pass := 0; pass < passes; pass++ {
		for c0 := 0; c0 < n; c0 += chunk {
			c1 := min(c0+chunk, n)
			last := pass == passes-1 && c1 == n
			r, err := e.passOnce(ctx, p, meter.budget(), d, n, srcs, c0, c1, es, params, pass, carry, agg.sub(int64(c0)*4, int64(c1)*4), last, f)
			out.Fuel = meter.add(r.Fuel)
			if err != nil {
				return syncer.AggregateOutput{Fuel: out.Fuel}, err
			}
			if last {
				out.Selected, out.Scores = r.Selected, r.Scores
			}
		}
	}
	out.Aggregate = agg.bytes()
	return out, nil
}

// passOnce is one tenzro_chunk_pass call on coordinates [c0, c1). carry and
// out are read back in place.
func (e *Engine) passOnce(ctx context.Context, p *plugin, budget uint64, d machine.Dtype, ntotal int, srcs []*source, c0, c1, es int, params []float64,
	pass int, carry []byte, out dest, last bool, f *feeder) (res syncer.AggregateOutput, err error) {
	c, err := e.newCall(ctx, p, budget, f)
	if err != nil {
		return res, err
	}
	defer c.close(ctx)
	defer func() { res.Fuel = c.used() }()
	k, n := len(srcs), c1-c0
	span := uint64(n) * uint64(es)
	inPtr, err := c.alloc(ctx, uint64(k)*span)
	if err != nil {
		return res, err
	}
	outPtr, err := c.alloc(ctx, uint64(n)*4)
	if err != nil {
		return res, err
	}
	selPtr, err := c.alloc(ctx, uint64(k))
	if err != nil {
		return res, err
	}
	scPtr, err := c.alloc(ctx, uint64(k)*8)
	if err != nil {
		return res, err
	}
	parPtr, err := c.alloc(ctx, uint64(len(params))*8+8)
	if err != nil {
		return res, err
	}
	carryPtr, err := c.alloc(ctx, uint64(len(carry)))
	if err != nil {
		return res, err
	}
	if err := c.fill(inPtr, srcs, int64(c0*es), int64(c1*es)); err != nil {
		return res, err
	}
	if err := c.write(parPtr, f64Bytes(params)); err != nil {
		return res, err
	}
	if err := c.write(carryPtr, carry); err != nil {
		return res, err
	}
	ob, err := c.putOut(outPtr, out, true)
	if err != nil {
		return res, err
	}
	dc, _ := dtypeCode(d)
	f.running()
	r, err := c.invoke(ctx, "tenzro_chunk_pass", dc, uint64(k), uint64(n), uint64(c0), uint64(ntotal), uint64(inPtr),
		uint64(parPtr), uint64(len(params)), uint64(pass), uint64(carryPtr), uint64(outPtr), uint64(selPtr), uint64(scPtr))
	if err != nil {
		return res, err
	}
	if rc := uint32(r[0]); rc != 0 {
		return res, c.guestError(ctx, rc)
	}
	if err := c.readInto(carryPtr, carry); err != nil {
		return res, err
	}
	if err := c.getOut(outPtr, out, ob); err != nil {
		return res, err
	}
	if !last {
		return res, nil
	}
	res.Selected, res.Scores, err = c.readSelection(selPtr, scPtr, k)
	return res, err
}

// readInto copies len(dst) bytes of guest memory at off into dst.
func (c *call) readInto(off uint32, dst []byte) error {
	v, ok := c.mem.Read(off, uint32(len(dst)))
	if !ok {
		return c.fail(CodeTrap, "output outside guest memory")
	}
	copy(dst, v)
	return nil
}

// readSelection reads K selection bytes and K f64 scores (nil when all
// zero).
func (c *call) readSelection(selPtr, scPtr uint32, k int) ([]bool, []float64, error) {
	sel, err := c.read(selPtr, uint64(k))
	if err != nil {
		return nil, nil, err
	}
	selected := make([]bool, k)
	for i, s := range sel {
		selected[i] = s != 0
	}
	sc, err := c.read(scPtr, uint64(k)*8)
	if err != nil {
		return nil, nil, err
	}
	any := false
	scores := make([]float64, k)
	for i := range scores {
		scores[i] = math.Float64frombits(binary.LittleEndian.Uint64(sc[i*8:]))
		any = any || sc[i*8] != 0 || scores[i] != 0
	}
	if !any {
		scores = nil
	}
	return selected, scores, nil
}

// verifyPasses runs a verifier in chunked passes (ABI.md §6); the verdict is
// the last call's.
func (e *Engine) verifyPasses(ctx context.Context, p *plugin, d machine.Dtype, n int, input *source, round []*source, es int, params []float64, f *feeder) (out syncer.VerifyOutput, err error) {
	k := len(round)
	meter := e.newMeter(ctx)
	passes, carryBytes, fuel, err := e.chunkPlan(ctx, p, k, n, params)
	out.Fuel = meter.add(fuel)
	if err != nil {
		return out, err
	}
	per := uint64(k+1) * uint64(es)
	chunk, err := e.chunkFor(p.info.Name, per, guestSlack+uint64(len(params))*8+carryBytes)
	if err != nil {
		return out, err
	}
	carry := make([]byte, carryBytes)
	var verdict []byte
	for pass := 0; pass < passes; pass++ {
		for c0 := 0; c0 < n; c0 += chunk {
			c1 := min(c0+chunk, n)
			v, f, err := e.verifyPassOnce(ctx, p, meter.budget(), d, n, input, round, c0, c1, es, params, pass, carry, f)
			out.Fuel = meter.add(f)
			if err != nil {
				return syncer.VerifyOutput{Fuel: out.Fuel}, err
			}
			verdict = v
		}
	}
	out.Accept = binary.LittleEndian.Uint32(verdict) != 0
	if !out.Accept {
		out.Code = binary.LittleEndian.Uint32(verdict[4:])
		out.Reason = verifyReason(p.info.Name, out.Code, params, p.manifest)
	}
	return out, nil
}
func (e *Engine) verifyPassOnce(ctx context.Context, p *plugin, budget uint64, d machine.Dtype, ntotal int, input *source, round []*source, c0, c1, es int, params []float64,
	pass int, carry []byte, f *feeder) (verdict []byte, fuel uint64, err error) {
	c, err := e.newCall(ctx, p, budget, f)
	if err != nil {
		return nil, 0, err
	}
	defer c.close(ctx)
	defer func() { fuel = c.used() }()
	n := c1 - c0
	span := uint64(n) * uint64(es)
	inPtr, err := c.alloc(ctx, span)
	if err != nil {
		return nil, 0, err
	}
	var roundPtr uint32
	if len(round) > 0 {
		if roundPtr, err = c.alloc(ctx, uint64(len(round))*span); err != nil {
			return nil, 0, err
		}
	}
	parPtr, err := c.alloc(ctx, uint64(len(params))*8+8)
	if err != nil {
		return nil, 0, err
	}
	carryPtr, err := c.alloc(ctx, uint64(len(carry)))
	if err != nil {
		return nil, 0, err
	}
	vPtr, err := c.alloc(ctx, 8)
	if err != nil {
		return nil, 0, err
	}
	b0, b1 := int64(c0*es), int64(c1*es)
	if err := c.fill(inPtr, []*source{input}, b0, b1); err != nil {
		return nil, 0, err
	}
	if len(round) > 0 {
		if err := c.fill(roundPtr, round, b0, b1); err != nil {
			return nil, 0, err
		}
	}
	if err := c.write(parPtr, f64Bytes(params)); err != nil {
		return nil, 0, err
	}
	if err := c.write(carryPtr, carry); err != nil {
		return nil, 0, err
	}
	dc, _ := dtypeCode(d)
	r, err := c.invoke(ctx, "tenzro_verify_chunk", dc, uint64(n), uint64(c0), uint64(ntotal), uint64(inPtr),
		uint64(len(round)), uint64(roundPtr), uint64(parPtr), uint64(len(params)), uint64(pass), uint64(carryPtr), uint64(vPtr))
	if err != nil {
		return nil, 0, err
	}
	if rc := uint32(r[0]); rc != 0 {
		return nil, 0, c.guestError(ctx, rc)
	}
	if err := c.readInto(carryPtr, carry); err != nil {
		return nil, 0, err
	}
	verdict, err = c.read(vPtr, 8)
	return verdict, 0, err
}
