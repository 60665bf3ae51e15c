package plugins

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Limits and defaults.
const (
	// DefaultMemoryPages is the default page limit (64 KiB pages): 2 GiB,
	// room for K=6 inputs of N=2^24 f32 (384 MiB) many times over; larger
	// calls run chunked (ABI.md §6).
	DefaultMemoryPages = 32768
	// DefaultFuel is the default fuel budget per call (protocol parameter:
	// the engine profile records it). Every built-in rule with its default
	// parameters aggregates K=6 inputs of N=2^24 f32 within it (the most,
	// GeometricMedian, charges 4.4e10; Mean 5.7e8) in seconds, and a
	// plugin that spends it in the cheapest possible loop (3.5e8 fuel/s
	// measured) stops after about 140 s (RATIONALE "plugins: budgets").
	DefaultFuel = 50_000_000_000
	// DefaultWallClock is the default wall-clock backstop per call: over
	// four times the worst case of DefaultFuel, so an honest machine
	// records an out-of-fuel failure long before the kill (which is a local
	// failure, never recorded).
	DefaultWallClock = 10 * time.Minute
	// MaxModuleBytes bounds a published module.
	MaxModuleBytes = 16 << 20
	// MaxK bounds the number of inputs of one call.
	MaxK = 256
)

// Host-side rule failure codes (guest codes are below 1000; ABI.md §5).
const (
	CodeOutOfFuel   = 1000
	CodeTrap        = 1001
	CodeOutOfMemory = 1002
	CodeTooLarge    = 1003
	CodeBadInput    = 1004
)

// Config configures an Engine.
type Config struct {
	// KV stores the registry (keyspace syncer.KSPlugins); nil keeps it in memory.
	KV machine.KV
	// CacheDir is a private directory for wazero's compilation cache; empty
	// keeps the cache in memory.
	CacheDir string
	// MemoryPages is the guest memory limit in 64 KiB pages (protocol
	// parameter; 0 = DefaultMemoryPages, at most 65536).
	MemoryPages uint32
	// Fuel is the fuel budget per call (0 = DefaultFuel).
	Fuel uint64
	// WallClock is the backstop per call (0 = DefaultWallClock).
	WallClock time.Duration
	// Logger (nil = slog.Default()).
	Logger *slog.Logger
	// Interpreter selects wazero's interpreter instead of the compiler (the
	// conformance suite compares both; results must not change).
	Interpreter bool
	// MaxModuleBytes overrides MaxModuleBytes (0 = default).
	MaxModuleBytes int
	// NoFuel skips the fuel instrumentation (benchmarks only: it removes the
	// deterministic bound, and the profile says so).
	NoFuel bool
	// WasmOuter runs the built-in outer step in Wasm even where its native
	// fast path applies (nesterov_native.go; same bytes and fuel).
	WasmOuter bool
	// WasmMean runs the built-in Mean in Wasm even where its native fast
	// path applies (mean_native.go; same bytes and fuel).
	WasmMean bool
	// WasmTrimmedMean runs the built-in TrimmedMean in Wasm even where its
	// native fast path applies (trimmed_native.go; same bytes and fuel).
	WasmTrimmedMean bool
	// Workers > 0 runs every plugin call in that many worker processes
	// (DESIGN §13, worker_pool.go) instead of in this process: the node and
	// the CLI set it; 0 keeps calls in process (tests, replay of vectors).
	Workers int
	// WorkerCommand starts a worker (default: this executable with the
	// hidden "plugin-worker" argument). The process must call
	// ServeWorkerIfChild first thing.
	WorkerCommand []string
	// WorkerAddressSpace is a worker's RLIMIT_AS before a call's memfd
	// (0 = 2 × the guest memory limit + 1 GiB: the guest memory is one
	// reservation of its limit (memalloc_linux.go); the rest is the
	// worker's runtime, compiled code and the inputs' copy in the guest).
	WorkerAddressSpace uint64
	// CacheBytes bounds the module bytes of published plugins whose
	// compiled code stays loaded (LRU; 0 = DefaultCacheBytes).
	CacheBytes int64
	// NoStaging copies every block into guest memory instead of staging it
	// (feed.go), for one-shot callers (`tenzro plugin run`): a stage saves
	// faulting and zeroing fresh pages only when it is reused by a later
	// call, and while a staged block is in use its pages are mapped twice in
	// the process (the host's view and the guest's), so the resident set
	// counts them twice though they are held once. Results, fuel and the
	// bytes the guest sees are the same either way.
	NoStaging bool

	// backstopOff: a worker's calls have no in-process backstop (the node
	// kills the worker instead).
	backstopOff bool
	// chunkOverride and stageFrom set the engine's (and its workers')
	// fields of the same names (tests).
	chunkOverride int
	stageFrom     int64
}

