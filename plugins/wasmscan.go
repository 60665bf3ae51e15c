package plugins

import (
	"errors"
	"fmt"
)

// readU32 decodes an unsigned LEB128 u32 at b[pos:], returning the value and
// the position after it.
func readU32(b []byte, pos int) (uint32, int, error) {
	var v uint64
	for i := 0; i < 5; i++ {
		if pos >= len(b) {
			return 0, pos, errors.New("truncated LEB128")
		}
		c := b[pos]
		pos++
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			if v > 0xffffffff {
				return 0, pos, errors.New("LEB128 u32 overflow")
			}
			return uint32(v), pos, nil
		}
	}
	return 0, pos, errors.New("LEB128 u32 too long")
}

// skipLEB skips a signed or unsigned LEB128 of at most maxBytes bytes.
func skipLEB(b []byte, pos, maxBytes int) (int, error) {
	for i := 0; i < maxBytes; i++ {
		if pos >= len(b) {
			return pos, errors.New("truncated LEB128")
		}
		c := b[pos]
		pos++
		if c&0x80 == 0 {
			return pos, nil
		}
	}
	return pos, errors.New("LEB128 too long")
}

// Unsupported-feature errors, matched by tests and the conformance suite.
var (
	ErrThreads     = errors.New("threads/atomics instructions are not allowed (non-deterministic); build without -pthread/-matomics")
	ErrRelaxedSIMD = errors.New("relaxed SIMD instructions are not allowed (implementation-defined results); build without -mrelaxed-simd")
)

// instr is one decoded instruction: its opcode (prefix<<16 | sub-opcode for
// 0xFC/0xFD prefixes) and its byte range in the body.
type instr struct {
	op         uint32
	start, end int
}

const (
	opUnreachable = 0x00
	opBlock       = 0x02
	opLoop        = 0x03
	opIf          = 0x04
	opElse        = 0x05
	opEnd         = 0x0b
	opCall        = 0x10
	opCallInd     = 0x11
	opGlobalGet   = 0x23
	opGlobalSet   = 0x24
	opLocalGet    = 0x20
	opLocalSet    = 0x21
	opLocalTee    = 0x22
	opMemoryGrow  = 0x40
	opI64Const    = 0x42
	opI64Sub      = 0x7d
	opI64ShrU     = 0x88
	opI64LtS      = 0x53
	opI64ExtendU  = 0xad

	prefixFC = 0xfc
	prefixFD = 0xfd

	opMemoryInit = prefixFC<<16 | 8
	opMemoryCopy = prefixFC<<16 | 10
	opMemoryFill = prefixFC<<16 | 11
)

// decodeBody splits a function body (instructions only, locals excluded)
// into instructions, refusing anything outside WebAssembly 2.0 core +
// SIMD128: threads, relaxed SIMD, tail calls, exceptions, GC.
func decodeBody(b []byte) ([]instr, error) {
	var out []instr
	pos := 0
	depth := 1
	for pos < len(b) {
		start := pos
		op := uint32(b[pos])
		pos++
		var err error
		switch {
		case op == 0x00 || op == 0x01 || op == opElse || op == 0x0f || op == 0x1a || op == 0x1b ||
			op == 0xd1 || (op >= 0x45 && op <= 0xc4):
			// no immediates
		case op == opBlock || op == opLoop || op == opIf:
			pos, err = skipBlockType(b, pos)
			depth++
		case op == opEnd:
			depth--
		case op == 0x0c || op == 0x0d || op == opCall || (op >= 0x20 && op <= 0x26) || op == 0xd2:
			_, pos, err = readU32(b, pos)
		case op == 0x0e: // br_table
			var n uint32
			n, pos, err = readU32(b, pos)
			for i := uint32(0); err == nil && i <= n; i++ {
				_, pos, err = readU32(b, pos)
			}
		case op == opCallInd:
			if _, pos, err = readU32(b, pos); err == nil {
				_, pos, err = readU32(b, pos)
			}
		case op == 0x1c: // select t*
			var n uint32
			n, pos, err = readU32(b, pos)
			if err == nil {
				if uint64(pos)+uint64(n) > uint64(len(b)) {
					err = errors.New("truncated select types")
				}
				pos += int(n)
			}
		case op >= 0x28 && op <= 0x3e: // loads and stores: memarg
			pos, err = skipMemarg(b, pos)
		case op == 0x3f || op == opMemoryGrow:
			pos, err = skipBytes(b, pos, 1)
		case op == 0x41:
			pos, err = skipLEB(b, pos, 5)
		case op == opI64Const:
			pos, err = skipLEB(b, pos, 10)
		case op == 0x43:
			pos, err = skipBytes(b, pos, 4)
		case op == 0x44:
			pos, err = skipBytes(b, pos, 8)
		case op == 0xd0: // ref.null t
			pos, err = skipBytes(b, pos, 1)
		case op == prefixFC:
			var sub uint32
			sub, pos, err = readU32(b, pos)
			if err != nil {
				break
			}
			op = prefixFC<<16 | sub
			switch {
			case sub <= 7: // saturating truncations
			case sub == 8: // memory.init data 0x00
				if _, pos, err = readU32(b, pos); err == nil {
					pos, err = skipBytes(b, pos, 1)
				}
			case sub == 9 || sub == 13 || (sub >= 15 && sub <= 17):
				_, pos, err = readU32(b, pos)
			case sub == 10:
				pos, err = skipBytes(b, pos, 2)
			case sub == 11:
				pos, err = skipBytes(b, pos, 1)
			case sub == 12 || sub == 14:
				if _, pos, err = readU32(b, pos); err == nil {
					_, pos, err = readU32(b, pos)
				}
			default:
				err = fmt.Errorf("unknown 0xFC instruction %d", sub)
			}
		case op == prefixFD:
			var sub uint32
			sub, pos, err = readU32(b, pos)
			if err != nil {
				break
			}
			op = prefixFD<<16 | sub
			switch {
			case sub <= 11 || sub == 92 || sub == 93:
				pos, err = skipMemarg(b, pos)
			case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
				pos, err = skipBytes(b, pos, 16)
			case sub >= 21 && sub <= 34: // extract/replace lane
				pos, err = skipBytes(b, pos, 1)
			case sub >= 84 && sub <= 91: // load/store lane
				if pos, err = skipMemarg(b, pos); err == nil {
					pos, err = skipBytes(b, pos, 1)
				}
			case sub <= 255:
				// remaining SIMD128 instructions take no immediates
			default:
				err = fmt.Errorf("instruction 0xFD %#x: %w", sub, ErrRelaxedSIMD)
			}
		case op == 0xfe:
			err = ErrThreads
		case op == 0x12 || op == 0x13:
			err = errors.New("tail calls are not allowed (not in WebAssembly 2.0)")
		case op == 0x06 || op == 0x07 || op == 0x08 || op == 0x09 || op == 0x18 || op == 0x19:
			err = errors.New("exception-handling instructions are not allowed")
		default:
			err = fmt.Errorf("unknown or unsupported opcode %#x", op)
		}
		if err != nil {
			return nil, fmt.Errorf("at byte %d: %w", start, err)
		}
		if pos > len(b) {
			return nil, fmt.Errorf("at byte %d: truncated instruction", start)
		}
		out = append(out, instr{op: op, start: start, end: pos})
		if depth == 0 {
			if pos != len(b) {
				return nil, fmt.Errorf("at byte %d: code after the function's final end", pos)
			}
			return out, nil
		}
	}
	return nil, errors.New("function body does not end with end")
}

