package plugins

import (
	"context"
	"encoding/binary"
	"os"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// wasiModule is the only import module a plugin may use. It exists for Go
// (GOOS=wasip1) plugins, whose runtime imports these functions; C plugins
// import nothing. Every function is a deterministic stub (ABI.md §7):
//
//	args_sizes_get, environ_sizes_get   report zero entries
//	args_get, environ_get               write nothing
//	clock_time_get                      1 s + fuel spent so far, in ns (no real clock)
//	random_get                          fills with zero bytes (no randomness)
//	fd_write                            discards, reports every byte written
//	poll_oneoff                         every subscription fires at once
//	sched_yield                         success
//	proc_exit                           ends the call (a recorded trap)
const wasiModule = "wasi_snapshot_preview1"

// allowedImports maps each allowed import to its signature (params, results).
var allowedImports = map[string][2][]api.ValueType{
	"args_get":          {{i32, i32}, {i32}},
	"args_sizes_get":    {{i32, i32}, {i32}},
	"environ_get":       {{i32, i32}, {i32}},
	"environ_sizes_get": {{i32, i32}, {i32}},
	"clock_time_get":    {{i32, i64, i32}, {i32}},
	"random_get":        {{i32, i32}, {i32}},
	"fd_write":          {{i32, i32, i32, i32}, {i32}},
	"poll_oneoff":       {{i32, i32, i32, i32}, {i32}},
	"sched_yield":       {{}, {i32}},
	"proc_exit":         {{i32}, {}},
}

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64

	errnoSuccess = 0
	errnoFault   = 21
	errnoNosys   = 52
)

func writeU32s(m api.Module, vals ...[2]uint32) uint32 {
	for _, v := range vals {
		if !m.Memory().WriteUint32Le(v[0], v[1]) {
			return errnoFault
		}
	}
	return errnoSuccess
}

func instantiateWASI(ctx context.Context, r wazero.Runtime) error {
	b := r.NewHostModuleBuilder(wasiModule)
	sizes := api.GoModuleFunc(func(_ context.Context, m api.Module, s []uint64) {
		s[0] = uint64(writeU32s(m, [2]uint32{uint32(s[0]), 0}, [2]uint32{uint32(s[1]), 0}))
	})
	nothing := api.GoModuleFunc(func(_ context.Context, _ api.Module, s []uint64) { s[0] = errnoSuccess })
	fns := map[string]api.GoModuleFunc{
		"args_sizes_get":    sizes,
		"environ_sizes_get": sizes,
		"args_get":          nothing,
		"environ_get":       nothing,
		"sched_yield":       nothing,
		"clock_time_get": func(_ context.Context, m api.Module, s []uint64) {
			if !m.Memory().WriteUint64Le(uint32(s[2]), fuelClock(m)) {
				s[0] = errnoFault
				return
			}
			s[0] = errnoSuccess
		},
		"random_get": func(_ context.Context, m api.Module, s []uint64) {
			buf, ok := m.Memory().Read(uint32(s[0]), uint32(s[1]))
			if !ok {
				s[0] = errnoFault
				return
			}
			clear(buf)
			s[0] = errnoSuccess
		},
		"fd_write": func(_ context.Context, m api.Module, s []uint64) {
			iovs, n := uint32(s[1]), uint32(s[2])
			if n > 1024 {
				s[0] = errnoFault
				return
			}
			raw, ok := m.Memory().Read(iovs, n*8)
			if !ok {
				s[0] = errnoFault
				return
			}
			var total uint32
			for i := uint32(0); i < n; i++ {
				l := binary.LittleEndian.Uint32(raw[i*8+4:])
				total += l
				if debugWrites {
					if b, ok := m.Memory().Read(binary.LittleEndian.Uint32(raw[i*8:]), l); ok {
						os.Stderr.Write(b)
					}
				}
			}
			s[0] = uint64(writeU32s(m, [2]uint32{uint32(s[3]), total}))
		},
		"poll_oneoff": func(_ context.Context, m api.Module, s []uint64) {
			// Every subscription fires at once (a sleep returns immediately).
			in, out, n := uint32(s[0]), uint32(s[1]), uint32(s[2])
			if n == 0 || n > 64 {
				s[0] = errnoNosys
				return
			}
			mem := m.Memory()
			for i := uint32(0); i < n; i++ {
				ud, ok1 := mem.ReadUint64Le(in + 48*i)
				tag, ok2 := mem.ReadByte(in + 48*i + 8)
				ev := make([]byte, 32)
				binary.LittleEndian.PutUint64(ev, ud)
				ev[10] = tag
				if !ok1 || !ok2 || !mem.Write(out+32*i, ev) {
					s[0] = errnoFault
					return
				}
			}
			s[0] = uint64(writeU32s(m, [2]uint32{uint32(s[3]), n}))
		},
		"proc_exit": func(ctx context.Context, m api.Module, s []uint64) {
			code := uint32(s[0])
			_ = m.CloseWithExitCode(ctx, code)
			panic(sys.NewExitError(code))
		},
	}
	for name, sig := range allowedImports {
		b.NewFunctionBuilder().WithGoModuleFunction(fns[name], sig[0], sig[1]).Export(name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// debugWrites copies guest fd_write output to the host's stderr when
// TENZRO_PLUGIN_DEBUG is set (diagnostics only; never affects results).
var debugWrites = os.Getenv("TENZRO_PLUGIN_DEBUG") != ""

// fuelClock is the guest's only clock: one second plus the fuel the instance
// has spent, read as nanoseconds. It is monotonic and deterministic.
func fuelClock(m api.Module) uint64 {
	g := m.ExportedGlobal(FuelExport)
	if g == nil {
		return 1e9
	}
	return 1e9 + (maxFuel - min(g.Get(), maxFuel))
}
