package wire

import (
	"strings"
	"testing"
)

func TestParseCompression(t *testing.T) {
	for _, tc := range []struct {
		in, codec, params, err string
	}{
		{`{"codec":"int4-block","block":64}`, "int4-block", `{"block":64}`, ""},
		{`{"block":64 , "codec":"int4-block"}`, "int4-block", `{"block":64}`, ""},
		{`{"codec":"topk","k":0.01,"values":2}`, "topk", `{"k":0.01,"values":2}`, ""},
		{`{"codec":"sha256:` + strings.Repeat("ab", 32) + `"}`, "sha256:" + strings.Repeat("ab", 32), `{}`, ""},
		{`{"codec":"Int4Block","block":1e2}`, "Int4Block", `{"block":100}`, ""},
		{`{"codec":"none"}`, "", "", ""},
		{`{"codec":"none","block":1}`, "", "", `codec "none" takes no parameters`},
		{`{"block":64}`, "", "", `"codec" is required`},
		{`{"codec":64}`, "", "", "codec 64: want a codec name"},
		{`{"codec":"int4 block"}`, "", "", "want a codec name"},
		{`{"codec":"int4-block","block":"64"}`, "", "", "parameter block: want a number"},
		{`{"codec":"int4-block","Block":64}`, "", "", `parameter "Block"`},
		{`{"codec":"int4-block","block":[64]}`, "", "", "parameter block: want a number"},
		{`{"codec":"int4-block","codec":"topk"}`, "", "", `key "codec" given twice`},
		{`["int4-block"]`, "", "", "want an object"},
		{`{"codec":"int4-block"} x`, "", "", ""},
		{`{"codec":"int4-block"`, "", "", "EOF"},
	} {
		c, err := ParseCompression([]byte(tc.in))
		if tc.err != "" || strings.HasSuffix(tc.in, " x") {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if tc.codec == "" {
			if c != nil {
				t.Errorf("%s: got %+v, want none", tc.in, c)
			}
			continue
		}
		if c.Codec != tc.codec || string(c.Params) != tc.params {
			t.Errorf("%s: got %s %s, want %s %s", tc.in, c.Codec, c.Params, tc.codec, tc.params)
		}
	}
}

func TestSpecCompressionValidated(t *testing.T) {
	s := TaskSpec{Compression: []byte(`{"codec":"int4-block","block":"x"}`)}
	if _, err := s.CompressionRef(); err == nil || !strings.Contains(err.Error(), "spec: compression:") {
		t.Fatalf("err = %v", err)
	}
	s.Compression = nil
	if c, err := s.CompressionRef(); c != nil || err != nil {
		t.Fatalf("absent field: %v %v", c, err)
	}
}

func FuzzParseCompression(f *testing.F) {
	f.Add([]byte(`{"codec":"int4-block","block":64}`))
	f.Add([]byte(`{"codec":"topk","k":0.01}`))
	f.Add([]byte(`{"codec":"none"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCompression(b)
		if err != nil || c == nil {
			return
		}
		// Canonical parameters parse back to themselves.
		again, err := ParseCompression([]byte(`{"codec":"` + c.Codec + `",` + strings.TrimPrefix(string(c.Params), "{")))
		if string(c.Params) == "{}" {
			again, err = ParseCompression([]byte(`{"codec":"` + c.Codec + `"}`))
		}
		if err != nil || again.Codec != c.Codec || string(again.Params) != string(c.Params) {
			t.Fatalf("%q -> %s %s does not round-trip: %v", b, c.Codec, c.Params, err)
		}
	})
}
