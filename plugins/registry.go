package plugins

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/tetratelabs/wabin/binary"
	"github.com/tetratelabs/wabin/wasm"
	"github.com/tetratelabs/wazero/api"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/abi"
	"github.com/tenzro/train/plugins/builtin"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Registry keys in syncer.KSPlugins: "mod/<hex>" holds the module as
// published, "info/<hex>" its wire.PluginInfo JSON.
const (
	keyModule = "mod/"
	keyInfo   = "info/"
)

// ErrUnknownPlugin is returned for a hash the registry does not hold.
var ErrUnknownPlugin = errors.New("unknown plugin")

func (e *Engine) loadBuiltins(ctx context.Context) error {
	for _, stem := range builtin.Names() {
		mod, err := builtin.Module(stem)
		if err != nil {
			return fmt.Errorf("plugins: builtin %s: %w", stem, err)
		}
		p, err := e.prepare(ctx, mod)
		if err != nil {
			return fmt.Errorf("plugins: builtin %s: %w", stem, err)
		}
		p.info.Builtin = true
		e.loaded[p.info.Hash] = p
		e.builtin[p.manifest.ID] = p.info.Hash
	}
	return nil
}

// Publish validates, instruments and compiles a module, and stores it in
// the registry. Publishing the same bytes again returns the same info.
func (e *Engine) Publish(ctx context.Context, module []byte) (*wire.PluginInfo, error) {
	h := wire.SHA256(module)
	e.mu.RLock()
	p, ok := e.loaded[h]
	e.mu.RUnlock()
	if ok {
		info := p.info
		return &info, nil
	}
	p, err := e.prepare(ctx, module)
	if err != nil {
		return nil, err
	}
	if e.cfg.KV != nil {
		raw, err := json.Marshal(p.info)
		if err != nil {
			return nil, fmt.Errorf("plugins: encode info: %w", err)
		}
		var b machine.Batch
		b.Set(machine.KSPlugins, []byte(keyModule+h.String()), append([]byte(nil), module...))
		b.Set(machine.KSPlugins, []byte(keyInfo+h.String()), raw)
		if err := e.cfg.KV.Commit(ctx, &b); err != nil {
			return nil, fmt.Errorf("plugins: store %s: %w", h, err)
		}
	}
	p = e.insert(h, p)
	e.log.Debug("plugin published", "hash", h.String(), "name", p.info.Name, "kind", p.info.Kind, "size", len(module))
	info := p.info
	return &info, nil
}

