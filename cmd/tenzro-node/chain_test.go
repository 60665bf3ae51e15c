package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenzro/train/chain"
)

// TestTestnetCommand writes a 2-validator testnet through the CLI and
// refuses bad input with exit 2 and a precise message.
func TestTestnetCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tn")
	k := "did:tenzro:human:z6MkihJgrYLy4NsG1d8MR1uYVmtvsxiyFydsq5v7xCWGDetn"
	var out, errb bytes.Buffer
	if code := execute(context.Background(), []string{"testnet", "--validators", "2", "--dir", dir, "--base-port", "0", "--alloc", k + "=1000"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for i := 0; i < 2; i++ {
		home := filepath.Join(dir, "node"+string(rune('0'+i)))
		nc, err := chain.LoadNodeConfig(home)
		if err != nil {
			t.Fatal(err)
		}
		if len(nc.PersistentPeers) != 1 || !strings.Contains(out.String(), nc.RPCAddr) {
			t.Fatalf("node %d: %+v\n%s", i, nc, out.String())
		}
		g, err := os.ReadFile(filepath.Join(home, "config", "genesis.json"))
		if err != nil {
			t.Fatal(err)
		}
		// The default halt gap is written into the genesis params.
		if !strings.Contains(string(g), `"halt_gap_ms":30000`) && !strings.Contains(string(g), `"halt_gap_ms": 30000`) {
			t.Fatalf("node %d genesis has no halt_gap_ms 30000:\n%s", i, g)
		}
	}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"bad alloc":       {[]string{"testnet", "--dir", t.TempDir() + "/x", "--alloc", "nope"}, "want DID=AMOUNT"},
		"bad amount":      {[]string{"testnet", "--dir", t.TempDir() + "/x", "--alloc", k + "=-5"}, "balance"},
		"not a DID":       {[]string{"testnet", "--dir", t.TempDir() + "/x", "--alloc", "did:x=5"}, "accounts[0].did"},
		"no validators":   {[]string{"testnet", "--dir", t.TempDir() + "/x", "--validators", "0"}, "want 1..64"},
		"dir not empty":   {[]string{"testnet", "--dir", dir}, "not empty"},
		"no dir":          {[]string{"testnet"}, "dir"},
		"halt gap small":  {[]string{"testnet", "--dir", t.TempDir() + "/x", "--halt-gap-ms", "100"}, "--halt-gap-ms 100: want 0 (off) or 5000"},
		"init no peers":   {[]string{"init", "--home", t.TempDir() + "/f", "--genesis", filepath.Join(dir, "node0", "config", "genesis.json"), "--peers", ""}, "peers"},
		"init bad peer":   {[]string{"init", "--home", t.TempDir() + "/f", "--genesis", filepath.Join(dir, "node0", "config", "genesis.json"), "--peers", "127.0.0.1:1"}, "id@host:port"},
		"init no genesis": {[]string{"init", "--home", t.TempDir() + "/f", "--genesis", "/nonexistent", "--peers", "29fe4d9f42761d33638c1c9cea547d5fcf10718c@127.0.0.1:1"}, "genesis"},
		"home not a home": {[]string{"--home", t.TempDir()}, "tenzro-chain.json"},
	} {
		out.Reset()
		errb.Reset()
		code := execute(context.Background(), c.args, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%s: exit %d, stderr %q, want an error containing %q", name, code, errb.String(), c.want)
		}
	}
}
