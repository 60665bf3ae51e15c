package plugins

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gowebpki/jcs"
	"github.com/tetratelabs/wabin/binary"
	"github.com/tetratelabs/wabin/leb128"
	"github.com/tetratelabs/wabin/wasm"

	twire "github.com/tenzro/train/wire"
)

// FuelExport is the name under which the instrumented module exports its
// fuel counter (a mutable i64 global).
const FuelExport = "tenzro_fuel"

// maxFuel bounds budgets so that no charge can wrap the signed counter.
const maxFuel = 1 << 62

// CostTable is the deterministic price of instructions. Every instruction is
// charged once per entry of its innermost enclosing loop iteration (or per
// function call when it is in no loop) — an upper bound on what runs, since
// structured control flow only jumps backwards to loop headers.
type CostTable struct {
	Version int `json:"version"`
	// Default is the cost of an instruction not listed below.
	Default uint64 `json:"default"`
	// Call is the cost of call and call_indirect.
	Call uint64 `json:"call"`
	// Div is the cost of integer division/remainder and float div/sqrt.
	Div uint64 `json:"div"`
	// MemoryGrow is the static cost of memory.grow; each page grown also
	// costs GrowPerPage (charged dynamically before the instruction).
	MemoryGrow  uint64 `json:"memory_grow"`
	GrowPerPage uint64 `json:"grow_per_page"`
	// BulkShift: memory.copy, memory.fill and memory.init cost 1 per
	// 2^BulkShift bytes (charged dynamically before the instruction).
	BulkShift uint64 `json:"bulk_shift"`
}

// DefaultCostTable is the protocol's cost table v1.
var DefaultCostTable = CostTable{Version: 1, Default: 1, Call: 3, Div: 4, MemoryGrow: 100, GrowPerPage: 1024, BulkShift: 6}

// Hash is SHA-256 of the table's canonical JSON.
func (t CostTable) Hash() twire.Hash {
	b, _ := json.Marshal(t)
	c, err := jcs.Transform(b)
	if err != nil {
		panic(err) // a struct of integers always canonicalises
	}
	return twire.SHA256(c)
}

func (t CostTable) cost(op uint32) uint64 {
	switch {
	case op == opCall || op == opCallInd:
		return t.Call
	case op == opMemoryGrow:
		return t.MemoryGrow
	case op == 0x6d || op == 0x6e || op == 0x6f || op == 0x70 || // i32 div/rem
		op == 0x7f || op == 0x80 || op == 0x81 || op == 0x82 || // i64 div/rem
		op == 0x91 || op == 0x95 || op == 0x9f || op == 0xa3: // f32/f64 sqrt, div
		return t.Div
	}
	return t.Default
}

// InstrumentResult describes an instrumented module.
type InstrumentResult struct {
	Module []byte
	// FuelGlobal is the index of the injected global.
	FuelGlobal uint32
	// Sites is the number of charge points injected.
	Sites int
}