// Engine is the Wasm plugin host. It implements syncer.Engine and holds the
// plugin registry.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	rt      wazero.Runtime
	cache   wazero.CompilationCache
	costs   CostTable
	profile syncer.EngineProfile

	// chunkOverride > 0 forces chunked runs of chunkable rules with chunks
	// of that many coordinates (tests only: it changes fuel, never bytes).
	chunkOverride int
	// stageFrom > 0 stages blocks from that many bytes instead of stageMin
	// (tests: it changes how bytes reach guest memory, never results);
	// noStaging (Config.NoStaging) stages nothing.
	stageFrom int64

	mu      sync.RWMutex
	loaded  map[wire.Hash]*plugin
	builtin map[string]wire.Hash // rule id -> hash
	lru     lruState

	// pool runs calls out of process (Config.Workers > 0).
	pool *pool
	// stages keeps the staging memory that large blocks are mapped from
	// (feed.go, stage_linux.go).
	stages *stagePool

	// outerLines caches the fuel lines of the built-in outer step's
	// variants (nesterov_native.go).
	outerMu    sync.Mutex
	outerLines map[outerVariant]outerLine
	// meanLines caches the fuel lines of the built-in Mean by K
	// (mean_native.go), under outerMu.
	meanLines map[int]meanLine
	// trimLines caches the fuel lines of the built-in TrimmedMean by K and
	// alpha (trimmed_native.go), under outerMu.
	trimLines map[trimKey]meanLine
}

var _ syncer.Engine = (*Engine)(nil)

type plugin struct {
	info     wire.PluginInfo
	manifest *Manifest
	compiled wazero.CompiledModule // nil in a node that runs calls in workers
	hasInit  bool
	hasError bool
	// module keeps the published bytes where no store holds them (a
	// worker-mode engine without KV: the CLI).
	module []byte
	// LRU bookkeeping (lru.go): last use, calls in flight, evicted.
	lastUse uint64
	refs    int
	evicted bool
}

// NewEngine starts a wazero runtime and registers the built-in plugins.
func NewEngine(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.MemoryPages == 0 {
		cfg.MemoryPages = DefaultMemoryPages
	}
	if cfg.MemoryPages > 65536 {
		return nil, fmt.Errorf("plugins: memory limit %d pages exceeds 65536 (4 GiB)", cfg.MemoryPages)
	}
	if cfg.Fuel == 0 {
		cfg.Fuel = DefaultFuel
	}
	if cfg.Fuel > maxFuel {
		return nil, errors.New("plugins: fuel budget too large")
	}
	if cfg.WallClock == 0 {
		cfg.WallClock = DefaultWallClock
	}
	if cfg.MaxModuleBytes == 0 {
		cfg.MaxModuleBytes = MaxModuleBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, costs: DefaultCostTable, loaded: map[wire.Hash]*plugin{}, builtin: map[string]wire.Hash{}, stages: &stagePool{},
		chunkOverride: cfg.chunkOverride, stageFrom: cfg.stageFrom}
	if cfg.NoStaging {
		e.stageFrom = noStaging
	}
	var rc wazero.RuntimeConfig
	if cfg.Interpreter {
		rc = wazero.NewRuntimeConfigInterpreter()
	} else {
		rc = wazero.NewRuntimeConfigCompiler()
	}
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("plugins: compilation cache: %w", err)
		}
		e.cache = c
	} else {
		e.cache = wazero.NewCompilationCache()
	}
	rc = rc.WithCoreFeatures(api.CoreFeaturesV2).
		WithMemoryLimitPages(cfg.MemoryPages).
		WithCompilationCache(e.cache).
		WithCloseOnContextDone(false).
		WithDebugInfoEnabled(false)
	e.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	if err := instantiateWASI(ctx, e.rt); err != nil {
		_ = e.rt.Close(ctx)
		return nil, fmt.Errorf("plugins: host module: %w", err)
	}
	e.profile = e.makeProfile()
	if cfg.Workers > 0 {
		pl, err := newEngineWorkers(e)
		if err != nil {
			_ = e.rt.Close(ctx)
			return nil, err
		}
		e.pool = pl
	}
	if err := e.loadBuiltins(ctx); err != nil {
		_ = e.Close(ctx)
		return nil, err
	}
	return e, nil
}

