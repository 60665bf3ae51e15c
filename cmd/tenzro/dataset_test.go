package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p"

	"github.com/tenzro/train/dataset"
	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/store"
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

// Issue 22 item 4: the CLI signs its dataset requests with --key for the
// node's chain; the node pins for that DID, refuses another DID's remove
// and counts the per-DID quota.
func TestDatasetCLISignsItsRequests(t *testing.T) {
	ctx := context.Background()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	db, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	svc, err := dataset.New(ctx, h, db.Blocks(), dataset.Options{QuotaCount: 1, Logger: slog.New(slog.DiscardHandler),
		ChainID: func(context.Context) (string, error) { return "tenzro-cli-test", nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	routes, err := svc.Routes()
	if err != nil {
		t.Fatal(err)
	}
	fake := &cliFake{}
	srv, err := rpc.New(fake, rpc.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux() // as rpc.Server.Serve mounts them
	mux.Handle("/", srv)
	for p, h := range routes {
		mux.Handle(p, rpc.SameOrigin(h, nil))
	}
	ts := httptest.NewServer(mux)
	defer func() { ts.Close(); srv.Close() }()
	e := &env{t: t, url: ts.URL, dir: t.TempDir(), fake: fake}
	t.Setenv("HOME", t.TempDir())
	t.Setenv(envKey, "")
	a := e.keygen("a.key", "human")
	e.keygen("b.key", "human")
	csv := e.write("corpus.csv", "a,b\n1,2\n3,4\n")
	other := e.write("other.csv", "a\n5\n")

	code, _, errOut := e.run("dataset", "add", csv)
	if code != 2 || !strings.Contains(errOut, "no key") {
		t.Fatalf("add without a key: %d %q", code, errOut)
	}
	code, out, errOut := e.run("dataset", "add", csv, "--key", e.path("a.key"), "--format", "json")
	var rec dataset.Record
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || len(rec.Owners) != 1 || rec.Owners[0] != a {
		t.Fatalf("add: %d %q %q", code, out, errOut)
	}
	code, _, errOut = e.run("dataset", "rm", rec.CID, "--key", e.path("b.key"))
	if code != 1 || !strings.Contains(errOut, "403") || !strings.Contains(errOut, "only a DID that pinned it removes its pin") {
		t.Fatalf("rm by another DID: %d %q", code, errOut)
	}
	code, _, errOut = e.run("dataset", "add", other, "--key", e.path("a.key"))
	if code != 1 || !strings.Contains(errOut, "per-DID limit is 1 datasets (node flag --dataset-did-count)") {
		t.Fatalf("add past the quota: %d %q", code, errOut)
	}
	code, out, errOut = e.run("dataset", "rm", rec.CID, "--key", e.path("a.key"))
	if code != 0 || !strings.Contains(out, "removed "+rec.CID) {
		t.Fatalf("rm by the owner: %d %q %q", code, out, errOut)
	}
	if svc.Has(ctx, mustCID(t, rec.CID)) {
		t.Fatal("still held after the owner's rm")
	}
}

func mustCID(t *testing.T, s string) cid.Cid {
	t.Helper()
	c, err := dataset.ParseCID(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
