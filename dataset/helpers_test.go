package dataset

import (
	"bytes"
	"context"
	"crypto/rand"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/tenzro/train/store"
)

type testNode struct {
	h   host.Host
	db  *store.DB
	svc *Service
}

func newTestNode(t testing.TB, o Options, wrap func(BlockStore) BlockStore) *testNode {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var bs BlockStore = db.Blocks()
	if wrap != nil {
		bs = wrap(bs)
	}
	if o.ChainID == nil {
		o.ChainID = func(context.Context) (string, error) { return testChain, nil }
	}
	svc, err := New(context.Background(), h, bs, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = svc.Close()
		_ = h.Close()
		_ = db.Close()
	})
	return &testNode{h: h, db: db, svc: svc}
}

func connect(t testing.TB, a, b *testNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.h.Connect(ctx, peer.AddrInfo{ID: b.h.ID(), Addrs: b.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// randomFile writes n pseudo-random bytes into a temp file.
func randomFile(t testing.TB, n int) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	_, _ = rand.Read(data)
	p := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, data
}

// carOf builds the CAR of path under layout.
func carOf(t testing.TB, path string, l Layout) (cid.Cid, []byte) {
	t.Helper()
	root, err := RootCID(context.Background(), path, l)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	cw, err := NewCARWriter(&buf, root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ImportPath(context.Background(), cw, path, l, nil); err != nil {
		t.Fatal(err)
	}
	if err := cw.Flush(); err != nil {
		t.Fatal(err)
	}
	return root, buf.Bytes()
}

// countBlocks counts the blocks stored in a node.
func countBlocks(t testing.TB, n *testNode) int {
	t.Helper()
	ch, err := n.db.Blocks().AllKeysChan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	for range ch {
		k++
	}
	return k
}

func randInt(n int64) int64 {
	v, _ := rand.Int(rand.Reader, big.NewInt(n))
	return v.Int64()
}

func writeFile(p string, b []byte) error { return os.WriteFile(p, b, 0o600) }
