package rpc

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/creachadair/jrpc2"

	"github.com/tenzro/train/wire"
)

// Large single requests (an outer gradient is ~46 MB of JSON) skip the
// copies the jhttp bridge would make: jrpc2.ParseRequests copies the params
// twice, and the bridge's in-memory client re-encodes them for its server,
// which parses them twice more. Instead the envelope is parsed here, the
// params stay an alias of the request body in a per-request stash, and the
// bridge carries a small reference object that the method handler resolves
// (see RATIONALE.md, "rpc: large params bypass the bridge's copies").

// paramRefKey is the single member of a reference object. A client that
// sends it itself only gets an "unknown field" error: references are random
// 128-bit ids that live for one HTTP request.
const paramRefKey = "\u0000tenzro_params_ref"

type paramStash struct{ m sync.Map }

func (s *paramStash) put(params []byte) (string, json.RawMessage) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	s.m.Store(id, params)
	ref, _ := json.Marshal(map[string]string{paramRefKey: id})
	return id, ref
}

// take resolves a reference object (nil, false when data is not one).
func (s *paramStash) take(data []byte) ([]byte, bool) {
	if !bytes.Contains(data, []byte(`\u0000tenzro_params_ref`)) || len(data) > 200 {
		return nil, false
	}
	var ref map[string]string
	if json.Unmarshal(data, &ref) != nil || len(ref) != 1 {
		return nil, false
	}
	id, ok := ref[paramRefKey]
	if !ok {
		return nil, false
	}
	v, ok := s.m.LoadAndDelete(id)
	if !ok {
		return nil, false
	}
	return v.([]byte), true
}

func (s *paramStash) drop(id string) { s.m.Delete(id) }

// alias is a json.Unmarshaler that keeps a sub-slice of the input.
type alias []byte

func (a *alias) UnmarshalJSON(b []byte) error { *a = b; return nil }

// skip is a json.Unmarshaler that keeps nothing (used to list keys).
type skip struct{}

func (*skip) UnmarshalJSON([]byte) error { return nil }

// parseLarge parses a single request object without copying its params.
// ok is false when the body is not a single object (the caller falls back
// to jrpc2.ParseRequests).
func parseLarge(body []byte, stash *paramStash) (req *jrpc2.ParsedRequest, refID string, ok bool) {
	t := bytes.TrimLeft(body, " \t\r\n")
	if len(t) == 0 || t[0] != '{' {
		return nil, "", false
	}
	var env struct {
		V      string          `json:"jsonrpc"`
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params alias           `json:"params"`
	}
	if json.Unmarshal(body, &env) != nil {
		return nil, "", false
	}
	var keys map[string]*skip
	if json.Unmarshal(body, &keys) != nil {
		return nil, "", false
	}
	out := &jrpc2.ParsedRequest{Method: env.Method}
	id := bytes.TrimSpace(env.ID)
	switch {
	case len(id) == 0 || string(id) == "null":
	case id[0] == '"' || id[0] == '-' || (id[0] >= '0' && id[0] <= '9'):
		out.ID = string(id)
	default:
		out.Error = &jrpc2.Error{Code: jrpc2.InvalidRequest, Message: "invalid request ID"}
	}
	for k := range keys {
		if k != "jsonrpc" && k != "id" && k != "method" && k != "params" {
			out.Error = &jrpc2.Error{Code: jrpc2.InvalidRequest, Message: fmt.Sprintf("extra fields in request: %q", k)}
		}
	}
	p := bytes.TrimSpace(env.Params)
	switch {
	case env.V != "2.0":
		out.Error = &jrpc2.Error{Code: jrpc2.InvalidRequest, Message: "invalid version marker"}
	case env.Method == "":
		out.Error = &jrpc2.Error{Code: jrpc2.InvalidRequest, Message: "empty method name"}
	case len(p) > 0 && string(p) != "null" && p[0] != '{' && p[0] != '[':
		out.Error = &jrpc2.Error{Code: jrpc2.InvalidRequest, Message: "parameters must be array or object"}
	}
	if out.Error == nil && len(p) > 0 && string(p) != "null" {
		refID, out.Params = stash.put(p)
	}
	return out, refID, true
}

// knownFields lists the JSON member names of a params struct (embedded
// structs flattened), cached per type.
var knownFieldsCache sync.Map

func knownFields(t reflect.Type) map[string]bool {
	if v, ok := knownFieldsCache.Load(t); ok {
		return v.(map[string]bool)
	}
	m := map[string]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			if !f.IsExported() || tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if name == "" {
				name = f.Name
			}
			m[name] = true
		}
	}
	walk(t)
	knownFieldsCache.Store(t, m)
	return m
}

// decodeStrict decodes a JSON object into target (a pointer to a struct)
// without copying data: member names must match the struct's JSON names
// exactly, unknown members are refused.
func decodeStrict(data []byte, target any) error {
	rt := reflect.TypeOf(target)
	if rt.Kind() != reflect.Pointer || rt.Elem().Kind() != reflect.Struct {
		return json.Unmarshal(data, target)
	}
	var keys map[string]*skip
	if err := json.Unmarshal(data, &keys); err != nil {
		return err
	}
	known := knownFields(rt.Elem())
	for k := range keys {
		if !known[k] {
			return fmt.Errorf("unknown field %q", k)
		}
	}
	if err := json.Unmarshal(data, target); err != nil {
		return err
	}
	// encoding/json keeps the last of two members with one name; a second
	// reader (or a signature over the first) could see another request.
	return wire.CheckStrictJSON(data, wire.StrictJSONOptions{})
}

var errNotObject = errors.New("params must be a JSON object with named fields (by-position params are not supported)")
