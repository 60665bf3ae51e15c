package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/rpc/client"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// TestNodeServesAndShutsDown runs the real wiring (store, native engine,
// syncer, gossip, RPC) in-process, calls it, and stops it with ctx.
func TestNodeServesAndShutsDown(t *testing.T) {
	for _, engine := range []string{"native", "wasm"} {
		t.Run(engine, func(t *testing.T) { testNode(t, engine) })
	}
}

func testNode(t *testing.T, engine string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := defaults()
	cfg.DataDir, cfg.NodeKey, cfg.RPCAddr, cfg.ListenAddr, cfg.Dev, cfg.Engine = dir, filepath.Join(dir, "node.key"), addr, "/ip4/127.0.0.1/tcp/0", true, engine
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runNode(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()

	c := client.New("http://"+addr, client.WithTimeout(10*time.Second))
	var info *wire.NodeInfo
	// A generous deadline, not a count of tries: a wasm node compiles its
	// built-in modules at start, which takes long on a loaded machine.
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		if info, err = c.Info(context.Background()); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("node exited: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if !info.Dev || info.Role != "syncer" || info.NodeDID == "" {
		t.Fatalf("info %+v", info)
	}
	if b, err := c.Faucet(context.Background(), wire.FaucetParams{DID: info.NodeDID, Amount: "5"}); err != nil || b.DID != info.NodeDID {
		t.Fatalf("faucet: %v %+v", err, b)
	}
	cands, err := c.ListSyncers(context.Background())
	if err != nil || len(cands) != 1 || cands[0].DID != info.NodeDID {
		t.Fatalf("dev node is not the only syncer candidate: %v %+v", err, cands)
	}
	if engine == "wasm" {
		ps, err := c.ListPlugins(context.Background())
		if err != nil || len(ps) == 0 || !ps[0].Builtin {
			t.Fatalf("plugin list: %v %+v", err, ps)
		}
		info, mod, err := c.GetPlugin(context.Background(), ps[0].Hash)
		if err != nil || info.Hash != ps[0].Hash || wire.SHA256(mod) != ps[0].Hash {
			t.Fatalf("plugin get: %v", err)
		}
		key, _ := did.Generate(did.KindHuman, nil)
		p := &wire.PublishPluginParams{DID: key.DID.String(), Module: []byte("not wasm"), Signed: wire.Signed{Nonce: 1}}
		p.Signature = key.Sign(p.Preimage())
		// Publishing costs a burned fee: an unfunded DID is refused before
		// its module is looked at.
		if _, err := c.PublishPlugin(context.Background(), p); client.CodeOf(err) != rpc.CodeFunds {
			t.Fatalf("unfunded publisher: %v", err)
		}
		if _, err := c.Faucet(context.Background(), wire.FaucetParams{DID: key.DID.String(), Amount: "10000000000"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PublishPlugin(context.Background(), p); client.CodeOf(err) != rpc.CodeInvalidParams {
			t.Fatalf("bad module: %v", err)
		}
		p.Signature[0] ^= 1
		if _, err := c.PublishPlugin(context.Background(), p); client.CodeOf(err) != rpc.CodeUnauthorized {
			t.Fatalf("bad signature: %v", err)
		}
		if _, _, err := c.GetPlugin(context.Background(), wire.SHA256([]byte("x"))); client.CodeOf(err) != rpc.CodeNotFound {
			t.Fatalf("unknown plugin: %v", err)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("node did not shut down")
	}
}

// TestOlderDataDirRefused: a data dir whose store holds a pre-chain node's
// runs or balances is refused with a precise error, and no chain is created.
func TestOlderDataDirRefused(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(context.Background(), filepath.Join(dir, "db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b machine.Batch
	b.Set(machine.KSRuns, []byte("old-run"), []byte(`{}`))
	if err := db.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	db.Close()
	cfg := defaults()
	cfg.DataDir, cfg.NodeKey, cfg.RPCAddr, cfg.ListenAddr, cfg.Dev, cfg.Engine = dir, filepath.Join(dir, "node.key"), "127.0.0.1:0", "/ip4/127.0.0.1/tcp/0", true, "native"
	err = runNode(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "from an older version") {
		t.Fatalf("older data dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "chain")); err == nil {
		t.Fatal("a chain was created beside an older store")
	}
}

// TestNoChainNoNode: without --dev or --home there is no chain to run.
func TestNoChainNoNode(t *testing.T) {
	cfg := defaults()
	cfg.DataDir = t.TempDir()
	err := runNode(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "no chain to run") {
		t.Fatalf("no --dev, no --home: %v", err)
	}
}