// Close stops the workers and releases the runtime and the compilation
// cache.
func (e *Engine) Close(ctx context.Context) error {
	if e.pool != nil {
		e.pool.close()
	}
	e.stages.close()
	err := e.rt.Close(ctx)
	if cerr := e.cache.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

// ProfileDetails is what the engine profile hash commits to.
type ProfileDetails struct {
	Runtime       string    `json:"runtime"`
	Features      string    `json:"features"`
	MemoryPages   uint32    `json:"memory_pages"`
	Fuel          uint64    `json:"fuel"`
	NoFuel        bool      `json:"no_fuel,omitempty"`
	CostTable     CostTable `json:"cost_table"`
	CostTableHash wire.Hash `json:"cost_table_hash"`
	ABI           int       `json:"abi"`
}

func (e *Engine) makeProfile() syncer.EngineProfile {
	d := ProfileDetails{
		Runtime:       "wazero/" + WazeroVersion,
		Features:      "core-v2+simd128,no-threads,no-relaxed-simd",
		MemoryPages:   e.cfg.MemoryPages,
		Fuel:          e.cfg.Fuel,
		NoFuel:        e.cfg.NoFuel,
		CostTable:     e.costs,
		CostTableHash: e.costs.Hash(),
		ABI:           ABIVersion,
	}
	raw, _ := json.Marshal(d)
	canon, err := jcs.Transform(raw)
	if err != nil {
		panic(err)
	}
	return syncer.EngineProfile{Engine: "wazero/" + WazeroVersion, Hash: wire.SHA256(canon), Details: canon}
}

// Profile describes the runtime for receipts. Compiler and interpreter
// engines share it: they must give the same bytes.
func (e *Engine) Profile() syncer.EngineProfile { return e.profile }

// CostTableHash is the hash of the cost table in use.
func (e *Engine) CostTableHash() wire.Hash { return e.costs.Hash() }

// ---------------------------------------------------------------------------
// Calls

// call is one fresh instance of a plugin.
type call struct {
	e      *Engine
	p      *plugin
	mod    api.Module
	fuel   api.MutableGlobal
	mem    api.Memory
	budget uint64
	timed  atomic.Bool
	// mm is the instance's memory reservation (nil when wazero's default
	// allocator backs it: nothing is mapped then), f the operation's
	// feeder (nil: blocks are copied).
	mm *mmapMemory
	f  *feeder
}

// newCall instantiates p with a fuel budget of budget; f (may be nil) stages
// its large blocks.
func (e *Engine) newCall(ctx context.Context, p *plugin, budget uint64, f *feeder) (*call, error) {
	var mm *mmapMemory
	mod, err := e.rt.InstantiateModule(withGuestMemory(ctx, &mm), p.compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return nil, fmt.Errorf("plugins: instantiate %s: %w", p.info.Name, err)
	}
	g, ok := mod.ExportedGlobal(FuelExport).(api.MutableGlobal)
	if e.cfg.NoFuel {
		g, ok = noFuelGlobal{}, true
	}
	if !ok || mod.Memory() == nil {
		_ = mod.Close(ctx)
		return nil, fmt.Errorf("plugins: %s lacks its fuel global or memory", p.info.Name)
	}
	c := &call{e: e, p: p, mod: mod, fuel: g, mem: mod.Memory(), budget: budget, mm: mm, f: f}
	g.Set(c.budget)
	if p.hasInit {
		if _, err := c.invoke(ctx, "_initialize"); err != nil {
			_ = mod.Close(ctx)
			return nil, err
		}
	}
	return c, nil
}

func (c *call) close(ctx context.Context) {
	if !c.timed.Load() { // an abandoned instance is closed when it stops
		_ = c.mod.Close(ctx)
	}
}

func (c *call) used() uint64 {
	v := c.fuel.Get()
	if int64(v) < 0 || v > c.budget {
		return c.budget
	}
	return c.budget - v
}

func (c *call) fail(code uint32, format string, args ...any) error {
	return &syncer.RuleFailure{Rule: c.p.info.Name, Code: code, Reason: fmt.Sprintf(format, args...)}
}

// invoke calls an export under the wall-clock backstop. Traps become
// *syncer.RuleFailure. When the backstop fires, invoke returns an
// infrastructure error at once; the guest is starved of fuel (it traps at its
// next charge point) and the instance is closed when it stops, in the
// background, so the caller never waits on a runaway plugin.
func (c *call) invoke(ctx context.Context, name string, params ...uint64) ([]uint64, error) {
	fn := c.mod.ExportedFunction(name)
	if fn == nil {
		return nil, c.fail(CodeTrap, "export %s missing", name)
	}
	done := make(chan callResult, 1)
	go func() {
		res, err := fn.Call(context.WithoutCancel(ctx), params...)
		done <- callResult{res, err}
	}()
	wall := c.e.wallFor(ctx)
	t := time.NewTimer(wall)
	defer t.Stop()
	var r callResult
	select {
	case r = <-done:
	case <-ctx.Done():
		c.abandon(done)
		return nil, fmt.Errorf("plugins: %s.%s: %w", c.p.info.Name, name, ctx.Err())
	case <-t.C:
		c.abandon(done)
		return nil, fmt.Errorf("plugins: %s.%s exceeded the wall-clock backstop of %v", c.p.info.Name, name, wall)
	}
	if r.err != nil {
		if int64(c.fuel.Get()) < 0 {
			return nil, c.fail(CodeOutOfFuel, "out of fuel (budget %d) in %s", c.budget, name)
		}
		var ee *sys.ExitError
		if errors.As(r.err, &ee) {
			return nil, c.fail(CodeTrap, "plugin exited with code %d in %s", ee.ExitCode(), name)
		}
		return nil, c.fail(CodeTrap, "trap in %s: %s", name, firstLine(r.err.Error()))
	}
	return r.res, nil
}

type callResult struct {
	res []uint64
	err error
}

// abandon starves a running guest of fuel and closes its instance once it
// has stopped. The guest's own decrement can overwrite a store, so the store
// repeats until the call returns.
func (c *call) abandon(done <-chan callResult) {
	c.timed.Store(true)
	go func() {
		for {
			c.fuel.Set(backstopFuel)
			select {
			case <-done:
				_ = c.mod.Close(context.Background())
				return
			default:
				runtime.Gosched()
			}
		}
	}()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// alloc reserves size bytes in the guest.
func (c *call) alloc(ctx context.Context, size uint64) (uint32, error) {
	if size > math.MaxUint32 {
		return 0, c.fail(CodeTooLarge, "buffer of %d bytes exceeds wasm32 memory", size)
	}
	res, err := c.invoke(ctx, "tenzro_alloc", size)
	if err != nil {
		return 0, err
	}
	p := uint32(res[0])
	if p == 0 && size > 0 {
		return 0, c.fail(CodeOutOfMemory, "tenzro_alloc(%d) failed: memory limit %d pages", size, c.e.cfg.MemoryPages)
	}
	if uint64(p)+size > uint64(c.mem.Size()) {
		return 0, c.fail(CodeTrap, "tenzro_alloc returned %#x, outside memory for %d bytes", p, size)
	}
	return p, nil
}

func (c *call) write(off uint32, b []byte) error {
	if !c.mem.Write(off, b) {
		return c.fail(CodeTrap, "write outside guest memory")
	}
	return nil
}

func (c *call) read(off uint32, n uint64) ([]byte, error) {
	v, ok := c.mem.Read(off, uint32(n))
	if !ok || n > math.MaxUint32 {
		return nil, c.fail(CodeTrap, "output outside guest memory")
	}
	return append([]byte(nil), v...), nil
}

// guestError turns a non-zero entry-point result into a RuleFailure,
// with the plugin's tenzro_error_text when it has one.
func (c *call) guestError(ctx context.Context, code uint32) error {
	reason := stdReason(code)
	if c.p.hasError {
		if res, err := c.invoke(ctx, "tenzro_error_text"); err == nil {
			if s := c.cString(uint32(res[0]), 256); s != "" {
				reason = s
			}
		}
	}
	return c.fail(code, "%s", reason)
}

func (c *call) cString(off uint32, max uint32) string {
	if off == 0 {
		return ""
	}
	n := max
	if rem := c.mem.Size() - min(off, c.mem.Size()); rem < n {
		n = rem
	}
	b, ok := c.mem.Read(off, n)
	if !ok {
		return ""
	}
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.ToValidUTF8(string(b), "?")
}

func stdReason(code uint32) string {
	switch code {
	case 1:
		return "parameters out of range"
	case 2:
		return "too few inputs for the parameters"
	case 3:
		return "element type not supported"
	case 4:
		return "out of guest memory"
	case 5:
		return "non-finite value"
	}
	return fmt.Sprintf("rule error %d", code)
}

func dtypeCode(d machine.Dtype) (uint64, error) {
	switch d {
	case machine.F32:
		return 0, nil
	case machine.BF16:
		return 1, nil
	}
	return 0, fmt.Errorf("dtype %q: want F32 or BF16", d)
}

// ---------------------------------------------------------------------------
// Aggregate

// aggregate runs an aggregation plugin on K inputs. Fragments too large for
// the memory limit run chunked when the manifest declares a chunked mode:
// coordinate ranges for "coordinate" rules, chunked passes with a carried
// state for "passes" rules (ABI.md §6).
func (e *Engine) aggregate(ctx context.Context, in syncer.AggregateInput) (syncer.AggregateOutput, error) {
	var out syncer.AggregateOutput
	p, err := e.pluginFor(ctx, in.Rule, KindAggregate)
	if err != nil {
		return out, err
	}
	defer e.release(p)
	params, err := paramVector(p.manifest, in.Rule.Params)
	if err != nil {
		return out, fmt.Errorf("plugins: %s: %w", p.info.Name, err)
	}
	es, err := checkInputs(p, in.Dtype, in.N, in.Inputs)
	if err != nil {
		return out, err
	}
	if e.pool != nil {
		return e.remoteAggregate(ctx, p, in)
	}
	srcs := make([]*source, len(in.Inputs))
	for i, b := range in.Inputs {
		srcs[i] = bytesSource(b)
	}
	f := e.newFeeder()
	defer f.release()
	return e.aggregateSrc(ctx, p, params, in.Dtype, in.N, es, srcs, plainDest(outputBuffer(ctx, in.N*4)), f)
}

// aggregateSrc runs an aggregation plugin on K inputs of n values, read from
// srcs, the aggregate landing in out (n f32).
func (e *Engine) aggregateSrc(ctx context.Context, p *plugin, params []float64, d machine.Dtype, n, es int, srcs []*source, out dest, f *feeder) (syncer.AggregateOutput, error) {
	var res syncer.AggregateOutput
	k := len(srcs)
	chunk := n
	if need := aggregateBytes(k, n, es, len(params)); e.wantChunks(p, need) {
		switch p.manifest.Chunking {
		case ChunkPasses:
			return e.aggregatePasses(ctx, p, d, n, es, srcs, params, out, f)
		case ChunkCoordinate:
		default:
			return res, &syncer.RuleFailure{Rule: p.info.Name, Code: CodeTooLarge,
				Reason: fmt.Sprintf("fragment needs %d bytes of guest memory, limit %d pages, and the rule does not declare a chunked mode", need, e.cfg.MemoryPages)}
		}
		per := uint64(k)*uint64(es) + 4
		if es == 2 {
			per += uint64(k) * 4 // the guest's f32 copy of bf16 inputs
		}
		var err error
		if chunk, err = e.chunkFor(p.info.Name, per, aggregateBytes(k, 0, es, len(params))); err != nil {
			return res, err
		}
	}
	meter := e.newMeter(ctx)
	out.out.canonical = true // until a chunk runs in Wasm
	res.Selected = make([]bool, k)
	var scores []float64
	for c0 := 0; c0 < n; c0 += chunk {
		c1 := min(c0+chunk, n)
		r, err := e.aggregateOnce(ctx, p, meter.budget(), d, srcs, c0, c1, es, params, out.sub(int64(c0)*4, int64(c1)*4), f)
		res.Fuel = meter.add(r.Fuel)
		if err != nil {
			return syncer.AggregateOutput{Fuel: res.Fuel}, err
		}
		for i, s := range r.Selected {
			res.Selected[i] = res.Selected[i] || s
		}
		if c0 == 0 {
			scores = r.Scores
		}
	}
	if chunk == n {
		res.Scores = scores
	}
	res.Aggregate = out.bytes()
	return res, nil
}
func aggregateBytes(k, n, es, nparams int) uint64 {
	// inputs + output + selection + scores + params + room for the guest's own
	// data, stack and scratch (bf16 conversion doubles the input).
	in := uint64(k) * uint64(n) * uint64(es)
	if es == 2 {
		in *= 3
	}
	return in + uint64(n)*4 + uint64(k)*9 + uint64(nparams)*8 + guestSlack
}

func (e *Engine) memBudget() uint64 { return uint64(e.cfg.MemoryPages) * 65536 }

func checkInputs(p *plugin, d machine.Dtype, n int, inputs [][]byte) (int, error) {
	if _, err := dtypeCode(d); err != nil {
		return 0, fmt.Errorf("plugins: %w", err)
	}
	if !p.manifest.SupportsDtype(string(d)) {
		return 0, &syncer.RuleFailure{Rule: p.info.Name, Code: CodeBadInput, Reason: fmt.Sprintf("rule does not accept %s", d)}
	}
	if len(inputs) == 0 || len(inputs) > MaxK {
		return 0, fmt.Errorf("plugins: %d inputs, want 1..%d", len(inputs), MaxK)
	}
	if n <= 0 || n > math.MaxInt32 {
		return 0, fmt.Errorf("plugins: N=%d out of range", n)
	}
	es := d.Size()
	for i, b := range inputs {
		if len(b) != n*es {
			return 0, fmt.Errorf("plugins: input %d has %d bytes, want N*%d = %d", i, len(b), es, n*es)
		}
	}
	return es, nil
}

// aggregateOnce runs one call on coordinates [c0, c1) and reads the
// aggregate straight into dst (4 bytes per coordinate).
func (e *Engine) aggregateOnce(ctx context.Context, p *plugin, budget uint64, d machine.Dtype, srcs []*source, c0, c1, es int, params []float64, dst dest, f *feeder) (out syncer.AggregateOutput, err error) {
	c, err := e.newCall(ctx, p, budget, f)
	if err != nil {
		return out, err
	}
	defer c.close(ctx)
	var native uint64 // the fuel of a native aggregation
	defer func() { out.Fuel = c.used() + native }()
	k, n := len(srcs), c1-c0
	span := uint64(n) * uint64(es)
	inPtr, err := c.alloc(ctx, uint64(k)*span)
	if err != nil {
		return out, err
	}
	outPtr, err := c.alloc(ctx, uint64(n)*4)
	if err != nil {
		return out, err
	}
	selPtr, err := c.alloc(ctx, uint64(k))
	if err != nil {
		return out, err
	}
	scPtr, err := c.alloc(ctx, uint64(k)*8)
	if err != nil {
		return out, err
	}
	parPtr, err := c.alloc(ctx, uint64(len(params))*8+8)
	if err != nil {
		return out, err
	}
	// A native rule (mean_native.go, trimmed_native.go) reads the inputs
	// where they are (mapped), once, and writes the module's selection
	// (every input) where the module would have; its fuel is the module's
	// measured line, charged only when it fits the budget.
	// Within a fused finalize (fused.go) the aggregate of the whole range
	// is owed to the outer step's sweep instead of computed here.
	runNative := func(agg uint64, ran *atomic.Int64, kern blockKernel) (syncer.AggregateOutput, error) {
		f.running()
		if !fusionOf(ctx).owe(c0, c1, kern, dst, srcs) {
			runKernel(kern, n, f32View(dst.bytes()))
		}
		sel := make([]byte, k)
		for i := range sel {
			sel[i] = 1
		}
		if err := c.write(selPtr, sel); err != nil {
			return out, err
		}
		native = agg
		ran.Add(1)
		out.Aggregate = dst.bytes()
		out.Selected, out.Scores, err = c.readSelection(selPtr, scPtr, k)
		return out, err
	}
	if l, ok := e.nativeMean(ctx, p, d, k); ok && meanInPlace(srcs) && aligned4(dst.bytes()) {
		if agg := l.fuel(n); c.used()+agg <= budget {
			return runNative(agg, &nativeMeans, meanKernel(srcs, c0, c1))
		}
	}
	if l, t, ok := e.nativeTrimmed(ctx, p, d, k, params); ok && meanInPlace(srcs) && aligned4(dst.bytes()) {
		if agg := l.fuel(n); c.used()+agg <= budget {
			return runNative(agg, &nativeTrims, trimmedKernel(srcs, c0, c1, t))
		}
	}
	dst.out.canonical = false
	if err := c.fill(inPtr, srcs, int64(c0*es), int64(c1*es)); err != nil {
		return out, err
	}
	if err := c.write(parPtr, f64Bytes(params)); err != nil {
		return out, err
	}
	ob, err := c.putOut(outPtr, dst, false)
	if err != nil {
		return out, err
	}
	dc, _ := dtypeCode(d)
	f.running()
	res, err := c.invoke(ctx, "tenzro_aggregate", dc, uint64(k), uint64(n), uint64(inPtr), uint64(parPtr),
		uint64(len(params)), uint64(outPtr), uint64(selPtr), uint64(scPtr))
	if err != nil {
		return out, err
	}
	if rc := uint32(res[0]); rc != 0 {
		return out, c.guestError(ctx, rc)
	}
	if err = c.getOut(outPtr, dst, ob); err != nil {
		return out, err
	}
	out.Aggregate = dst.bytes()
	out.Selected, out.Scores, err = c.readSelection(selPtr, scPtr, k)
	return out, err
}
func f64Bytes(v []float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[i*8:], math.Float64bits(x))
	}
	return b
}

