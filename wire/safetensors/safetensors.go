package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Tensor is one named tensor. Data holds prod(Shape)·DtypeSize(Dtype)
// little-endian bytes.
type Tensor struct {
	Name  string
	Dtype string
	Shape []int64
	Data  []byte
}

// Limits bound what Parse accepts. A zero field means the DefaultLimits
// value.
type Limits struct {
	MaxHeader  int   // bytes of JSON header
	MaxTensors int   // entries, not counting __metadata__
	MaxTotal   int64 // bytes of tensor data
}

// DefaultLimits: a 1 MiB header, 65536 tensors, 16 GiB of data.
var DefaultLimits = Limits{MaxHeader: 1 << 20, MaxTensors: 65536, MaxTotal: 16 << 30}

// MaxNameLen is the longest tensor name (bytes) accepted or written.
const MaxNameLen = 512

// MetadataKey is the reserved header key of the metadata map.
const MetadataKey = "__metadata__"

// maxRank bounds the number of dimensions of a tensor.
const maxRank = 64

var dtypeSizes = map[string]int64{
	"F64": 8, "F32": 4, "F16": 2, "BF16": 2,
	"I64": 8, "I32": 4, "I16": 2, "I8": 1,
	"U8": 1, "BOOL": 1,
}

// DtypeSize returns the byte size of one element of dtype, or 0 if the
// dtype is not one this package accepts.
func DtypeSize(dtype string) int { return int(dtypeSizes[dtype]) }

// Errors. Every error of Parse and Encode wraps one of these.
var (
	ErrShort    = errors.New("safetensors: file too short")
	ErrLimit    = errors.New("safetensors: limit exceeded")
	ErrHeader   = errors.New("safetensors: bad header")
	ErrEntry    = errors.New("safetensors: bad tensor entry")
	ErrMetadata = errors.New("safetensors: bad __metadata__")
	ErrLayout   = errors.New("safetensors: bad data layout")
	ErrDtype    = errors.New("safetensors: unsupported dtype")
)

type entry struct {
	Tensor
	begin, end int64
	order      int
}

