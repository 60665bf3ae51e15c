package plugins

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wabin/binary"
	"github.com/tetratelabs/wabin/leb128"
	"github.com/tetratelabs/wabin/wasm"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/abi"
	"github.com/tenzro/train/syncer"
)

// modSpec describes a synthetic aggregation plugin built with wabin.
type modSpec struct {
	abiVersion  int32
	abiBody     []byte // body of tenzro_abi_version (default: return abiVersion)
	aggBody     []byte // body of tenzro_aggregate, without the final end
	noAlloc     bool
	imports     []*wasm.Import
	memMin      uint32
	memMaxPages *uint32
	start       bool
}

var (
	tI32   = &wasm.FunctionType{Results: []wasm.ValueType{wasm.ValueTypeI32}}
	tAlloc = &wasm.FunctionType{Params: []wasm.ValueType{wasm.ValueTypeI32}, Results: []wasm.ValueType{wasm.ValueTypeI32}}
	tAgg   = &wasm.FunctionType{Params: []wasm.ValueType{0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f}, Results: []wasm.ValueType{wasm.ValueTypeI32}}
	tWasi  = &wasm.FunctionType{Params: []wasm.ValueType{0x7f, 0x7f}, Results: []wasm.ValueType{wasm.ValueTypeI32}}
)

const testManifest = `{"abi":1,"id":"Hostile","version":"0.0.1","kind":"aggregate","dtypes":["F32"],"params":[]}`