// ---------------------------------------------------------------------------
// Verify

// Verify runs a verifier on one input (and, for round-level verifiers, the
// round's inputs).
func (e *Engine) Verify(ctx context.Context, in syncer.VerifyInput) (out syncer.VerifyOutput, err error) {
	p, err := e.pluginFor(ctx, in.Verifier, KindVerify)
	if err != nil {
		return out, err
	}
	defer e.release(p)
	params, err := paramVector(p.manifest, in.Verifier.Params)
	if err != nil {
		return out, fmt.Errorf("plugins: %s: %w", p.info.Name, err)
	}
	es, err := checkInputs(p, in.Dtype, in.N, [][]byte{in.Input})
	if err != nil {
		return out, err
	}
	if p.manifest.RoundLevel {
		if _, err := checkInputs(p, in.Dtype, in.N, in.Round); err != nil {
			return out, err
		}
	} else if len(in.Round) != 0 {
		in.Round = nil // per-submission verifiers never see the round
	}
	if e.pool != nil {
		return e.remoteVerify(ctx, p, in)
	}
	round := make([]*source, len(in.Round))
	for i, b := range in.Round {
		round[i] = bytesSource(b)
	}
	f := e.newFeeder()
	defer f.release()
	return e.verifySrc(ctx, p, params, in.Dtype, in.N, es, bytesSource(in.Input), round, f)
}