// Parse reads a safetensors file held in b.
func Parse(b []byte, lim Limits) (tensors []Tensor, metadata map[string]string, err error) {
	lim = lim.withDefaults()
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("%w: %d bytes, need at least 8 for the header length", ErrShort, len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > uint64(lim.MaxHeader) {
		return nil, nil, fmt.Errorf("%w: header length %d, limit %d", ErrLimit, n, lim.MaxHeader)
	}
	if n > uint64(len(b)-8) {
		return nil, nil, fmt.Errorf("%w: header length %d beyond the file's %d bytes after the length", ErrShort, n, len(b)-8)
	}
	header := b[8 : 8+n]
	data := b[8+n:]
	entries, metadata, err := parseHeader(header, lim)
	if err != nil {
		return nil, nil, err
	}
	if err := checkLayout(entries, int64(len(data)), lim); err != nil {
		return nil, nil, err
	}
	tensors = make([]Tensor, len(entries))
	for i, e := range entries {
		e.Data = data[e.begin:e.end:e.end]
		tensors[i] = e.Tensor
	}
	slices.SortFunc(tensors, func(a, b Tensor) int { return cmpString(a.Name, b.Name) })
	return tensors, metadata, nil
}

func (l Limits) withDefaults() Limits {
	if l.MaxHeader <= 0 {
		l.MaxHeader = DefaultLimits.MaxHeader
	}
	if l.MaxTensors <= 0 {
		l.MaxTensors = DefaultLimits.MaxTensors
	}
	if l.MaxTotal <= 0 {
		l.MaxTotal = DefaultLimits.MaxTotal
	}
	return l
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkLayout: data regions, in offset order, tile [0, dataLen) exactly.
func checkLayout(entries []*entry, dataLen int64, lim Limits) error {
	byOff := slices.Clone(entries)
	slices.SortFunc(byOff, func(a, b *entry) int {
		if a.begin != b.begin {
			return cmpInt(a.begin, b.begin)
		}
		if a.end != b.end {
			return cmpInt(a.end, b.end)
		}
		return cmpString(a.Name, b.Name)
	})
	var pos int64
	for _, e := range byOff {
		switch {
		case e.begin < pos:
			return fmt.Errorf("%w: tensor %q: data_offsets [%d,%d] overlap the previous tensor, which ends at %d", ErrLayout, e.Name, e.begin, e.end, pos)
		case e.begin > pos && pos == 0:
			return fmt.Errorf("%w: tensor %q: data starts at %d, not at 0", ErrLayout, e.Name, e.begin)
		case e.begin > pos:
			return fmt.Errorf("%w: tensor %q: hole of %d bytes before data_offsets [%d,%d]", ErrLayout, e.Name, e.begin-pos, e.begin, e.end)
		}
		pos = e.end
		if pos > lim.MaxTotal {
			return fmt.Errorf("%w: tensor %q: data reaches %d bytes, limit %d", ErrLimit, e.Name, pos, lim.MaxTotal)
		}
	}
	if pos > dataLen {
		return fmt.Errorf("%w: tensor data ends at %d but the file holds %d data bytes (truncated)", ErrShort, pos, dataLen)
	}
	if pos < dataLen {
		return fmt.Errorf("%w: %d trailing bytes after the last tensor (data ends at %d of %d)", ErrLayout, dataLen-pos, pos, dataLen)
	}
	return nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// parseHeader walks the header's JSON tokens.
func parseHeader(h []byte, lim Limits) ([]*entry, map[string]string, error) {
	if len(h) == 0 || h[0] != '{' {
		return nil, nil, fmt.Errorf("%w: header does not start with '{' (not a JSON object)", ErrHeader)
	}
	if !utf8.Valid(h) {
		return nil, nil, fmt.Errorf("%w: header is not valid UTF-8", ErrHeader)
	}
	dec := json.NewDecoder(bytes.NewReader(h))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{'
		return nil, nil, fmt.Errorf("%w: %v", ErrHeader, err)
	}
	var (
		entries  []*entry
		metadata map[string]string
		seen     = map[string]bool{}
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrHeader, err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, nil, fmt.Errorf("%w: key %v is not a string", ErrHeader, tok)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("%w: duplicate key %q", ErrHeader, name)
		}
		seen[name] = true
		if name == MetadataKey {
			if metadata, err = parseMetadata(dec); err != nil {
				return nil, nil, err
			}
			continue
		}
		if err := checkName(name); err != nil {
			return nil, nil, err
		}
		if len(entries) >= lim.MaxTensors {
			return nil, nil, fmt.Errorf("%w: more than %d tensors", ErrLimit, lim.MaxTensors)
		}
		e, err := parseEntry(dec, name)
		if err != nil {
			return nil, nil, err
		}
		e.order = len(entries)
		entries = append(entries, e)
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, nil, fmt.Errorf("%w: %v", ErrHeader, err)
	}
	rest := h[dec.InputOffset():]
	for i, c := range rest {
		if c != ' ' {
			return nil, nil, fmt.Errorf("%w: byte %d after the JSON object is %q, only space padding is allowed", ErrHeader, int(dec.InputOffset())+i, c)
		}
	}
	return entries, metadata, nil
}

func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty tensor name", ErrEntry)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: tensor name %.40q… is %d bytes, limit %d", ErrEntry, name, len(name), MaxNameLen)
	}
	if name == MetadataKey {
		return fmt.Errorf("%w: tensor name %q is reserved", ErrEntry, name)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: tensor name %q is not valid UTF-8", ErrEntry, name)
	}
	return nil
}

func expectDelim(dec *json.Decoder, d json.Delim, what string, wrap error) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %s: %v", wrap, what, err)
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return fmt.Errorf("%w: %s: want %q, got %v", wrap, what, string(d), describe(tok))
	}
	return nil
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		return strconv.Quote(string(v))
	case string:
		return "string " + strconv.Quote(v)
	case json.Number:
		return "number " + string(v)
	case nil:
		return "null"
	default:
		return fmt.Sprintf("%v", v)
	}
}

func parseMetadata(dec *json.Decoder) (map[string]string, error) {
	if err := expectDelim(dec, '{', "__metadata__ must be an object", ErrMetadata); err != nil {
		return nil, err
	}
	md := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMetadata, err)
		}
		k, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("%w: key %v is not a string", ErrMetadata, tok)
		}
		if _, dup := md[k]; dup {
			return nil, fmt.Errorf("%w: duplicate key %q", ErrMetadata, k)
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", ErrMetadata, k, err)
		}
		v, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("%w: key %q: value is %s, want a string", ErrMetadata, k, describe(tok))
		}
		md[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMetadata, err)
	}
	return md, nil
}

