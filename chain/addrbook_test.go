package chain

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCloseWaitsForAddrBook: after Close the address book's last save is on
// disk and nothing writes into the home any more, so removing the home
// cannot race a late write (CI once failed a test's temporary-directory
// cleanup with "config: directory not empty"). It also pins that the book
// is still reachable in this CometBFT version.
func TestCloseWaitsForAddrBook(t *testing.T) {
	dir := t.TempDir()
	nodes, err := WriteTestnet(TestnetOptions{Validators: 1, Dir: dir, ChainID: "addrbook", TimeoutCommit: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := Start(ctx, nodes[0].Home, NodeOptions{Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.WaitCommitted(ctx, time.Minute); err != nil {
		v.Close()
		t.Fatal(err)
	}
	if v.cmt.PEXReactor() == nil {
		v.Close()
		t.Fatal("the node runs without PEX: this test no longer checks anything")
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if !waitAddrBook(v.cmt) {
		t.Fatal("the PEX reactor's address book is not reachable: Close cannot wait for its last save")
	}
	cfg := filepath.Join(nodes[0].Home, "config")
	ents, err := os.ReadDir(cfg)
	if err != nil {
		t.Fatal(err)
	}
	saved := false
	for _, e := range ents {
		if e.Name() == "addrbook.json" {
			saved = true
		} else if strings.HasPrefix(e.Name(), "addrbook.json") {
			t.Errorf("a half-written address book is left after Close: %s", e.Name())
		}
	}
	if !saved {
		t.Error("Close returned before the address book's save on stop")
	}
	if err := os.RemoveAll(nodes[0].Home); err != nil {
		t.Fatalf("remove the home after Close: %v", err)
	}
}