// List returns every plugin: built-ins first (by name), then the registry's
// (by hash).
func (e *Engine) List(ctx context.Context) ([]wire.PluginInfo, error) {
	e.mu.RLock()
	var out []wire.PluginInfo
	seen := map[wire.Hash]bool{}
	for _, p := range e.loaded {
		if p.info.Builtin || e.cfg.KV == nil {
			out = append(out, p.info)
			seen[p.info.Hash] = true
		}
	}
	e.mu.RUnlock()
	if e.cfg.KV != nil {
		err := e.cfg.KV.Scan(ctx, machine.KSPlugins, []byte(keyInfo), func(_, v []byte) error {
			var info wire.PluginInfo
			if err := json.Unmarshal(v, &info); err != nil {
				return fmt.Errorf("plugins: stored info: %w", err)
			}
			if !seen[info.Hash] {
				out = append(out, info)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Builtin != out[j].Builtin {
			return out[i].Builtin
		}
		if out[i].Builtin {
			return out[i].Name < out[j].Name
		}
		return out[i].Hash.String() < out[j].Hash.String()
	})
	return out, nil
}

// Get returns one plugin's info by its hash.
func (e *Engine) Get(ctx context.Context, h wire.Hash) (*wire.PluginInfo, error) {
	p, err := e.lookup(ctx, h)
	if err != nil {
		return nil, err
	}
	info := p.info
	return &info, nil
}

// Module returns the published bytes of a plugin (for replay and export).
func (e *Engine) Module(ctx context.Context, h wire.Hash) ([]byte, error) {
	if _, err := e.lookup(ctx, h); err != nil {
		return nil, err
	}
	for _, stem := range builtin.Names() {
		if m, _ := builtin.Module(stem); wire.SHA256(m) == h {
			return m, nil
		}
	}
	if e.cfg.KV == nil {
		return nil, fmt.Errorf("plugins: %s: module bytes not kept without a store", h)
	}
	return e.cfg.KV.Get(ctx, machine.KSPlugins, []byte(keyModule+h.String()))
}

// lookup finds a loaded plugin or loads it from the store.
func (e *Engine) lookup(ctx context.Context, h wire.Hash) (*plugin, error) {
	e.mu.RLock()
	p, ok := e.loaded[h]
	e.mu.RUnlock()
	if ok {
		return p, nil
	}
	if e.cfg.KV == nil {
		return nil, fmt.Errorf("plugins: sha256:%s: %w", h, ErrUnknownPlugin)
	}
	mod, err := e.cfg.KV.Get(ctx, machine.KSPlugins, []byte(keyModule+h.String()))
	if errors.Is(err, machine.ErrNotFound) {
		return nil, fmt.Errorf("plugins: sha256:%s: %w", h, ErrUnknownPlugin)
	} else if err != nil {
		return nil, fmt.Errorf("plugins: load %s: %w", h, err)
	}
	if wire.SHA256(mod) != h {
		return nil, fmt.Errorf("plugins: stored module %s does not match its hash", h)
	}
	p, err = e.prepare(ctx, mod)
	if err != nil {
		return nil, fmt.Errorf("plugins: stored module %s: %w", h, err)
	}
	return e.insert(h, p), nil
}

// pluginFor finds the plugin of a call and marks it in use: the caller
// must release it.
func (e *Engine) pluginFor(ctx context.Context, ref syncer.RuleRef, kind string) (*plugin, error) {
	for {
		p, err := e.lookup(ctx, ref.Hash)
		if err != nil {
			return nil, err
		}
		if p.manifest.Kind != kind {
			return nil, fmt.Errorf("plugins: %s (sha256:%s) is a %s plugin, not %s", p.info.Name, ref.Hash, p.manifest.Kind, kind)
		}
		if e.use(p) {
			return p, nil
		}
	}
}

// entrySignatures are the ABI v1 exports (ABI.md §4).
var entrySignatures = map[string][2][]api.ValueType{
	"tenzro_abi_version": {{}, {i32}},
	"tenzro_alloc":       {{i32}, {i32}},
	"tenzro_error_text":  {{}, {i32}},
	"tenzro_aggregate":   {{i32, i32, i32, i32, i32, i32, i32, i32, i32}, {i32}},
	"tenzro_verify":      {{i32, i32, i32, i32, i32, i32, i32, i32}, {i32}},
	"tenzro_outer_step":  {{i32, i32, i32, i32, i32, i32, api.ValueTypeF32, api.ValueTypeF32, i32}, {i32}},
	// ABI v2 (ABI.md §4.1)
	"tenzro_decode": {{i32, i32, i32, i32, i32, i32, i32}, {i32}},
	"_initialize":   {{}, {}},
	// chunked passes (ABI.md §6)
	"tenzro_chunk_plan":   {{i32, i32, i32, i32, i32}, {i32}},
	"tenzro_chunk_pass":   {{i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32}, {i32}},
	"tenzro_verify_chunk": {{i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32}, {i32}},
}

// passEntry is the chunked entry point a "passes" plugin of each kind must
// export besides tenzro_chunk_plan.
var passEntry = map[string]string{abi.KindAggregate: "tenzro_chunk_pass", abi.KindVerify: "tenzro_verify_chunk"}

var kindEntry = map[string]string{abi.KindAggregate: "tenzro_aggregate", abi.KindVerify: "tenzro_verify", abi.KindOuter: "tenzro_outer_step", abi.KindDecode: "tenzro_decode"}

// prepare validates a module against ABI v1, instruments and compiles it.
func (e *Engine) prepare(ctx context.Context, module []byte) (*plugin, error) {
	if len(module) > e.cfg.MaxModuleBytes {
		return nil, fmt.Errorf("plugins: module is %d bytes, limit %d", len(module), e.cfg.MaxModuleBytes)
	}
	raw, ok, err := abi.FindCustomSection(module, abi.ManifestSection)
	if err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("plugins: module has no %q custom section (attach one with `tenzro plugin build`)", abi.ManifestSection)
	}
	man, err := abi.ParseManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	if err := checkStructure(module, man); err != nil {
		return nil, fmt.Errorf("plugins: %s: %w", man.ID, err)
	}
	if e.pool != nil {
		return e.prepareRemote(ctx, module, man)
	}
	ins, err := Instrument(module, e.costs)
	if err != nil {
		return nil, fmt.Errorf("plugins: %s: instrument: %w", man.ID, err)
	}
	code := ins.Module
	if e.cfg.NoFuel {
		code = module
	}
	compiled, err := e.rt.CompileModule(ctx, code)
	if err != nil {
		return nil, fmt.Errorf("plugins: %s: compile: %w", man.ID, err)
	}
	exports := compiled.ExportedFunctions()
	for name, sig := range entrySignatures {
		def, ok := exports[name]
		if !ok {
			continue
		}
		if !sameTypes(def.ParamTypes(), sig[0]) || !sameTypes(def.ResultTypes(), sig[1]) {
			_ = compiled.Close(ctx)
			return nil, fmt.Errorf("plugins: %s: export %s has the wrong signature", man.ID, name)
		}
	}
	required := []string{"tenzro_abi_version", "tenzro_alloc", kindEntry[man.Kind]}
	if man.Chunking == abi.ChunkPasses {
		required = append(required, "tenzro_chunk_plan", passEntry[man.Kind])
	}
	for _, name := range required {
		if _, ok := exports[name]; !ok {
			_ = compiled.Close(ctx)
			return nil, fmt.Errorf("plugins: %s: missing export %s (ABI v%d requires it for a %s plugin with chunking %q)", man.ID, name, man.ABI, man.Kind, man.Chunking)
		}
	}
	if _, ok := compiled.ExportedMemories()["memory"]; !ok {
		_ = compiled.Close(ctx)
		return nil, fmt.Errorf("plugins: %s: missing export memory", man.ID)
	}
	canon, _ := json.Marshal(man)
	p := &plugin{
		manifest: man,
		compiled: compiled,
		info: wire.PluginInfo{
			Hash:             wire.SHA256(module),
			InstrumentedHash: wire.SHA256(ins.Module),
			CostTableHash:    e.costs.Hash(),
			Name:             man.ID,
			Version:          man.Version,
			Kind:             man.Kind,
			Size:             len(module),
			Manifest:         canon,
		},
	}
	_, p.hasInit = exports["_initialize"]
	_, p.hasError = exports["tenzro_error_text"]
	// The ABI version is checked by calling it, under the small fixed probe
	// budget (budget.go): publishing is open to anyone.
	ctx = WithProbeBudget(ctx)
	c, err := e.newCall(ctx, p, e.fuelFor(ctx), nil)
	if err != nil {
		_ = compiled.Close(ctx)
		return nil, err
	}
	res, err := c.invoke(ctx, "tenzro_abi_version")
	c.close(ctx)
	if err != nil {
		_ = compiled.Close(ctx)
		return nil, fmt.Errorf("plugins: %s: tenzro_abi_version: %w", man.ID, err)
	}
	if v := int32(res[0]); v != int32(man.ABI) {
		_ = compiled.Close(ctx)
		return nil, fmt.Errorf("plugins: %s: tenzro_abi_version returned %d, its manifest says abi %d (this host implements ABI %d..%d)", man.ID, v, man.ABI, abi.MinABIVersion, abi.ABIVersion)
	}
	return p, nil
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkStructure enforces the import rules and refuses a start section.
func checkStructure(module []byte, man *abi.Manifest) error {
	if err := checkSharedMemory(module); err != nil {
		return err
	}
	if err := precheck(module); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	m, err := binary.DecodeModule(module, wasm.CoreFeaturesV2)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	for _, im := range m.ImportSection {
		if im.Type != wasm.ExternTypeFunc {
			return fmt.Errorf("import %s.%s: only function imports are allowed (no imported memory, table or global)", im.Module, im.Name)
		}
		sig, ok := allowedImports[im.Name]
		if im.Module != wasiModule || !ok {
			return fmt.Errorf("import %s.%s is not in the allowed set (ABI.md §7: %s functions for Go wasip1 only)", im.Module, im.Name, wasiModule)
		}
		if int(im.DescFunc) >= len(m.TypeSection) {
			return fmt.Errorf("import %s.%s: bad type index", im.Module, im.Name)
		}
		ft := m.TypeSection[im.DescFunc]
		if !sameTypes(ft.Params, sig[0]) || !sameTypes(ft.Results, sig[1]) {
			return fmt.Errorf("import %s.%s has the wrong signature", im.Module, im.Name)
		}
	}
	if m.StartSection != nil {
		return errors.New("a start section is not allowed (ABI v1: plugins run only through their entry points)")
	}
	_ = hex.EncodeToString
	_ = man
	return nil
}