func buildModule(t testing.TB, s modSpec) []byte {
	t.Helper()
	if s.abiVersion == 0 {
		s.abiVersion = 1
	}
	if s.memMin == 0 {
		s.memMin = 1
	}
	m := &wasm.Module{TypeSection: []*wasm.FunctionType{tI32, tAlloc, tAgg, tWasi}}
	m.ImportSection = s.imports
	nimp := uint32(len(s.imports))
	ver := append([]byte{0x41}, leb128.EncodeInt32(s.abiVersion)...)
	m.FunctionSection = []wasm.Index{0, 1, 2}
	if s.abiBody != nil {
		ver = s.abiBody
	}
	m.CodeSection = []*wasm.Code{
		{Body: append(append([]byte{}, ver...), 0x0b)},
		{Body: []byte{0x41, 0x80, 0x08, 0x0b}}, // i32.const 1024
		{Body: append(append([]byte{}, s.aggBody...), 0x0b)},
	}
	m.MemorySection = &wasm.Memory{Min: s.memMin}
	if s.memMaxPages != nil {
		m.MemorySection.Max, m.MemorySection.IsMaxEncoded = *s.memMaxPages, true
	}
	m.ExportSection = []*wasm.Export{
		{Type: wasm.ExternTypeMemory, Name: "memory", Index: 0},
		{Type: wasm.ExternTypeFunc, Name: "tenzro_abi_version", Index: nimp},
		{Type: wasm.ExternTypeFunc, Name: "tenzro_aggregate", Index: nimp + 2},
	}
	if !s.noAlloc {
		m.ExportSection = append(m.ExportSection, &wasm.Export{Type: wasm.ExternTypeFunc, Name: "tenzro_alloc", Index: nimp + 1})
	}
	if s.start {
		idx := nimp
		m.StartSection = &idx
	}
	out, err := abi.AppendManifest(binary.EncodeModule(m), []byte(testManifest))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// patch replaces the first occurrence of old in b (to inject bytes wabin
// would not encode, e.g. a shared-memory flag).
func patch(t testing.TB, b, old, new []byte) []byte {
	t.Helper()
	i := strings.Index(string(b), string(old))
	if i < 0 {
		t.Fatalf("patch: %x not found", old)
	}
	return append(append(append([]byte{}, b[:i]...), new...), b[i+len(old):]...)
}

func hostileEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := NewEngine(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func runHostile(t *testing.T, e *Engine, mod []byte) error {
	t.Helper()
	ctx := context.Background()
	info, err := e.Publish(ctx, mod)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	ref, _, _, err := e.resolve(ctx, "sha256:"+info.Hash.String(), nil, KindAggregate)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Aggregate(ctx, syncer.AggregateInput{Rule: ref, Dtype: machine.F32, N: 4, Inputs: [][]byte{make([]byte, 16), make([]byte, 16)}})
	return err
}

func wantFailure(t *testing.T, err error, code uint32, substr string) {
	t.Helper()
	var rf *syncer.RuleFailure
	if !errors.As(err, &rf) {
		t.Fatalf("want a recorded RuleFailure (code %d), got %v", code, err)
	}
	if rf.Code != code || !strings.Contains(rf.Reason, substr) {
		t.Fatalf("got code %d %q, want code %d containing %q", rf.Code, rf.Reason, code, substr)
	}
}

func TestHostileAtRuntime(t *testing.T) {
	e := hostileEngine(t, Config{Fuel: 50_000_000, MemoryPages: 64})
	infinite := []byte{0x03, 0x40, 0x0c, 0x00, 0x0b, 0x41, 0x00} // loop br 0 end; i32.const 0
	// memory bomb: grow by 30000 pages (refused under the limit), then
	// write past the end -> trap.
	bomb := []byte{0x41, 0xb0, 0xea, 0x01, 0x40, 0x00, 0x1a, 0x41, 0x80, 0x80, 0x80, 0x80, 0x04, 0x41, 0x01, 0x36, 0x02, 0x00, 0x41, 0x00}
	trap := []byte{0x00}
	guestErr := []byte{0x41, 0x07}
	t.Run("infinite loop runs out of fuel", func(t *testing.T) {
		err := runHostile(t, e, buildModule(t, modSpec{aggBody: infinite}))
		wantFailure(t, err, CodeOutOfFuel, "out of fuel")
		// deterministic: the same fuel every time
		err2 := runHostile(t, e, buildModule(t, modSpec{aggBody: infinite}))
		if err.Error() != err2.Error() {
			t.Fatalf("not deterministic: %v vs %v", err, err2)
		}
	})
	t.Run("memory bomb hits the page limit", func(t *testing.T) {
		wantFailure(t, runHostile(t, e, buildModule(t, modSpec{aggBody: bomb})), CodeTrap, "out of bounds")
	})
	t.Run("trap", func(t *testing.T) {
		wantFailure(t, runHostile(t, e, buildModule(t, modSpec{aggBody: trap})), CodeTrap, "unreachable")
	})
	t.Run("guest error code", func(t *testing.T) {
		wantFailure(t, runHostile(t, e, buildModule(t, modSpec{aggBody: guestErr})), 7, "rule error 7")
	})
	t.Run("node still works", func(t *testing.T) {
		rr := mustResolve(t, e, "Mean", 2)
		out := aggregate(t, e, rr, [][]float32{{1}, {3}})
		if toF32(out.Aggregate)[0] != 2 {
			t.Fatal("Mean broken after hostile plugins")
		}
	})
}

func TestHostileAtRegistration(t *testing.T) {
	e := hostileEngine(t, Config{MemoryPages: 64})
	ok := []byte{0x41, 0x00}
	big := uint32(100)
	tests := []struct {
		name string
		mod  func(t *testing.T) []byte
		want string
	}{
		{"wrong ABI version", func(t *testing.T) []byte { return buildModule(t, modSpec{abiVersion: 2, aggBody: ok}) }, "returned 2"},
		{"missing alloc", func(t *testing.T) []byte { return buildModule(t, modSpec{noAlloc: true, aggBody: ok}) }, "missing export tenzro_alloc"},
		{"disallowed import", func(t *testing.T) []byte {
			return buildModule(t, modSpec{aggBody: ok, imports: []*wasm.Import{{Type: wasm.ExternTypeFunc, Module: "env", Name: "now", DescFunc: 3}}})
		}, "not in the allowed set"},
		{"wasi outside the set", func(t *testing.T) []byte {
			return buildModule(t, modSpec{aggBody: ok, imports: []*wasm.Import{{Type: wasm.ExternTypeFunc, Module: "wasi_snapshot_preview1", Name: "path_open", DescFunc: 3}}})
		}, "not in the allowed set"},
		{"start section", func(t *testing.T) []byte { return buildModule(t, modSpec{aggBody: ok, start: true}) }, "start section"},
		{"memory above the limit", func(t *testing.T) []byte { return buildModule(t, modSpec{aggBody: ok, memMin: 70}) }, "compile"},
		{"atomics", func(t *testing.T) []byte {
			// i32.atomic.load (0xFE 0x10 memarg) then drop
			return buildModule(t, modSpec{aggBody: []byte{0x41, 0x00, 0xfe, 0x10, 0x02, 0x00, 0x1a, 0x41, 0x00}})
		}, "threads"},
		{"shared memory", func(t *testing.T) []byte {
			m := buildModule(t, modSpec{aggBody: ok, memMin: 1, memMaxPages: &big})
			return patch(t, m, []byte{0x05, 0x04, 0x01, 0x01, 0x01, 0x64}, []byte{0x05, 0x04, 0x01, 0x03, 0x01, 0x64})
		}, "threads"},
		{"relaxed simd", func(t *testing.T) []byte {
			// v128.const 0; f32x4.relaxed_madd is 0xFD 0x105 (three operands)
			v := append([]byte{0xfd, 0x0c}, make([]byte, 16)...)
			body := append(append(append(append([]byte{}, v...), v...), v...), 0xfd, 0x85, 0x02, 0x1a, 0x41, 0x00)
			return buildModule(t, modSpec{aggBody: body})
		}, "relaxed SIMD"},
		{"100 MB module", func(t *testing.T) []byte {
			m := buildModule(t, modSpec{aggBody: ok})
			return append(m, make([]byte, 100<<20)...)
		}, "limit"},
		{"no manifest", func(t *testing.T) []byte { return []byte("\x00asm\x01\x00\x00\x00") }, "no \"tenzro.manifest\""},
		{"not wasm", func(t *testing.T) []byte { return []byte("hello world") }, "not a wasm module"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Publish(context.Background(), tc.mod(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestWallClockBackstop: a budget far beyond the wall-clock limit; the
// caller gets an infrastructure error (not recorded) at the deadline, and
// the abandoned instance stops by itself when its fuel runs out. (Fuel stays
// the real bound: JIT code cannot be preempted, see RATIONALE.)
func TestWallClockBackstop(t *testing.T) {
	e := hostileEngine(t, Config{Fuel: 1_000_000_000})
	// The 5 ms backstop applies after the built-ins have loaded: on a loaded
	// machine their registration calls could exceed it themselves.
	e.cfg.WallClock = 5 * time.Millisecond
	err := runHostile(t, e, buildModule(t, modSpec{aggBody: []byte{0x03, 0x40, 0x0c, 0x00, 0x0b, 0x41, 0x00}}))
	var rf *syncer.RuleFailure
	if err == nil || errors.As(err, &rf) || !strings.Contains(err.Error(), "wall-clock") {
		t.Fatalf("want a wall-clock infrastructure error, got %v", err)
	}
}