// Instrument injects fuel metering into a module: a mutable i64 global,
// exported as tenzro_fuel, is checked and decremented at every function
// entry and loop header by the static cost of the code that runs until the
// next charge point, and before memory.grow, memory.copy, memory.fill and
// memory.init by a cost proportional to their size. When the counter goes
// below zero (signed) the code executes unreachable; the host reads the
// negative counter to tell out-of-fuel from other traps.
// The output is a deterministic function of the input and the cost table.
func Instrument(module []byte, t CostTable) (*InstrumentResult, error) {
	if err := checkSharedMemory(module); err != nil {
		return nil, err
	}
	if err := precheck(module); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	m, err := binary.DecodeModule(module, wasm.CoreFeaturesV2)
	if err != nil {
		if strings.Contains(err.Error(), "for limits: 0x3") || strings.Contains(err.Error(), "for limits: 0x2") {
			return nil, fmt.Errorf("decode: %w", ErrThreads)
		}
		return nil, fmt.Errorf("decode: %w", err)
	}
	for _, e := range m.ExportSection {
		if e.Name == FuelExport {
			return nil, fmt.Errorf("module already exports %q", FuelExport)
		}
	}
	var importedGlobals, importedFuncs uint32
	for _, im := range m.ImportSection {
		switch im.Type {
		case wasm.ExternTypeGlobal:
			importedGlobals++
		case wasm.ExternTypeFunc:
			importedFuncs++
		}
	}
	g := importedGlobals + uint32(len(m.GlobalSection))
	res := &InstrumentResult{FuelGlobal: g}
	for i, code := range m.CodeSection {
		ti := m.FunctionSection[i]
		if int(ti) >= len(m.TypeSection) {
			return nil, fmt.Errorf("function %d: type index %d out of range", importedFuncs+uint32(i), ti)
		}
		nparams := uint32(len(m.TypeSection[ti].Params))
		body, extra, sites, err := instrumentBody(code.Body, g, nparams+uint32(len(code.LocalTypes)), t)
		if err != nil {
			return nil, fmt.Errorf("function %d: %w", importedFuncs+uint32(i), err)
		}
		code.Body = body
		code.LocalTypes = append(code.LocalTypes, extra...)
		res.Sites += sites
	}
	m.GlobalSection = append(m.GlobalSection, &wasm.Global{
		Type: &wasm.GlobalType{ValType: wasm.ValueTypeI64, Mutable: true},
		Init: &wasm.ConstantExpression{Opcode: wasm.OpcodeI64Const, Data: leb128.EncodeInt64(0)},
	})
	m.ExportSection = append(m.ExportSection, &wasm.Export{Type: wasm.ExternTypeGlobal, Name: FuelExport, Index: g})
	out := binary.EncodeModule(m)
	if m.DataCountSection != nil {
		out, err = insertDataCount(out, *m.DataCountSection)
		if err != nil {
			return nil, err
		}
	}
	res.Module = out
	return res, nil
}

// instrumentBody rewrites one function body. firstFree is the index of the
// first local after params and declared locals (where scratch locals go).
func instrumentBody(body []byte, g, firstFree uint32, t CostTable) ([]byte, []wasm.ValueType, int, error) {
	ins, err := decodeBody(body)
	if err != nil {
		return nil, nil, 0, err
	}
	// Pass 1: static costs per segment (function entry = segment 0, then one
	// per loop in order of appearance).
	type ctl struct {
		loop bool
		seg  int
	}
	costs := []uint64{0}
	loopSeg := map[int]int{} // instruction index of a loop -> segment
	stack := []ctl{{seg: 0}}
	needBulk := false
	for i, in := range ins {
		cur := stack[len(stack)-1].seg
		costs[cur] += t.cost(in.op)
		switch in.op {
		case opBlock, opIf:
			stack = append(stack, ctl{seg: cur})
		case opLoop:
			costs = append(costs, 0)
			loopSeg[i] = len(costs) - 1
			stack = append(stack, ctl{loop: true, seg: len(costs) - 1})
		case opEnd:
			stack = stack[:len(stack)-1]
			if len(stack) == 0 && i != len(ins)-1 {
				return nil, nil, 0, errors.New("unbalanced end")
			}
		case opMemoryCopy, opMemoryFill, opMemoryInit, opMemoryGrow:
			needBulk = true
		}
	}
	t32, t64 := firstFree, firstFree+1
	var extra []wasm.ValueType
	if needBulk {
		extra = []wasm.ValueType{wasm.ValueTypeI32, wasm.ValueTypeI64}
	}
	// Pass 2: emit.
	out := make([]byte, 0, len(body)+64*(len(costs)))
	out = appendCharge(out, g, costs[0])
	sites := 1
	for i, in := range ins {
		switch in.op {
		case opMemoryCopy, opMemoryFill, opMemoryInit:
			out = appendDynCharge(out, g, t32, t64, opI64ShrU, t.BulkShift)
			sites++
		case opMemoryGrow:
			out = appendDynCharge(out, g, t32, t64, 0x7e /* i64.mul */, t.GrowPerPage)
			sites++
		}
		out = append(out, body[in.start:in.end]...)
		if s, ok := loopSeg[i]; ok {
			c := costs[s]
			if c == 0 {
				c = 1
			}
			out = appendCharge(out, g, c)
			sites++
		}
	}
	return out, extra, sites, nil
}

