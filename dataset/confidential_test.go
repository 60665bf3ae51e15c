package dataset

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/ipfs/boxo/ipld/merkledag"
	uio "github.com/ipfs/boxo/ipld/unixfs/io"

	"github.com/tenzro/train/enclave"
)

// TestConfidentialDataset: a dataset added encrypted (enclave.EncryptDataset,
// what `tenzro dataset add --encrypt-key` does) has its CID over the
// ciphertext; a trainer's node fetches the ciphertext and only the key
// opens it, in memory.
func TestConfidentialDataset(t *testing.T) {
	ctx := context.Background()
	a := newTestNode(t, Options{}, nil)
	b := newTestNode(t, Options{}, nil)
	connect(t, b, a)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	plain := []byte("temp,load\n20.5,101\n21.0,99\n")
	ct, err := enclave.EncryptDataset(key, "task-c", plain)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "corpus.csv.enc")
	if err := os.WriteFile(p, ct, 0o600); err != nil {
		t.Fatal(err)
	}
	root, car := carOf(t, p, DefaultLayout)
	plainPath := filepath.Join(t.TempDir(), "corpus.csv")
	_ = os.WriteFile(plainPath, plain, 0o600)
	if pr, _ := RootCID(ctx, plainPath, DefaultLayout); pr == root {
		t.Fatal("the CID does not depend on the ciphertext")
	}
	if _, err := a.svc.Import(ctx, bytes.NewReader(car), ImportMeta{Encrypted: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Fetch(ctx, root, 0); err != nil {
		t.Fatal(err)
	}
	nd, err := merkledag.NewDAGService(b.svc.local).Get(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	r, err := uio.NewDagReader(ctx, nd, merkledag.NewDAGService(b.svc.local))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	if bytes.Contains(got, []byte("temp,load")) {
		t.Fatal("the stored dataset holds cleartext")
	}
	out, err := enclave.DecryptDataset(key, "task-c", got)
	if err != nil || !bytes.Equal(out, plain) {
		t.Fatalf("decrypt: %v", err)
	}
	if _, err := enclave.DecryptDataset(key, "another-task", got); err == nil {
		t.Fatal("ciphertext opened under another task id")
	}
}

// TestEncryptedVector: the Confidential layout on a fixed vector, which the
// trainer's decrypt_dataset also opens (trainer/tests/test_dataset_ipfs.py).
func TestEncryptedVector(t *testing.T) {
	b, err := os.ReadFile("testdata/encrypted_vector.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Key        string `json:"key"`
		TaskID     string `json:"task_id"`
		Ciphertext string `json:"ciphertext"`
		Plaintext  string `json:"plaintext"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	key, _ := hex.DecodeString(v.Key)
	ct, _ := hex.DecodeString(v.Ciphertext)
	pt, err := enclave.DecryptDataset(key, v.TaskID, ct)
	if err != nil || string(pt) != v.Plaintext {
		t.Fatalf("decrypt: %q %v", pt, err)
	}
}
