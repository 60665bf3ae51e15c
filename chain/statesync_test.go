package chain

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenzro/train/wire/did"
)

// waitFor polls cond at every commit of app (and every second) until it
// holds or ctx ends.
func waitFor(ctx context.Context, t *testing.T, app *App, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-app.Changed():
		case <-time.After(time.Second):
		}
	}
}

// TestStateSyncJoin: a validator takes snapshots every 10 heights; a new
// node whose home trusts a header verified against the genesis validators
// joins by CometBFT state sync (it never executes the early blocks: its
// block store starts after the snapshot), its restored app hash equals the
// validator's at that height, and it then follows new blocks. A balance
// read from the validator with a proof checks against a verified header.
func TestStateSyncJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two CometBFT nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Not t.TempDir: CometBFT's address book is written by a goroutine that
	// may still run as the nodes close, and TempDir's cleanup fails the test
	// on a directory that is not empty yet. Removal is best effort here.
	dir, err := os.MkdirTemp("", "tenzro-statesync-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	k := testKey(t, did.KindHuman, 1)
	nodes, err := WriteTestnet(TestnetOptions{Validators: 1, Dir: dir, ChainID: "statesync", TimeoutCommit: 100 * time.Millisecond,
		Allocs: []GenesisAccount{{DID: k.DID.String(), Balance: "12345"}}})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := LoadNodeConfig(nodes[0].Home)
	if err != nil {
		t.Fatal(err)
	}
	nc.SnapshotInterval, nc.SnapshotKeep = 10, 50 // 50 s of 100 ms blocks: still there after discovery
	if err := SaveNodeConfig(nodes[0].Home, nc); err != nil {
		t.Fatal(err)
	}
	v, err := Start(ctx, nodes[0].Home, NodeOptions{Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	waitFor(ctx, t, v.App, "a snapshot", func() bool { h, _ := v.App.LastCommit(); return h >= 22 && len(v.App.snap.heights()) > 0 })

	cl, err := NewClient("http://" + nodes[0].RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := LoadGenesis(filepath.Join(nodes[0].Home, "config", "genesis.json"))
	if err != nil {
		t.Fatal(err)
	}
	bal, _, err := cl.ProvenBalance(ctx, gen, k.DID.String())
	if err != nil || bal.String() != "12345" {
		t.Fatalf("proven balance: %v %v", bal, err)
	}
	th, hash, err := cl.TrustedHeader(ctx, gen, 2)
	if err != nil {
		t.Fatal(err)
	}

	home := filepath.Join(dir, "joiner")
	genRaw, err := os.ReadFile(filepath.Join(nodes[0].Home, "config", "genesis.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := JoinNode(JoinOptions{Home: home, Genesis: genRaw, Peers: []string{nodes[0].NodeID + "@" + nodes[0].P2PAddr}}); err != nil {
		t.Fatal(err)
	}
	jc, err := LoadNodeConfig(home)
	if err != nil {
		t.Fatal(err)
	}
	rpc := "http://" + nodes[0].RPCAddr
	jc.StateSync = &StateSyncConfig{RPCServers: []string{rpc, rpc}, TrustHeight: th, TrustHash: hash}
	if err := SaveNodeConfig(home, jc); err != nil {
		t.Fatal(err)
	}
	jlog := quiet
	if os.Getenv("TENZRO_TEST_LOG") != "" {
		jlog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	j, err := Start(ctx, home, NodeOptions{Log: jlog})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.WaitCommitted(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := j.App.RestoreError(); err != nil {
		t.Logf("a refusal during the restore (retried): %v", err)
	}
	h0, got := j.App.LastCommit()
	// Restored, not replayed: its first committed height is a snapshot's,
	// and its block store holds no block 1.
	if r, base := j.App.RestoredHeight(), j.cmt.BlockStore().Base(); r < 10 || r%10 != 0 || base == 1 {
		t.Fatalf("the joiner restored height %d, block store base %d: it replayed from genesis", r, base)
	}
	want, err := cl.AppHashAfter(ctx, h0)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("joiner at height %d: app hash %s, the validator's %s", h0, got, want)
	}
	waitFor(ctx, t, j.App, "the joiner to follow", func() bool { h, _ := j.App.LastCommit(); return h >= h0+3 })
	h1, got1 := j.App.LastCommit()
	if want1, err := cl.AppHashAfter(ctx, h1); err != nil || want1 != got1 {
		t.Fatalf("joiner at height %d: %s vs %s (%v)", h1, got1, want1, err)
	}
	t.Logf("joined by state sync at height %d (block store base %d), following at %d", j.App.RestoredHeight(), j.cmt.BlockStore().Base(), h1)
}
