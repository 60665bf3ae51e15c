package plugins

import (
	"errors"
	"fmt"

	"github.com/tenzro/train/plugins/abi"
)

// readU32 decodes an unsigned LEB128 u32 (abi.ReadU32).
var readU32 = abi.ReadU32

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
			if err == nil && uint64(n) >= uint64(len(b)-pos) {
				err = fmt.Errorf("br_table declares %d targets in %d bytes", n, len(b)-pos)
			}
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

// Bounds on local declarations: per function, per module (wabin expands
// every declared local into a byte), and groups per function (its encoder
// is quadratic in them).
const (
	MaxLocals       = 50000
	MaxModuleLocals = 4 << 20
	MaxLocalGroups  = 1024
)

// precheck walks the whole module structure before wabin decodes it. wabin
// allocates by declared lengths (vectors, names, value types, data and
// element segments, name-section maps) before it reads what they count, so
// every count and length, at every nesting level, must be plausible for
// the bytes that follow it: each vector entry takes at least one byte, each
// byte string exactly its length. Every section and name subsection must
// also parse to exactly its declared size, function bodies may declare at
// most MaxLocals locals (MaxModuleLocals in all, in at most MaxLocalGroups
// groups per function), and only constructs the re-encoder can write back
// are accepted (active element segments on table 0 listing function
// indices). After precheck, decoding allocates at most a small multiple of
// the module's size.
func precheck(module []byte) error {
	if len(module) < 8 {
		return errors.New("not a wasm module: too short")
	}
	r := module[8:]
	var locals uint64
	for len(r) > 0 {
		id := r[0]
		size, p, err := readU32(r, 1)
		if err != nil || uint64(p)+uint64(size) > uint64(len(r)) {
			return errors.New("malformed section header")
		}
		body := r[p : p+int(size)]
		r = r[p+int(size):]
		s := &scan{b: body, locals: &locals}
		switch id {
		case 0:
			err = s.custom()
		case 1:
			err = s.vec("types", s.funcType)
		case 2:
			err = s.vec("imports", s.importEntry)
		case 3:
			err = s.vec("functions", func() error { _, err := s.u32("type index"); return err })
		case 4:
			err = s.vec("tables", s.table)
		case 5:
			err = s.vec("memories", s.limits)
		case 6:
			err = s.vec("globals", func() error {
				if err := s.globalType(); err != nil {
					return err
				}
				return s.constExpr()
			})
		case 7:
			err = s.vec("exports", func() error {
				if err := s.name("export name"); err != nil {
					return err
				}
				if _, err := s.byte1("export kind"); err != nil {
					return err
				}
				_, err := s.u32("export index")
				return err
			})
		case 8:
			_, err = s.u32("start function")
		case 9:
			err = s.vec("element segments", s.element)
		case 10:
			err = s.vec("function bodies", s.code)
		case 11:
			err = s.vec("data segments", s.data)
		case 12:
			_, err = s.u32("data count")
		default:
			err = fmt.Errorf("unknown section id %d", id)
		}
		if err == nil && s.pos != len(body) {
			err = fmt.Errorf("%d bytes left over", len(body)-s.pos)
		}
		if err != nil {
			return fmt.Errorf("section %d: %w", id, err)
		}
	}
	return nil
}

// scan reads one section's bytes with bounds on every declared length.
type scan struct {
	b      []byte
	pos    int
	locals *uint64 // locals declared so far in the module
}

func (s *scan) left() int { return len(s.b) - s.pos }

func (s *scan) u32(what string) (uint32, error) {
	v, p, err := readU32(s.b, s.pos)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	s.pos = p
	return v, nil
}

func (s *scan) byte1(what string) (byte, error) {
	if s.pos >= len(s.b) {
		return 0, fmt.Errorf("%s: truncated", what)
	}
	s.pos++
	return s.b[s.pos-1], nil
}

func (s *scan) skip(n uint64, what string) error {
	if n > uint64(s.left()) {
		return fmt.Errorf("%s: %d bytes declared, %d left", what, n, s.left())
	}
	s.pos += int(n)
	return nil
}