// appendCharge: fuel -= c; if fuel < 0 (signed) { unreachable }.
// Subtracting before the check keeps the counter from wrapping when the
// host's backstop stores a negative value concurrently.
func appendCharge(out []byte, g uint32, c uint64) []byte {
	out = appendGlobal(out, opGlobalGet, g)
	out = append(out, opI64Const)
	out = append(out, leb128.EncodeInt64(int64(c))...)
	out = append(out, opI64Sub)
	out = appendGlobal(out, opGlobalSet, g)
	return appendCheck(out, g)
}

// appendDynCharge charges f(n) where n is the i32 on top of the stack (left
// in place): f(n) = n >> arg (op i64.shr_u) or n * arg (op i64.mul).
func appendDynCharge(out []byte, g, t32, t64 uint32, op byte, arg uint64) []byte {
	out = appendLocal(out, opLocalTee, t32)
	out = appendLocal(out, opLocalGet, t32)
	out = append(out, opI64ExtendU, opI64Const)
	out = append(out, leb128.EncodeInt64(int64(arg))...)
	out = append(out, op)
	out = appendLocal(out, opLocalSet, t64)
	out = appendGlobal(out, opGlobalGet, g)
	out = appendLocal(out, opLocalGet, t64)
	out = append(out, opI64Sub)
	out = appendGlobal(out, opGlobalSet, g)
	return appendCheck(out, g)
}

func appendCheck(out []byte, g uint32) []byte {
	out = appendGlobal(out, opGlobalGet, g)
	out = append(out, opI64Const, 0x00, opI64LtS, opIf, 0x40, opUnreachable, opEnd)
	return out
}

func appendGlobal(out []byte, op byte, idx uint32) []byte {
	return append(append(out, op), leb128.EncodeUint32(idx)...)
}

func appendLocal(out []byte, op byte, idx uint32) []byte {
	return append(append(out, op), leb128.EncodeUint32(idx)...)
}

// checkSharedMemory refuses a memory section declaring shared memory.
func checkSharedMemory(module []byte) error {
	if len(module) < 8 {
		return errors.New("not a wasm module: too short")
	}
	r := module[8:]
	for len(r) > 0 {
		id := r[0]
		size, p, err := readU32(r, 1)
		if err != nil || uint64(p)+uint64(size) > uint64(len(r)) {
			return nil // let the decoder report it
		}
		body := r[p : p+int(size)]
		r = r[p+int(size):]
		if id == wasm.SectionIDMemory {
			n, q, err := readU32(body, 0)
			if err == nil && n > 0 && q < len(body) && body[q]&2 != 0 {
				return fmt.Errorf("shared memory: %w", ErrThreads)
			}
		}
	}
	return nil
}

// insertDataCount puts a data count section right before the code section
// (wabin's encoder does not write it).
func insertDataCount(mod []byte, count uint32) ([]byte, error) {
	pos := 8
	for pos < len(mod) {
		id := mod[pos]
		size, p, err := readU32(mod, pos+1)
		if err != nil {
			return nil, fmt.Errorf("re-encode: %w", err)
		}
		if id == wasm.SectionIDCode || id == wasm.SectionIDData {
			payload := leb128.EncodeUint32(count)
			sec := append([]byte{wasm.SectionIDDataCount}, leb128.EncodeUint32(uint32(len(payload)))...)
			sec = append(sec, payload...)
			out := append(append(append([]byte{}, mod[:pos]...), sec...), mod[pos:]...)
			return out, nil
		}
		pos = p + int(size)
	}
	return nil, errors.New("re-encode: no code or data section for the data count")
}
