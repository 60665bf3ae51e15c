package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseSyncStrategy(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{`"blocking"`, SyncBlocking, ""},
		{`"eager"`, SyncEager, ""},
		{` "eager" `, SyncEager, ""},
		{`"\u0065ager"`, SyncEager, ""},
		{`"streaming"`, SyncStreaming, ""},
		{`"Streaming"`, "", `unknown strategy "Streaming"`},
		{`"Eager"`, "", `unknown strategy "Eager"`},
		{`""`, "", `unknown strategy ""`},
		{`null`, "", "want the string"},
		{`1`, "", "want the string"},
		{`{"strategy":"eager"}`, "", "want the string"},
		{`["eager"]`, "", "want the string"},
		{`"eager`, "", "want a JSON string"},
		{`"` + strings.Repeat("x", 70) + `"`, "", "bytes, limit 64"},
	} {
		got, err := ParseSyncStrategy([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// A spec without the field keeps its hash (the field is not rendered when
// absent) and means blocking; with it, ParseSpec and Validate take or refuse
// it with the field's name in the error.
func TestSpecSyncStrategy(t *testing.T) {
	base := map[string]any{}
	if err := json.Unmarshal(testSpecJSON(t), &base); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(base)
	s, canon, err := ParseSpec(raw)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(canon), "sync_strategy") {
		t.Fatalf("canonical spec renders an absent sync_strategy: %s", canon)
	}
	if v, err := s.SyncStrategyRef(); err != nil || v != SyncBlocking {
		t.Fatalf("absent: %q, %v", v, err)
	}
	for _, tc := range []struct {
		val       any
		want, err string
	}{
		{"eager", SyncEager, ""},
		{"blocking", SyncBlocking, ""},
		{"streaming", SyncStreaming, ""},
		{"lazy", "", "spec: sync_strategy: unknown strategy \"lazy\""},
		{nil, "", "spec: sync_strategy: want the string"},
		{7, "", "spec: sync_strategy: want the string"},
	} {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		m["sync_strategy"] = tc.val
		raw, _ := json.Marshal(m)
		s, canon, err := ParseSpec(raw)
		if err != nil {
			t.Fatalf("%v: ParseSpec: %v", tc.val, err)
		}
		err = s.Validate()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: Validate = %v, want %q", tc.val, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: Validate: %v", tc.val, err)
		}
		if v, _ := s.SyncStrategyRef(); v != tc.want {
			t.Errorf("%v: strategy %q, want %q", tc.val, v, tc.want)
		}
		if SpecHash(canon) == SpecHash(mustCanon(t, base)) {
			t.Errorf("%v: the field does not change the spec hash", tc.val)
		}
	}
	// Member names are exact-case.
	m := map[string]any{}
	for k, v := range base {
		m[k] = v
	}
	m["Sync_Strategy"] = "eager"
	raw, _ = json.Marshal(m)
	if _, _, err := ParseSpec(raw); err == nil || !strings.Contains(err.Error(), "Sync_Strategy") {
		t.Errorf("Sync_Strategy: %v", err)
	}
}

func mustCanon(t *testing.T, m map[string]any) []byte {
	t.Helper()
	raw, _ := json.Marshal(m)
	_, canon, err := ParseSpec(raw)
	if err != nil {
		t.Fatal(err)
	}
	return canon
}

func FuzzParseSyncStrategy(f *testing.F) {
	for _, s := range []string{`"blocking"`, `"eager"`, `"streaming"`, `null`, `""`, `"e\u0061ger"`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := ParseSyncStrategy(raw)
		if err != nil {
			if v != "" {
				t.Fatalf("error %v with value %q", err, v)
			}
			return
		}
		if v != SyncBlocking && v != SyncEager && v != SyncStreaming {
			t.Fatalf("accepted %q from %q", v, raw)
		}
		if len(raw) > MaxSyncStrategyBytes {
			t.Fatalf("accepted %d bytes", len(raw))
		}
	})
}

func testSpecJSON(t *testing.T) []byte {
	t.Helper()
	return []byte(`{"task_id":"t","sponsor_did":"did:tenzro:human:z6MkvDqGT54cXesYGvABpF1UapVNwjCqRcafi4Px6Thv5T3Z","sponsor_address":"0x11","architecture":{"family":"timesfm","param_count":1,"modality":"Timeseries","fragment_count":1,"dtype":"f32"},"tier":"Open","aggregation":"Mean","trainer_count":1,"quorum":1,"inner_steps":1,"max_rounds":1,"grace_window_ms":0,"reward_pool":"1","dataset_ref":"x","dataset_hash":"0x00","min_throughput":null,"created_at":1}`)
}