// count reads a vector length that must not exceed the bytes left (every
// entry takes at least one byte).
func (s *scan) count(what string) (uint32, error) {
	n, err := s.u32(what + " count")
	if err != nil {
		return 0, err
	}
	if uint64(n) > uint64(s.left()) {
		return 0, fmt.Errorf("%s: %d entries declared in %d bytes", what, n, s.left())
	}
	return n, nil
}

func (s *scan) vec(what string, entry func() error) error {
	n, err := s.count(what)
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		if err := entry(); err != nil {
			return fmt.Errorf("%s[%d]: %w", what, i, err)
		}
	}
	return nil
}

func (s *scan) name(what string) error {
	n, err := s.u32(what + " length")
	if err != nil {
		return err
	}
	return s.skip(uint64(n), what)
}

func (s *scan) valTypes(what string) error {
	n, err := s.count(what)
	if err != nil {
		return err
	}
	return s.skip(uint64(n), what)
}

func (s *scan) funcType() error {
	if b, err := s.byte1("type form"); err != nil {
		return err
	} else if b != 0x60 {
		return fmt.Errorf("type form %#x, want 0x60", b)
	}
	if err := s.valTypes("params"); err != nil {
		return err
	}
	return s.valTypes("results")
}

func (s *scan) limits() error {
	flag, err := s.byte1("limits")
	if err != nil {
		return err
	}
	if _, err := s.u32("limits min"); err != nil {
		return err
	}
	if flag&1 != 0 {
		_, err = s.u32("limits max")
	}
	return err
}

func (s *scan) table() error {
	if _, err := s.byte1("table type"); err != nil {
		return err
	}
	return s.limits()
}

func (s *scan) globalType() error {
	if _, err := s.byte1("global type"); err != nil {
		return err
	}
	_, err := s.byte1("global mutability")
	return err
}

func (s *scan) importEntry() error {
	if err := s.name("import module"); err != nil {
		return err
	}
	if err := s.name("import name"); err != nil {
		return err
	}
	kind, err := s.byte1("import kind")
	if err != nil {
		return err
	}
	switch kind {
	case 0:
		_, err = s.u32("import type index")
	case 1:
		err = s.table()
	case 2:
		err = s.limits()
	case 3:
		err = s.globalType()
	default:
		err = fmt.Errorf("import kind %#x", kind)
	}
	return err
}

// constExpr accepts what wabin decodes: one constant instruction, then end.
func (s *scan) constExpr() error {
	op, err := s.byte1("constant expression")
	if err != nil {
		return err
	}
	switch op {
	case 0x41:
		s.pos, err = skipLEB(s.b, s.pos, 5)
	case 0x42:
		s.pos, err = skipLEB(s.b, s.pos, 10)
	case 0x43:
		err = s.skip(4, "f32.const")
	case 0x44:
		err = s.skip(8, "f64.const")
	case 0x23, 0xd2:
		_, err = s.u32("index")
	case 0xd0:
		_, err = s.byte1("ref.null type")
	case 0xfd:
		var sub byte
		if sub, err = s.byte1("vector opcode"); err == nil {
			if sub != 12 {
				return fmt.Errorf("vector opcode %#x in a constant expression", sub)
			}
			err = s.skip(16, "v128.const")
		}
	default:
		return fmt.Errorf("opcode %#x in a constant expression", op)
	}
	if err != nil {
		return err
	}
	if end, err := s.byte1("constant expression end"); err != nil {
		return err
	} else if end != opEnd {
		return errors.New("constant expression longer than one instruction")
	}
	return nil
}