// verifySrc runs a verifier on one input and, for round-level verifiers,
// the round, read from sources.
func (e *Engine) verifySrc(ctx context.Context, p *plugin, params []float64, d machine.Dtype, n, es int, input *source, round []*source, f *feeder) (out syncer.VerifyOutput, err error) {
	need := uint64(len(round)+1)*uint64(n)*uint64(es) + guestSlack
	if !e.wantChunks(p, need) {
		return e.verifyOnce(ctx, p, e.fuelFor(ctx), d, input, round, 0, n, es, params, f)
	}
	switch p.manifest.Chunking {
	case ChunkPasses:
		return e.verifyPasses(ctx, p, d, n, input, round, es, params, f)
	case ChunkCoordinate:
		// Coordinate ranges: accept when every range accepts; the first
		// rejecting range gives the reason.
		chunk, err := e.chunkFor(p.info.Name, uint64(len(round)+1)*uint64(es), guestSlack+uint64(len(params))*8)
		if err != nil {
			return out, err
		}
		meter := e.newMeter(ctx)
		for c0 := 0; c0 < n; c0 += chunk {
			r, err := e.verifyOnce(ctx, p, meter.budget(), d, input, round, c0, min(c0+chunk, n), es, params, f)
			out.Fuel = meter.add(r.Fuel)
			if err != nil {
				return syncer.VerifyOutput{Fuel: out.Fuel}, err
			}
			if !r.Accept {
				r.Fuel = out.Fuel
				return r, nil
			}
		}
		out.Accept = true
		return out, nil
	}
	return out, &syncer.RuleFailure{Rule: p.info.Name, Code: CodeTooLarge, Reason: fmt.Sprintf("verification needs %d bytes, limit %d pages, and the verifier does not declare a chunked mode", need, e.cfg.MemoryPages)}
}

