package wire_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/tenzro/train/wire"
)

const seedSpec = `{"task_id":"train-2026-04-25-timesfm-200m","sponsor_did":"did:tenzro:human:z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH","sponsor_address":"0x11",
 "architecture":{"family":"timesfm","param_count":200000000,"modality":"Timeseries","fragment_count":12,
 "dtype":"bf16","metadata":{"context_len":2048,"horizon":128}},"tier":"Open","aggregation":"Mean",
 "trainer_count":8,"quorum":6,"inner_steps":24,"max_rounds":1024,"grace_window_ms":30000,
 "reward_pool":"1000000000000000000000","dataset_ref":"ipfs://Qm...","dataset_hash":"0x...",
 "min_throughput":null,"created_at":1761350400}`

// FuzzParseSpec: ParseSpec never panics, and a spec it accepts round-trips:
// its stored canonical form parses again to the same spec and the same
// canonical bytes (issue 8, finding 4: 9223372036854775807 did not).
func FuzzParseSpec(f *testing.F) {
	f.Add([]byte(seedSpec))
	f.Add([]byte(`{"task_id":"a","task_id":"b"}`))
	f.Add([]byte(`{"created_at":9223372036854775807}`))
	f.Add([]byte(`{"architecture":{"metadata":{"x":[1e308,-0,1.5e-7]}}}`))
	f.Add([]byte(`{"shard_holders":2,"shard_holders":1e0}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, canon, err := wire.ParseSpec(raw)
		if err != nil {
			return
		}
		s2, canon2, err := wire.ParseSpec(canon)
		if err != nil {
			t.Fatalf("canonical form of an accepted spec is refused: %v\n%s", err, canon)
		}
		if !bytes.Equal(canon, canon2) {
			t.Fatalf("canonical form is not stable:\n%s\n%s", canon, canon2)
		}
		a, _ := json.Marshal(s)
		b, _ := json.Marshal(s2)
		a, _ = jcs.Transform(a) // raw members (metadata) are kept as posted
		b, _ = jcs.Transform(b)
		if !bytes.Equal(a, b) {
			t.Fatalf("spec changed through its canonical form:\n%s\n%s", a, b)
		}
		_ = s.Validate()
	})
}

// FuzzCheckStrictJSON: the duplicate-member scanner never panics and agrees
// with encoding/json on what a duplicate is (a refused object has two
// members that decode to one name).
func FuzzCheckStrictJSON(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":[{"c":"\u0061","c":2}]}`))
	f.Add([]byte(`[1,{"x":{"y":{}}},"\"",-1e3]`))
	f.Add([]byte(`{"a\u0000":1,"a":2}`))
	f.Add([]byte(`{"a\\\"":1,"a\\\u0022":2}`))
	f.Add([]byte(`[1}`))
	f.Add([]byte(`{"a":1 "b":2}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		// Any input: it must terminate without panicking (the RPC server
		// scans bodies before parsing them).
		_ = wire.CheckStrictJSON(raw, wire.StrictJSONOptions{TopLevelOnly: true})
		if !json.Valid(raw) {
			return
		}
		err := wire.CheckStrictJSON(raw, wire.StrictJSONOptions{})
		if got, want := err != nil, hasDuplicate(t, raw); got != want {
			t.Fatalf("CheckStrictJSON says %v, the token-level reference says duplicate=%v for %q", err, want, raw)
		}
	})
}

// hasDuplicate is the reference: encoding/json's tokenizer, one name set per
// open object.
func hasDuplicate(t *testing.T, raw []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	type frame struct {
		obj   bool
		names map[string]bool
		key   bool // next string token is a member name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && top.obj && top.key {
			if top.names[s] {
				return true
			}
			top.names[s] = true
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, names: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].obj {
			stack[len(stack)-1].key = true // a value ended: a name comes next
		}
	}
}

func TestCheckStrictJSONDeepNesting(t *testing.T) {
	deep := bytes.Repeat([]byte("["), 5<<20)
	if err := wire.CheckStrictJSON(deep, wire.StrictJSONOptions{}); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("5M open brackets: %v", err)
	}
}