// element accepts the segment forms the re-encoder writes back: active, on
// table 0, listing function indices (prefix 0, or 2 with table 0 and
// element kind 0). Passive and declarative segments and expression lists
// are refused.
func (s *scan) element() error {
	prefix, err := s.u32("element prefix")
	if err != nil {
		return err
	}
	switch prefix {
	case 0:
	case 2:
		if t, err := s.u32("table index"); err != nil {
			return err
		} else if t != 0 {
			return fmt.Errorf("element segment on table %d: only table 0 is supported", t)
		}
	default:
		return fmt.Errorf("element segment form %d is not supported (only active function-index segments on table 0)", prefix)
	}
	if err := s.constExpr(); err != nil {
		return err
	}
	if prefix == 2 {
		if kind, err := s.byte1("element kind"); err != nil {
			return err
		} else if kind != 0 {
			return fmt.Errorf("element kind %#x", kind)
		}
	}
	return s.vec("function indices", func() error { _, err := s.u32("function index"); return err })
}

func (s *scan) data() error {
	prefix, err := s.u32("data prefix")
	if err != nil {
		return err
	}
	switch prefix {
	case 0:
		err = s.constExpr()
	case 1:
	case 2:
		if _, err = s.u32("memory index"); err == nil {
			err = s.constExpr()
		}
	default:
		err = fmt.Errorf("data segment prefix %d", prefix)
	}
	if err != nil {
		return err
	}
	n, err := s.u32("data size")
	if err != nil {
		return err
	}
	return s.skip(uint64(n), "data bytes")
}

// code checks one function body: its size, its local declarations (at most
// MaxLocals in all) and that it ends within its size.
func (s *scan) code() error {
	size, err := s.u32("body size")
	if err != nil {
		return err
	}
	if uint64(size) > uint64(s.left()) {
		return fmt.Errorf("body of %d bytes, %d left", size, s.left())
	}
	fn := &scan{b: s.b[s.pos : s.pos+int(size)]}
	s.pos += int(size)
	groups, err := fn.count("local groups")
	if err != nil {
		return err
	}
	if groups > MaxLocalGroups {
		return fmt.Errorf("%d local groups, limit %d", groups, MaxLocalGroups)
	}
	var total uint64
	for j := uint32(0); j < groups; j++ {
		c, err := fn.u32("local count")
		if err != nil {
			return err
		}
		if _, err := fn.byte1("local type"); err != nil {
			return err
		}
		if total += uint64(c); total > MaxLocals {
			return fmt.Errorf("more than %d locals", MaxLocals)
		}
	}
	if *s.locals += total; *s.locals > MaxModuleLocals {
		return fmt.Errorf("the module declares more than %d locals", MaxModuleLocals)
	}
	if fn.left() == 0 {
		return errors.New("empty body")
	}
	return nil
}

// custom checks a custom section's name and, for the "name" section (which
// wabin decodes), every subsection.
func (s *scan) custom() error {
	n, err := s.u32("custom section name length")
	if err != nil {
		return err
	}
	start := s.pos
	if err := s.skip(uint64(n), "custom section name"); err != nil {
		return err
	}
	if string(s.b[start:s.pos]) != "name" {
		s.pos = len(s.b)
		return nil
	}
	for s.left() > 0 {
		id, err := s.byte1("name subsection id")
		if err != nil {
			return err
		}
		size, err := s.u32("name subsection size")
		if err != nil {
			return err
		}
		if uint64(size) > uint64(s.left()) {
			return fmt.Errorf("name subsection %d: %d bytes declared, %d left", id, size, s.left())
		}
		sub := &scan{b: s.b[s.pos : s.pos+int(size)]}
		s.pos += int(size)
		switch id {
		case 0:
			err = sub.name("module name")
		case 1:
			err = sub.nameMap("function names")
		case 2:
			err = sub.vec("local names", func() error {
				if _, err := sub.u32("function index"); err != nil {
					return err
				}
				return sub.nameMap("locals")
			})
		default:
			sub.pos = len(sub.b)
		}
		if err == nil && sub.left() != 0 {
			err = fmt.Errorf("%d bytes left over", sub.left())
		}
		if err != nil {
			return fmt.Errorf("name subsection %d: %w", id, err)
		}
	}
	return nil
}

func (s *scan) nameMap(what string) error {
	return s.vec(what, func() error {
		if _, err := s.u32("index"); err != nil {
			return err
		}
		return s.name("name")
	})
}