// verifyOnce runs tenzro_verify on coordinates [c0, c1) of the input (and
// of the round).
func (e *Engine) verifyOnce(ctx context.Context, p *plugin, budget uint64, d machine.Dtype, input *source, round []*source, c0, c1, es int, params []float64, f *feeder) (out syncer.VerifyOutput, err error) {
	c, err := e.newCall(ctx, p, budget, f)
	if err != nil {
		return out, err
	}
	defer c.close(ctx)
	defer func() { out.Fuel = c.used() }()
	n := c1 - c0
	span := uint64(n) * uint64(es)
	inPtr, err := c.alloc(ctx, span)
	if err != nil {
		return out, err
	}
	var roundPtr uint32
	if len(round) > 0 {
		if roundPtr, err = c.alloc(ctx, uint64(len(round))*span); err != nil {
			return out, err
		}
	}
	parPtr, err := c.alloc(ctx, uint64(len(params))*8+8)
	if err != nil {
		return out, err
	}
	vPtr, err := c.alloc(ctx, 8)
	if err != nil {
		return out, err
	}
	b0, b1 := int64(c0*es), int64(c1*es)
	if err := c.fill(inPtr, []*source{input}, b0, b1); err != nil {
		return out, err
	}
	if len(round) > 0 {
		if err := c.fill(roundPtr, round, b0, b1); err != nil {
			return out, err
		}
	}
	if err := c.write(parPtr, f64Bytes(params)); err != nil {
		return out, err
	}
	dc, _ := dtypeCode(d)
	res, err := c.invoke(ctx, "tenzro_verify", dc, uint64(n), uint64(inPtr), uint64(len(round)), uint64(roundPtr),
		uint64(parPtr), uint64(len(params)), uint64(vPtr))
	if err != nil {
		return out, err
	}
	if rc := uint32(res[0]); rc != 0 {
		return out, c.guestError(ctx, rc)
	}
	v, err := c.read(vPtr, 8)
	if err != nil {
		return out, err
	}
	out.Accept = binary.LittleEndian.Uint32(v) != 0
	if !out.Accept {
		out.Code = binary.LittleEndian.Uint32(v[4:])
		out.Reason = verifyReason(p.info.Name, out.Code, params, p.manifest)
	}
	return out, nil
}
func verifyReason(name string, code uint32, params []float64, m *Manifest) string {
	switch code {
	case 1:
		return "contains NaN or infinite values"
	case 2:
		return fmt.Sprintf("L2 norm exceeds %s", paramText(params, m))
	case 3:
		return fmt.Sprintf("L2 norm exceeds %s times the round median", paramText(params, m))
	}
	return fmt.Sprintf("%s rejected the input (reason %d)", name, code)
}

