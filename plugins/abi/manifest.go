package abi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"

	"github.com/gowebpki/jcs"
	"github.com/tetratelabs/wabin/leb128"
)

// ABIVersion is the newest plugin ABI this host implements (ABI.md). Version
// 2 adds the decode kind (§4.1), version 3 the score kind (§4.2); older
// plugins load unchanged.
const ABIVersion = 3

// MinABIVersion is the oldest plugin ABI this host still loads.
const MinABIVersion = 1

// DecodeMinABI is the first ABI version with the decode kind.
const DecodeMinABI = 2

// ScoreMinABI is the first ABI version with the score kind.
const ScoreMinABI = 3

// MaxDecodeTensors bounds a decode manifest's tensor list.
const MaxDecodeTensors = 8

// ManifestSection is the name of the custom section holding the manifest.
const ManifestSection = "tenzro.manifest"

// MaxManifestBytes bounds the manifest custom section.
const MaxManifestBytes = 16 << 10

// Plugin kinds (wire.PluginInfo.Kind).
const (
	KindAggregate = "aggregate"
	KindVerify    = "verify"
	KindOuter     = "outer"
	// KindDecode turns a compressed submission payload into the fragment's
	// values (ABI v2, §4.1).
	KindDecode = "decode"
	// KindScore evaluates one submitted gradient: the loss on batches of
	// data before and after applying it to the start weights (ABI v3,
	// §4.2).
	KindScore = "score"
)

// Chunking modes (ABI.md §6).
const (
	ChunkNone       = "none"
	ChunkCoordinate = "coordinate"
	// ChunkPasses: the rule exports tenzro_chunk_plan and a chunked entry
	// point and runs as passes over coordinate chunks with a carried state
	// (distance-based rules, norm verifiers).
	ChunkPasses = "passes"
)

// Manifest is the JSON document in a plugin's "tenzro.manifest" custom
// section (ABI.md §2).
type Manifest struct {
	ABI     int         `json:"abi"`
	ID      string      `json:"id"`
	Version string      `json:"version"`
	Kind    string      `json:"kind"`
	Dtypes  []string    `json:"dtypes"`
	Params  []ParamSpec `json:"params"`
	// MinK states the rule's minimum quorum: K >= Mul*param + Add, unless the
	// parameter named by Unless is non-zero.
	MinK *MinK `json:"min_k,omitempty"`
	// Symmetric claims the output is bit-identical under any permutation of
	// the inputs (absent exact ties in scores).
	Symmetric bool `json:"symmetric,omitempty"`
	// RoundLevel marks verifiers that judge an input against its round.
	RoundLevel bool `json:"round_level,omitempty"`
	// Chunking is "coordinate" when the rule may be applied to consecutive
	// coordinate ranges independently, "passes" when it implements the
	// chunked passes protocol (ABI.md §6), "none" (default) otherwise.
	Chunking string `json:"chunking,omitempty"`
	// Tensors (decode plugins only) lists the payload's tensors in the order
	// the host passes them to tenzro_decode.
	Tensors   []TensorSpec `json:"tensors,omitempty"`
	Reference string       `json:"reference,omitempty"`
}

// TensorSpec is one tensor of an encoded payload (decode plugins).
type TensorSpec struct {
	Name string `json:"name"`
	// Dtypes are the safetensors dtypes accepted for it (F32, BF16, F16, I8,
	// U8, I32).
	Dtypes []string `json:"dtypes"`
	// Optional tensors may be absent; the host then passes pointer 0.
	Optional bool `json:"optional,omitempty"`
}

// TensorDtypeCodes are the dtype codes of the decode table (ABI.md §3).
var TensorDtypeCodes = map[string]uint32{"F32": 0, "BF16": 1, "F16": 2, "I8": 3, "U8": 4, "I32": 5}

// ParamSpec is one parameter of a rule. All parameters reach the guest as
// f64 values in schema order.
type ParamSpec struct {
	Name string `json:"name"`
	// Type is "int" (an integer in [Min, Max]) or "number".
	Type    string   `json:"type"`
	Min     float64  `json:"min"`
	Max     float64  `json:"max"`
	Default *float64 `json:"default,omitempty"`
}

