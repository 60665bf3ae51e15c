package main

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenzro/train/dataset"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Issue 22 (left from item 4): per-DID dataset quotas were bypassed with
// many DIDs, since DIDs are free. On a real node a dataset pin needs
// balance at --blob-price per byte, the rule unreferenced blob uploads
// follow: a fresh DID's signed import is refused with 402 and the reason,
// and nothing is pinned; after the faucet funds it, the same import passes.
func TestDatasetImportNeedsABalance(t *testing.T) {
	ctx := context.Background()
	c, url, _ := startNode(t)
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k, err := did.Generate(did.KindHuman, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 200_000)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "corpus.bin")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	dc := &dataset.Client{Base: url, Key: k, ChainID: info.ChainID}
	_, err = dc.Add(ctx, path, dataset.AddOptions{Layout: dataset.DefaultLayout})
	want := []string{"402", k.DID.String() + " pins 0 bytes of datasets and its balance funds 0 (balance 0, node flag --blob-price per byte)"}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("fresh DID's import: %v\nwant %q", err, w)
		}
	}
	if l, err := dc.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("after the refusal the node pins %v (%v), want nothing", l, err)
	}
	// 1 TNZO funds 10^9 bytes at the default price (10^9 attoTNZO per byte).
	if _, err := c.Faucet(ctx, wire.FaucetParams{DID: k.DID.String(), Amount: "1000000000000000000"}); err != nil {
		t.Fatal(err)
	}
	rec, err := dc.Add(ctx, path, dataset.AddOptions{Layout: dataset.DefaultLayout})
	if err != nil {
		t.Fatalf("funded DID's import: %v", err)
	}
	if len(rec.Owners) != 1 || rec.Owners[0] != k.DID.String() {
		t.Fatalf("owners %v, want %s", rec.Owners, k.DID)
	}
}