func skipBytes(b []byte, pos, n int) (int, error) {
	if pos+n > len(b) {
		return pos, errors.New("truncated immediate")
	}
	return pos + n, nil
}

func skipMemarg(b []byte, pos int) (int, error) {
	var err error
	if _, pos, err = readU32(b, pos); err != nil {
		return pos, err
	}
	_, pos, err = readU32(b, pos)
	return pos, err
}

// skipBlockType skips a block type: 0x40, a value type, or an s33 type index.
func skipBlockType(b []byte, pos int) (int, error) {
	if pos >= len(b) {
		return pos, errors.New("truncated block type")
	}
	c := b[pos]
	if c == 0x40 || c == 0x7f || c == 0x7e || c == 0x7d || c == 0x7c || c == 0x7b || c == 0x70 || c == 0x6f {
		return pos + 1, nil
	}
	return skipLEB(b, pos, 5)
}

// MaxLocals bounds the declared locals of one function.
const MaxLocals = 50000

// precheck walks the section headers before a full decode: the decoder
// allocates by declared vector lengths, so every count must be plausible
// for the bytes that follow, and the code section's local declarations must
// stay under MaxLocals.
func precheck(module []byte) error {
	if len(module) < 8 {
		return errors.New("not a wasm module: too short")
	}
	r := module[8:]
	for len(r) > 0 {
		id := r[0]
		size, p, err := readU32(r, 1)
		if err != nil || uint64(p)+uint64(size) > uint64(len(r)) {
			return errors.New("malformed section header")
		}
		body := r[p : p+int(size)]
		r = r[p+int(size):]
		if id == 0 || id == 8 || id == 12 { // custom, start, data count: no vector
			continue
		}
		n, q, err := readU32(body, 0)
		if err != nil {
			return fmt.Errorf("section %d: %w", id, err)
		}
		if uint64(n) > uint64(len(body)-q) {
			return fmt.Errorf("section %d declares %d entries in %d bytes", id, n, len(body)-q)
		}
		if id != 10 {
			continue
		}
		for i := uint32(0); i < n; i++ {
			sz, q2, err := readU32(body, q)
			if err != nil || uint64(q2)+uint64(sz) > uint64(len(body)) {
				return fmt.Errorf("code entry %d: bad size", i)
			}
			fn := body[q2 : q2+int(sz)]
			q = q2 + int(sz)
			groups, g, err := readU32(fn, 0)
			if err != nil || uint64(groups) > uint64(len(fn)) {
				return fmt.Errorf("code entry %d: bad locals", i)
			}
			var total uint64
			for j := uint32(0); j < groups; j++ {
				var c uint32
				if c, g, err = readU32(fn, g); err != nil {
					return fmt.Errorf("code entry %d: bad locals", i)
				}
				g++ // value type
				total += uint64(c)
				if total > MaxLocals {
					return fmt.Errorf("code entry %d declares more than %d locals", i, MaxLocals)
				}
			}
		}
	}
	return nil
}