// MinK is a linear minimum on K in one parameter.
type MinK struct {
	Param  string `json:"param"`
	Mul    int    `json:"mul"`
	Add    int    `json:"add"`
	Unless string `json:"unless,omitempty"`
}

var (
	ruleIDRe  = regexp.MustCompile(`^[A-Z][A-Za-z0-9_]{0,63}$`)
	paramRe   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
	versionRe = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
)

// ParseManifest decodes and validates a manifest strictly.
func ParseManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifestBytes {
		return nil, fmt.Errorf("manifest: %d bytes, limit %d", len(b), MaxManifestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if dec.More() {
		return nil, errors.New("manifest: trailing data")
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	if m.ABI < MinABIVersion || m.ABI > ABIVersion {
		return fmt.Errorf("abi %d, this host implements ABI %d..%d", m.ABI, MinABIVersion, ABIVersion)
	}
	if !ruleIDRe.MatchString(m.ID) {
		return fmt.Errorf("id %q: want an identifier starting with a capital letter (max 64)", m.ID)
	}
	if !versionRe.MatchString(m.Version) {
		return fmt.Errorf("version %q: want MAJOR.MINOR.PATCH", m.Version)
	}
	switch m.Kind {
	case KindAggregate, KindVerify, KindOuter:
	case KindDecode:
		if m.ABI < DecodeMinABI {
			return fmt.Errorf("kind decode needs abi >= %d, manifest says %d", DecodeMinABI, m.ABI)
		}
	case KindScore:
		if m.ABI < ScoreMinABI {
			return fmt.Errorf("kind score needs abi >= %d, manifest says %d", ScoreMinABI, m.ABI)
		}
	default:
		return fmt.Errorf("kind %q: want aggregate, verify, outer, decode or score", m.Kind)
	}
	if err := m.validateTensors(); err != nil {
		return err
	}
	if len(m.Dtypes) == 0 {
		return errors.New("dtypes: empty")
	}
	for _, d := range m.Dtypes {
		if d != "F32" && d != "BF16" {
			return fmt.Errorf("dtype %q: want F32 or BF16", d)
		}
	}
	if len(m.Params) > 16 {
		return fmt.Errorf("%d params, limit 16", len(m.Params))
	}
	seen := map[string]bool{}
	for _, p := range m.Params {
		if !paramRe.MatchString(p.Name) {
			return fmt.Errorf("param name %q: want [a-z][a-z0-9_]*", p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("param %q declared twice", p.Name)
		}
		seen[p.Name] = true
		if p.Type != "int" && p.Type != "number" {
			return fmt.Errorf("param %q: type %q, want int or number", p.Name, p.Type)
		}
		if math.IsNaN(p.Min) || math.IsNaN(p.Max) || p.Min > p.Max {
			return fmt.Errorf("param %q: min %v > max %v", p.Name, p.Min, p.Max)
		}
		if p.Default != nil {
			if err := p.Check(*p.Default); err != nil {
				return fmt.Errorf("default: %w", err)
			}
		}
	}
	if mk := m.MinK; mk != nil {
		if !seen[mk.Param] || (mk.Unless != "" && !seen[mk.Unless]) {
			return fmt.Errorf("min_k names an undeclared param")
		}
		if mk.Mul < 0 || mk.Add < 0 || mk.Mul > 64 || mk.Add > 256 {
			return fmt.Errorf("min_k: mul and add out of range")
		}
	}
	switch m.Chunking {
	case "", ChunkNone, ChunkCoordinate:
	case ChunkPasses:
		if m.Kind == KindOuter {
			return errors.New("chunking \"passes\" is for aggregate and verify plugins")
		}
	default:
		return fmt.Errorf("chunking %q: want none, coordinate or passes", m.Chunking)
	}
	if m.RoundLevel && m.Kind != KindVerify {
		return errors.New("round_level is only for verifiers")
	}
	if m.Kind == KindDecode && m.Chunking != "" && m.Chunking != ChunkNone {
		return errors.New("decode plugins do not chunk (chunking must be none)")
	}
	if m.Kind == KindScore && m.Chunking != "" && m.Chunking != ChunkNone {
		return errors.New("score plugins do not chunk (chunking must be none)")
	}
	return nil
}

func (m *Manifest) validateTensors() error {
	if m.Kind != KindDecode {
		if len(m.Tensors) != 0 {
			return errors.New("tensors: only decode plugins list tensors")
		}
		return nil
	}
	if len(m.Tensors) == 0 || len(m.Tensors) > MaxDecodeTensors {
		return fmt.Errorf("tensors: %d entries, want 1..%d", len(m.Tensors), MaxDecodeTensors)
	}
	seen := map[string]bool{}
	for _, t := range m.Tensors {
		if !paramRe.MatchString(t.Name) {
			return fmt.Errorf("tensor name %q: want [a-z][a-z0-9_]*", t.Name)
		}
		if seen[t.Name] {
			return fmt.Errorf("tensor %q listed twice", t.Name)
		}
		seen[t.Name] = true
		if len(t.Dtypes) == 0 {
			return fmt.Errorf("tensor %q: dtypes empty", t.Name)
		}
		for _, d := range t.Dtypes {
			if _, ok := TensorDtypeCodes[d]; !ok {
				return fmt.Errorf("tensor %q: dtype %q (want F32, BF16, F16, I8, U8 or I32)", t.Name, d)
			}
		}
	}
	return nil
}

func (p ParamSpec) Check(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("param %s: %v is not a finite number", p.Name, v)
	}
	if p.Type == "int" && v != math.Trunc(v) {
		return fmt.Errorf("param %s: %v is not an integer", p.Name, v)
	}
	if v < p.Min || v > p.Max {
		return fmt.Errorf("param %s: %v outside [%v, %v]", p.Name, v, p.Min, p.Max)
	}
	return nil
}

// SupportsDtype reports whether the manifest lists d.
func (m *Manifest) SupportsDtype(d string) bool {
	for _, x := range m.Dtypes {
		if x == d {
			return true
		}
	}
	return false
}

// AppendManifest returns module with a "tenzro.manifest" custom section
// holding the canonical (RFC 8785) form of manifest appended. Any existing
// manifest section is an error.
func AppendManifest(module, manifest []byte) ([]byte, error) {
	if _, ok, err := FindCustomSection(module, ManifestSection); err != nil {
		return nil, err
	} else if ok {
		return nil, errors.New("module already has a tenzro.manifest section")
	}
	if _, err := ParseManifest(manifest); err != nil {
		return nil, err
	}
	canon, err := jcs.Transform(manifest)
	if err != nil {
		return nil, fmt.Errorf("manifest: canonicalize: %w", err)
	}
	name := []byte(ManifestSection)
	payload := append(leb128.EncodeUint32(uint32(len(name))), name...)
	payload = append(payload, canon...)
	out := append([]byte{}, module...)
	out = append(out, 0)
	out = append(out, leb128.EncodeUint32(uint32(len(payload)))...)
	return append(out, payload...), nil
}

// FindCustomSection walks the module's sections and returns the payload of
// the first custom section with the given name.
func FindCustomSection(module []byte, name string) ([]byte, bool, error) {
	if len(module) < 8 || !bytes.Equal(module[:4], []byte("\x00asm")) {
		return nil, false, errors.New("not a wasm module (bad magic)")
	}
	if !bytes.Equal(module[4:8], []byte{1, 0, 0, 0}) {
		return nil, false, errors.New("unsupported wasm binary version")
	}
	r := module[8:]
	for len(r) > 0 {
		id := r[0]
		size, n, err := ReadU32(r, 1)
		if err != nil {
			return nil, false, fmt.Errorf("section size: %w", err)
		}
		n--
		body := r[1+n:]
		if uint64(size) > uint64(len(body)) {
			return nil, false, errors.New("section runs past the end of the module")
		}
		body = body[:size]
		r = r[1+int(n)+int(size):]
		if id != 0 {
			continue
		}
		nl, m, err := ReadU32(body, 0)
		if err != nil || uint64(m)+uint64(nl) > uint64(len(body)) {
			return nil, false, errors.New("malformed custom section name")
		}
		if string(body[m:m+int(nl)]) == name {
			return body[m+int(nl):], true, nil
		}
	}
	return nil, false, nil
}

// ReadU32 decodes an unsigned LEB128 u32 at b[pos:], returning the value and
// the position after it (shared with the plugin host's module scanner).
func ReadU32(b []byte, pos int) (uint32, int, error) {
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
