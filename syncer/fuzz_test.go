package syncer_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/tenzro/train/audit"
)

// FuzzReceipt: version-2 receipt parsing and verification (compact and with
// a transcript) never panic, VerifyReceipt answers exactly 1 or 0, agreeing
// with CheckReceipt, and nothing the full check accepts fails the compact one.
func FuzzReceipt(f *testing.F) {
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		f.Fatal(err)
	}
	var v struct {
		Receipt    json.RawMessage `json:"receipt"`
		Transcript string          `json:"transcript_blob"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || len(v.Receipt) == 0 {
		f.Fatalf("no receipt vector: %v", err)
	}
	blob := []byte(v.Transcript)
	f.Add([]byte(v.Receipt), blob)
	f.Add([]byte(v.Receipt), []byte(`[]`))
	f.Add(bytes.Replace(v.Receipt, []byte(`"version":2`), []byte(`"version":1`), 1), blob)
	f.Add([]byte(`{"version":2,"version":2}`), []byte(`[{}]`))
	f.Add([]byte(`{"run_root":"00","run_root":"11"}`), []byte(`[null]`))
	f.Add([]byte(`{}`), []byte(``))
	f.Fuzz(func(t *testing.T, b, transcript []byte) {
		_, _ = audit.ParseReceipt(b)
		got := audit.VerifyReceipt(b, nil)
		err := audit.CheckReceipt(b, nil)
		if (got == 1) != (err == nil) || got > 1 {
			t.Fatalf("VerifyReceipt %d, CheckReceipt %v", got, err)
		}
		if audit.CheckReceiptFull(b, transcript) == nil && err != nil {
			t.Fatalf("full check accepted what the compact check refused: %v", err)
		}
	})
}

// FuzzTranscript: a transcript blob checked against the genuine vector
// receipt never panics, and one that is accepted is the genuine blob (its
// content hash is signed).
func FuzzTranscript(f *testing.F) {
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		f.Fatal(err)
	}
	var v struct {
		Receipt    json.RawMessage `json:"receipt"`
		Transcript string          `json:"transcript_blob"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		f.Fatal(err)
	}
	rc, err := audit.ParseReceipt(v.Receipt)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(v.Transcript))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"round":0},{"round":0}]`))
	f.Fuzz(func(t *testing.T, blob []byte) {
		if _, _, err := audit.CheckTranscript(rc, blob); err == nil && string(blob) != v.Transcript {
			t.Fatalf("accepted a transcript that is not the receipt's: %q", blob)
		}
	})
}