func paramText(params []float64, m *Manifest) string {
	if len(params) == 0 || len(m.Params) == 0 {
		return "the bound"
	}
	return fmt.Sprintf("%s=%g", m.Params[0].Name, params[0])
}

// ---------------------------------------------------------------------------
// Outer step

// outerStep applies the outer optimizer plugin named by in.Rule.
func (e *Engine) outerStep(ctx context.Context, in syncer.OuterStepInput) (syncer.OuterStepOutput, error) {
	var out syncer.OuterStepOutput
	p, err := e.pluginFor(ctx, in.Rule, KindOuter)
	if err != nil {
		return out, err
	}
	defer e.release(p)
	es, err := checkInputs(p, in.Dtype, in.N, [][]byte{in.Weights})
	if err != nil {
		return out, err
	}
	if len(in.Aggregate) != in.N*4 {
		return out, fmt.Errorf("plugins: aggregate has %d bytes, want %d", len(in.Aggregate), in.N*4)
	}
	if in.Momentum != nil && len(in.Momentum) != in.N*4 {
		return out, fmt.Errorf("plugins: momentum has %d bytes, want %d", len(in.Momentum), in.N*4)
	}
	if e.pool != nil {
		return e.remoteOuter(ctx, p, in, es)
	}
	var mom *source
	if in.Momentum != nil {
		mom = bytesSource(in.Momentum)
	}
	out.Weights, out.Momentum = make([]byte, len(in.Weights)), make([]byte, in.N*4)
	f := e.newFeeder()
	defer f.release()
	out.Fuel, err = e.outerSrc(ctx, p, in.Dtype, in.N, es, bytesSource(in.Weights), mom, bytesSource(in.Aggregate),
		plainDest(out.Weights), plainDest(out.Momentum), in.LR, in.Beta, in.Nesterov, f)
	if err != nil {
		return syncer.OuterStepOutput{Fuel: out.Fuel}, err
	}
	return out, nil
}

