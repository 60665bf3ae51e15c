package hostilemod

import (
	"github.com/tetratelabs/wabin/binary"
	"github.com/tetratelabs/wabin/leb128"
	"github.com/tetratelabs/wabin/wasm"

	"github.com/tenzro/train/plugins/abi"
)

// Bodies of entry points (without the final end).
var (
	// Loop spins forever, then would return 0.
	Loop = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b, 0x41, 0x00}
	// ReturnZero returns 0 (success).
	ReturnZero = []byte{0x41, 0x00}
	// ABIOne returns 1 (the ABI version).
	ABIOne = append([]byte{0x41}, leb128.EncodeInt32(1)...)
	// GrowTouch grows memory a page at a time, writing to every new page,
	// and traps when the limit refuses more.
	GrowTouch = []byte{
		0x03, 0x40, // loop
		0x41, 0x01, 0x40, 0x00, // memory.grow 1
		0x41, 0x7f, 0x46, 0x04, 0x40, 0x00, 0x0b, // == -1 ? unreachable
		0x3f, 0x00, 0x41, 0x01, 0x6b, 0x41, 0x10, 0x74, // (memory.size - 1) << 16
		0x41, 0x01, 0x36, 0x02, 0x00, // i32.store 1
		0x0c, 0x00, 0x0b, // br 0; end
		0x41, 0x00,
	}
	// LoopUnlessProbe returns at once when n (the third parameter) is at
	// most 8, as in the quorum probe, and spins forever on real inputs.
	LoopUnlessProbe = []byte{
		0x20, 0x02, 0x41, 0x08, 0x4b, // local.get 2; i32.const 8; i32.gt_u
		0x04, 0x40, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b, // if: loop br 0 end; end
		0x41, 0x00,
	}
)

const manifest = `{"abi":1,"id":"Hostile","version":"0.0.1","kind":"aggregate","dtypes":["F32","BF16"],"params":[]}`

// Build returns an aggregation plugin with the given tenzro_abi_version
// and tenzro_aggregate bodies and memMin initial pages (0 = 1).
func Build(abiBody, aggBody []byte, memMin uint32) ([]byte, error) {
	if memMin == 0 {
		memMin = 1
	}
	tI32 := &wasm.FunctionType{Results: []wasm.ValueType{wasm.ValueTypeI32}}
	tAlloc := &wasm.FunctionType{Params: []wasm.ValueType{wasm.ValueTypeI32}, Results: []wasm.ValueType{wasm.ValueTypeI32}}
	tAgg := &wasm.FunctionType{Params: []wasm.ValueType{0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f}, Results: []wasm.ValueType{wasm.ValueTypeI32}}
	m := &wasm.Module{TypeSection: []*wasm.FunctionType{tI32, tAlloc, tAgg}}
	m.FunctionSection = []wasm.Index{0, 1, 2}
	m.CodeSection = []*wasm.Code{
		{Body: append(append([]byte{}, abiBody...), 0x0b)},
		// tenzro_alloc: bump allocator from 1024 over a global-free memory:
		// returns 1024 (the hostile bodies never read their inputs).
		{Body: []byte{0x41, 0x80, 0x08, 0x0b}},
		{Body: append(append([]byte{}, aggBody...), 0x0b)},
	}
	m.MemorySection = &wasm.Memory{Min: memMin}
	m.ExportSection = []*wasm.Export{
		{Type: wasm.ExternTypeMemory, Name: "memory", Index: 0},
		{Type: wasm.ExternTypeFunc, Name: "tenzro_abi_version", Index: 0},
		{Type: wasm.ExternTypeFunc, Name: "tenzro_alloc", Index: 1},
		{Type: wasm.ExternTypeFunc, Name: "tenzro_aggregate", Index: 2},
	}
	return abi.AppendManifest(binary.EncodeModule(m), []byte(manifest))
}