func parseEntry(dec *json.Decoder, name string) (*entry, error) {
	if err := expectDelim(dec, '{', fmt.Sprintf("tensor %q", name), ErrEntry); err != nil {
		return nil, err
	}
	e := &entry{Tensor: Tensor{Name: name}}
	var haveDtype, haveShape, haveOffsets bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrEntry, name, err)
		}
		field, _ := tok.(string)
		switch field {
		case "dtype":
			if haveDtype {
				return nil, fmt.Errorf("%w: tensor %q: duplicate field \"dtype\"", ErrEntry, name)
			}
			haveDtype = true
			tok, err := dec.Token()
			if err != nil {
				return nil, fmt.Errorf("%w: tensor %q: dtype: %v", ErrEntry, name, err)
			}
			s, ok := tok.(string)
			if !ok {
				return nil, fmt.Errorf("%w: tensor %q: dtype is %s, want a string", ErrEntry, name, describe(tok))
			}
			if dtypeSizes[s] == 0 {
				return nil, fmt.Errorf("%w: tensor %q: dtype %q (accepted: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)", ErrDtype, name, s)
			}
			e.Dtype = s
		case "shape":
			if haveShape {
				return nil, fmt.Errorf("%w: tensor %q: duplicate field \"shape\"", ErrEntry, name)
			}
			haveShape = true
			if e.Shape, err = parseInts(dec, name, "shape", maxRank); err != nil {
				return nil, err
			}
		case "data_offsets":
			if haveOffsets {
				return nil, fmt.Errorf("%w: tensor %q: duplicate field \"data_offsets\"", ErrEntry, name)
			}
			haveOffsets = true
			offs, err := parseInts(dec, name, "data_offsets", 2)
			if err != nil {
				return nil, err
			}
			if len(offs) != 2 {
				return nil, fmt.Errorf("%w: tensor %q: data_offsets has %d values, want 2", ErrEntry, name, len(offs))
			}
			e.begin, e.end = offs[0], offs[1]
		default:
			return nil, fmt.Errorf("%w: tensor %q: unknown field %s", ErrEntry, name, describe(tok))
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: tensor %q: %v", ErrEntry, name, err)
	}
	switch {
	case !haveDtype:
		return nil, fmt.Errorf("%w: tensor %q: missing field \"dtype\"", ErrEntry, name)
	case !haveShape:
		return nil, fmt.Errorf("%w: tensor %q: missing field \"shape\"", ErrEntry, name)
	case !haveOffsets:
		return nil, fmt.Errorf("%w: tensor %q: missing field \"data_offsets\"", ErrEntry, name)
	}
	if e.begin > e.end {
		return nil, fmt.Errorf("%w: tensor %q: data_offsets [%d,%d] end before they begin", ErrLayout, name, e.begin, e.end)
	}
	size, err := byteSize(e.Dtype, e.Shape)
	if err != nil {
		return nil, fmt.Errorf("%w: tensor %q: %v", ErrEntry, name, err)
	}
	if size != e.end-e.begin {
		return nil, fmt.Errorf("%w: tensor %q: %s %v needs %d bytes, data_offsets [%d,%d] span %d", ErrLayout, name, e.Dtype, e.Shape, size, e.begin, e.end, e.end-e.begin)
	}
	return e, nil
}

// parseInts reads a JSON array of at most max non-negative integers that
// fit an int64.
func parseInts(dec *json.Decoder, name, field string, max int) ([]int64, error) {
	if err := expectDelim(dec, '[', fmt.Sprintf("tensor %q: %s", name, field), ErrEntry); err != nil {
		return nil, err
	}
	out := []int64{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %s: %v", ErrEntry, name, field, err)
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fmt.Errorf("%w: tensor %q: %s[%d] is %s, want an integer", ErrEntry, name, field, len(out), describe(tok))
		}
		if len(out) == max {
			return nil, fmt.Errorf("%w: tensor %q: %s has more than %d values", ErrEntry, name, field, max)
		}
		s := string(num)
		if s == "" || s[0] == '-' {
			return nil, fmt.Errorf("%w: tensor %q: %s[%d] = %s is negative", ErrEntry, name, field, len(out), s)
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %s[%d] = %s is not an integer in [0, 2^63)", ErrEntry, name, field, len(out), s)
		}
		out = append(out, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: tensor %q: %s: %v", ErrEntry, name, field, err)
	}
	return out, nil
}