// outerSrc runs the outer step on n coordinates: weights w (n of d),
// momentum m (n f32; nil before the first step), aggregate g (n f32); the
// new weights and momentum land in wOut and mOut. It returns the fuel.
func (e *Engine) outerSrc(ctx context.Context, p *plugin, d machine.Dtype, n, es int, w, m, g *source, wOut, mOut dest,
	lr, beta float32, nesterov bool, f *feeder) (uint64, error) {
	per := uint64(es) + 8
	chunk := n
	if uint64(n)*per+guestSlack > e.memBudget() {
		chunk = int((e.memBudget()/2 - guestSlack) / per &^ 1023)
	}
	meter := e.newMeter(ctx)
	var fuel uint64
	wOut.out.canonical, mOut.out.canonical = true, true // until a chunk runs in Wasm
	for c0 := 0; c0 < n; c0 += chunk {
		c1 := min(c0+chunk, n)
		used, err := e.outerOnce(ctx, p, meter.budget(), d, w, m, g, c0, c1, es, wOut.sub(int64(c0*es), int64(c1*es)),
			mOut.sub(int64(c0)*4, int64(c1)*4), lr, beta, nesterov, f)
		fuel = meter.add(used)
		if err != nil {
			return fuel, err
		}
	}
	return fuel, nil
}
func (e *Engine) outerOnce(ctx context.Context, p *plugin, budget uint64, d machine.Dtype, w, m, g *source, c0, c1, es int, wOut, mOut dest,
	lr, beta float32, nesterov bool, f *feeder) (fuel uint64, err error) {
	c, err := e.newCall(ctx, p, budget, f)
	if err != nil {
		return 0, err
	}
	defer c.close(ctx)
	var native uint64 // the fuel of a native step
	defer func() { fuel = c.used() + native }()
	n := uint64(c1 - c0)
	wPtr, err := c.alloc(ctx, n*uint64(es))
	if err != nil {
		return 0, err
	}
	mPtr, err := c.alloc(ctx, n*4)
	if err != nil {
		return 0, err
	}
	gPtr, err := c.alloc(ctx, n*4)
	if err != nil {
		return 0, err
	}
	fz := fusionOf(ctx)
	if l, ok := e.nativeOuter(ctx, p, outerVariant{d, m != nil, nesterov}); ok && aligned4(wOut.bytes()) && aligned4(mOut.bytes()) {
		if step := l.fuel(n); c.used()+step <= budget {
			if d == machine.F32 && fz.sweepable(c0, c1, w, m, wOut, mOut) {
				// One sweep: the owed aggregate and this step, block by
				// block (fused.go).
				fz.sweep(w, m, wOut, mOut, lr, beta, nesterov)
				native = step
				nativeSteps.Add(1)
				return 0, nil
			}
			fz.materialize() // the step reads the aggregate's bytes
			if err := outerNative(d, w, m, g, c0, c1, es, wOut, mOut, lr, beta, nesterov); err != nil {
				return 0, err
			}
			native = step
			nativeSteps.Add(1)
			return 0, nil
		}
	}
	fz.materialize() // the module reads the aggregate's bytes
	wOut.out.canonical, mOut.out.canonical = false, false
	// The weights and momentum are updated in place: with a stage behind
	// the outputs, their blocks map it shared and the step writes the new
	// state straight into it.
	wb, err := c.putState(wPtr, w, int64(c0*es), wOut)
	if err != nil {
		return 0, err
	}
	has := uint64(0)
	if m != nil {
		has = 1
	}
	mb, err := c.putState(mPtr, m, int64(c0)*4, mOut)
	if err != nil {
		return 0, err
	}
	if err := c.fill(gPtr, []*source{g}, int64(c0)*4, int64(c1)*4); err != nil {
		return 0, err
	}
	nest := uint64(0)
	if nesterov {
		nest = 1
	}
	dc, _ := dtypeCode(d)
	res, err := c.invoke(ctx, "tenzro_outer_step", dc, n, uint64(wPtr), uint64(mPtr), has, uint64(gPtr),
		api.EncodeF32(lr), api.EncodeF32(beta), nest)
	if err != nil {
		return 0, err
	}
	if rc := uint32(res[0]); rc != 0 {
		return 0, c.guestError(ctx, rc)
	}
	if err := c.getOut(wPtr, wOut, wb); err != nil {
		return 0, err
	}
	return 0, c.getOut(mPtr, mOut, mb)
}

// guestSlack is the memory reserved for a guest's own data, stack and
// scratch when planning calls and chunks.
const guestSlack = 1 << 20

// backstopFuel is the negative counter (as stored) the wall-clock backstop
// writes: the guest traps at its next charge point.
var backstopFuel = uint64(0xC000_0000_0000_0000) // -2^62

// noFuelGlobal stands in for the fuel counter of uninstrumented modules
// (Config.NoFuel).
type noFuelGlobal struct{ api.MutableGlobal }

func (noFuelGlobal) Get() uint64    { return 0 }
func (noFuelGlobal) Set(uint64)     {}
func (noFuelGlobal) String() string { return "no fuel" }
