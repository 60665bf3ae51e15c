package enclave

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
)

// testdata/dataset_vector.json is shared with the Python trainer
// (trainer/tests/test_attestation.py): both sides decrypt it to the same
// bytes, and a changed byte fails on both.
func TestDatasetVector(t *testing.T) {
	raw, err := os.ReadFile("testdata/dataset_vector.json")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]string
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	key, _ := hex.DecodeString(v["key"])
	blob, _ := hex.DecodeString(v["blob"])
	want, _ := hex.DecodeString(v["plaintext"])
	got, err := DecryptDataset(key, v["task_id"], blob)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("decrypt: %v %q", err, got)
	}
	blob[len(blob)-1] ^= 1
	if _, err := DecryptDataset(key, v["task_id"], blob); err == nil {
		t.Fatal("changed tag accepted")
	}
}
