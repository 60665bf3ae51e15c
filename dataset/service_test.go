package dataset

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/ipfs/boxo/ipld/merkledag"
	uio "github.com/ipfs/boxo/ipld/unixfs/io"
	"github.com/ipfs/go-cid"
)

// TestAddFetchRead: one node imports a CAR, a second fetches the DAG over
// bitswap and reads back identical bytes; both hold it pinned.
func TestAddFetchRead(t *testing.T) {
	ctx := context.Background()
	a := newTestNode(t, Options{}, nil)
	b := newTestNode(t, Options{}, nil)
	connect(t, b, a)
	path, data := randomFile(t, 3<<20+12345)
	root, car := carOf(t, path, DefaultLayout)
	rec, err := a.svc.Import(ctx, bytes.NewReader(car), ImportMeta{Name: "data.bin", Layout: DefaultLayout.String()})
	if err != nil {
		t.Fatal(err)
	}
	if rec.CID != root.String() || rec.Size != uint64(len(data)) || rec.Kind != "file" {
		t.Fatalf("record %+v, want cid %s size %d", rec, root, len(data))
	}
	got, err := b.svc.Fetch(ctx, root, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.DAGBytes != rec.DAGBytes || got.Blocks != rec.Blocks || got.Source != "fetched" {
		t.Fatalf("fetched %+v, added %+v", got, rec)
	}
	nd, err := merkledag.NewDAGService(b.svc.local).Get(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	r, err := uio.NewDagReader(ctx, nd, merkledag.NewDAGService(b.svc.local))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, data) {
		t.Fatal("fetched bytes differ")
	}
	l, err := b.svc.List(ctx)
	if err != nil || len(l) != 1 || l[0].CID != root.String() {
		t.Fatalf("list %+v %v", l, err)
	}
	_ = time.Second
}

// TestFetchCIDv0: a dataset in the classic layout (CIDv0, dag-pb leaves) is
// fetched by its Qm… CID and by the CIDv1 form of the same root.
func TestFetchCIDv0(t *testing.T) {
	ctx := context.Background()
	a := newTestNode(t, Options{}, nil)
	b := newTestNode(t, Options{}, nil)
	connect(t, b, a)
	path, data := randomFile(t, 1<<20+17)
	root, car := carOf(t, path, KuboV0Layout)
	if root.Version() != 0 {
		t.Fatalf("root %s is not CIDv0", root)
	}
	if _, err := a.svc.Import(ctx, bytes.NewReader(car), ImportMeta{}); err != nil {
		t.Fatal(err)
	}
	c, _, err := ParseRef("ipfs://" + root.String())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := b.svc.Fetch(ctx, c, 0)
	if err != nil || rec.Size != uint64(len(data)) || rec.CID != root.String() {
		t.Fatalf("fetch %s: %+v %v", root, rec, err)
	}
	v1, err := ParseCID(cid.NewCidV1(cid.DagProtobuf, root.Hash()).String())
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := b.svc.Fetch(ctx, v1, 0); err != nil || rec.CID != v1.String() {
		t.Fatalf("fetch CIDv1 form: %+v %v", rec, err)
	}
}
