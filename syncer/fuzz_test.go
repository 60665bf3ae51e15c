package syncer_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/tenzro/train/syncer"
)

// FuzzReceipt: receipt parsing and verification never panic, and
// VerifyReceipt answers exactly 1 or 0, agreeing with CheckReceipt.
func FuzzReceipt(f *testing.F) {
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		f.Fatal(err)
	}
	var v struct {
		Receipt json.RawMessage `json:"receipt"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || len(v.Receipt) == 0 {
		f.Fatalf("no receipt vector: %v", err)
	}
	f.Add([]byte(v.Receipt))
	f.Add([]byte(`{"run_root":"00","run_root":"11"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = syncer.ParseReceipt(b)
		got := syncer.VerifyReceipt(b, nil)
		err := syncer.CheckReceipt(b, nil)
		if (got == 1) != (err == nil) || got > 1 {
			t.Fatalf("VerifyReceipt %d, CheckReceipt %v", got, err)
		}
	})
}
