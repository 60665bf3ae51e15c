package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDatasetAddOnlyHash(t *testing.T) {
	p := filepath.Join(t.TempDir(), "corpus.csv")
	if err := os.WriteFile(p, []byte("a,b\n1,2\n3,4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
		code int
	}{
		{[]string{"dataset", "add", "--only-hash", p}, []string{
			"ipfs://bafkreifzjbiuqvdedgqpnkc6rvyizervk7av27z4pudy54p2p56a6v6vuu",
			"dataset_hash: b79c2336fc624230ec67aef041cc33745efc1940fd5a547e741ad709c5c409f7"}, 0},
		{[]string{"dataset", "add", "--only-hash", "--cid-version", "0", "--chunker", "size-262144", p}, []string{"ipfs://Qm", "cid_v1:       bafybei"}, 0},
		{[]string{"dataset", "add", "--only-hash", "--cid-version", "0", "--raw-leaves", p}, []string{"raw leaves need CIDv1"}, 2},
		{[]string{"dataset", "add", "--only-hash", "--chunker", "rabin", p}, []string{"want size-<bytes>"}, 2},
		{[]string{"dataset", "rm", "ipfs://notacid"}, []string{"malformed CID"}, 2},
		{[]string{"dataset", "get", "ipfs://Qm", "--out", "x"}, []string{"malformed CID"}, 2},
	} {
		var o, e bytes.Buffer
		code := execute(context.Background(), tc.args, &o, &e)
		out := o.String() + e.String()
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d: %s", tc.args, code, tc.code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
}
