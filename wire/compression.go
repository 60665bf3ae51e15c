package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"

	"github.com/gowebpki/jcs"
)

// MaxCompressionBytes bounds the spec's compression object.
const MaxCompressionBytes = 1024

// CodecNone is the compression codec meaning "uncompressed": payloads carry
// the fragment's own tensors, exactly as without the field.
const CodecNone = "none"

// Compression is the parsed `compression` field of a task spec: a codec and
// its numeric parameters (docs/protocol/compression.md).
type Compression struct {
	// Codec is a built-in codec name ("int8-block", "int4-block", "topk",
	// "sign1"), a codec plugin id ("Int4Block") or a plugin hash
	// ("sha256:<hex>").
	Codec string
	// Params is the canonical (RFC 8785) JSON object of the other keys; "{}"
	// when there are none.
	Params json.RawMessage
}

var (
	codecRe      = regexp.MustCompile(`^([a-z][a-z0-9-]{0,31}|[A-Z][A-Za-z0-9_]{0,63}|sha256:[0-9a-f]{64})$`)
	codecParamRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
)

// CompressionRef parses the spec's compression field strictly. It returns
// nil when the field is absent, null, or names the codec "none".
func (s *TaskSpec) CompressionRef() (*Compression, error) {
	raw := bytes.TrimSpace(s.Compression)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	c, err := ParseCompression(raw)
	if err != nil {
		return nil, fmt.Errorf("spec: compression: %w", err)
	}
	return c, nil
}

// ParseCompression parses {"codec": NAME, key: number, ...}: an object, a
// codec string, at most 16 numeric parameters, no duplicate keys.
func ParseCompression(raw []byte) (*Compression, error) {
	if len(raw) > MaxCompressionBytes {
		return nil, fmt.Errorf("%d bytes, limit %d", len(raw), MaxCompressionBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, errors.New(`want an object such as {"codec":"int4-block","block":64}`)
	}
	var c Compression
	params := map[string]json.Number{}
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := kt.(string)
		if seen[key] {
			return nil, fmt.Errorf("key %q given twice", key)
		}
		seen[key] = true
		vt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		if key == "codec" {
			v, ok := vt.(string)
			if !ok || !codecRe.MatchString(v) {
				return nil, fmt.Errorf("codec %v: want a codec name (int8-block, int4-block, topk, sign1, none) or sha256:<64 hex>", vt)
			}
			c.Codec = v
			continue
		}
		if !codecParamRe.MatchString(key) {
			return nil, fmt.Errorf("parameter %q: want a lower-case name", key)
		}
		v, ok := vt.(json.Number)
		if !ok {
			return nil, fmt.Errorf("parameter %s: want a number, got %v", key, vt)
		}
		if _, err := v.Float64(); err != nil {
			return nil, fmt.Errorf("parameter %s: %w", key, err)
		}
		params[key] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("trailing data")
	}
	if c.Codec == "" {
		return nil, errors.New(`"codec" is required`)
	}
	if len(params) > 16 {
		return nil, fmt.Errorf("%d parameters, limit 16", len(params))
	}
	if c.Codec == CodecNone {
		if len(params) > 0 {
			return nil, errors.New(`codec "none" takes no parameters`)
		}
		return nil, nil
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", k, params[k])
	}
	b.WriteByte('}')
	canon, err := jcs.Transform(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("canonicalize: %w", err)
	}
	c.Params = canon
	return &c, nil
}