// byteSize is prod(shape)·sizeof(dtype), refusing overflow of int64.
func byteSize(dtype string, shape []int64) (int64, error) {
	sz := dtypeSizes[dtype]
	if sz == 0 {
		return 0, fmt.Errorf("dtype %q (accepted: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL): %w", dtype, ErrDtype)
	}
	if len(shape) > maxRank {
		return 0, fmt.Errorf("%d dimensions, limit %d", len(shape), maxRank)
	}
	n := uint64(sz)
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape[%d] = %d is negative", i, d)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v overflows: more than 2^63 bytes", shape)
		}
		n = lo
	}
	return int64(n), nil
}

// Encode writes tensors and metadata (nil or empty: no __metadata__) in the
// canonical form. Tensors may come in any order; names must be unique.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	sorted, h, size, err := encodeHeader(tensors, metadata)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(h)+int(size))
	out = append(out, h...)
	for _, t := range sorted {
		out = append(out, t.Data...)
	}
	return out, nil
}

// encodeHeader returns the tensors sorted as Encode writes their data, the
// header (with its length prefix) and the size of the data.
func encodeHeader(tensors []Tensor, metadata map[string]string) ([]Tensor, []byte, int64, error) {
	return encodeHeaderOf(tensors, metadata, true)
}

// encodeHeaderOf is encodeHeader; withData false skips the check that each
// tensor's Data has its byte size (the data is written from elsewhere).
func encodeHeaderOf(tensors []Tensor, metadata map[string]string, withData bool) ([]Tensor, []byte, int64, error) {
	sorted := slices.Clone(tensors)
	slices.SortFunc(sorted, func(a, b Tensor) int { return cmpString(a.Name, b.Name) })
	var h bytes.Buffer
	h.WriteByte('{')
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(metadata[k]) {
				return nil, nil, 0, fmt.Errorf("%w: key %q: not valid UTF-8", ErrMetadata, k)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		writeString(&h, MetadataKey)
		h.WriteString(":{")
		for i, k := range keys {
			if i > 0 {
				h.WriteByte(',')
			}
			writeString(&h, k)
			h.WriteByte(':')
			writeString(&h, metadata[k])
		}
		h.WriteByte('}')
	}
	var off int64
	for i, t := range sorted {
		if err := checkName(t.Name); err != nil {
			return nil, nil, 0, err
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return nil, nil, 0, fmt.Errorf("%w: duplicate tensor name %q", ErrEntry, t.Name)
		}
		size, err := byteSize(t.Dtype, t.Shape)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("%w: tensor %q: %w", ErrEntry, t.Name, err)
		}
		if withData && size != int64(len(t.Data)) {
			return nil, nil, 0, fmt.Errorf("%w: tensor %q: %s %v needs %d bytes, has %d", ErrLayout, t.Name, t.Dtype, t.Shape, size, len(t.Data))
		}
		if h.Len() > 1 {
			h.WriteByte(',')
		}
		writeString(&h, t.Name)
		h.WriteString(`:{"dtype":`)
		writeString(&h, t.Dtype)
		h.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				h.WriteByte(',')
			}
			h.WriteString(strconv.FormatInt(d, 10))
		}
		h.WriteString(`],"data_offsets":[`)
		h.WriteString(strconv.FormatInt(off, 10))
		h.WriteByte(',')
		if off+size < off {
			return nil, nil, 0, fmt.Errorf("%w: total data overflows", ErrLimit)
		}
		off += size
		h.WriteString(strconv.FormatInt(off, 10))
		h.WriteString("]}")
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	out := make([]byte, 0, 8+h.Len())
	out = binary.LittleEndian.AppendUint64(out, uint64(h.Len()))
	out = append(out, h.Bytes()...)
	return sorted, out, off, nil
}

// writeString writes s as a JSON string: '"' and '\' escaped with a
// backslash; U+0008, U+0009, U+000A, U+000C, U+000D as \b \t \n \f \r;
// other code points below U+0020 as \u00xx (lowercase hex); everything else
// as its UTF-8 bytes (RFC 8785 §3.2.2.2).
func writeString(w *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	w.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			w.WriteByte('\\')
			w.WriteByte(c)
		case c == '\b':
			w.WriteString(`\b`)
		case c == '\t':
			w.WriteString(`\t`)
		case c == '\n':
			w.WriteString(`\n`)
		case c == '\f':
			w.WriteString(`\f`)
		case c == '\r':
			w.WriteString(`\r`)
		case c < 0x20:
			w.WriteString(`\u00`)
			w.WriteByte(hexDigits[c>>4])
			w.WriteByte(hexDigits[c&0xf])
		default:
			w.WriteByte(c)
		}
	}
	w.WriteByte('"')
}
