package store

import (
	"context"
	"errors"
	"testing"

	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
	mh "github.com/multiformats/go-multihash"
)

func TestBlocks(t *testing.T) {
	ctx := context.Background()
	db, err := OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bs := db.Blocks()
	data := []byte("some block")
	h, _ := mh.Sum(data, mh.SHA2_256, -1)
	v1 := cid.NewCidV1(cid.Raw, h)
	v0 := cid.NewCidV0(h)
	if ok, _ := bs.Has(ctx, v1); ok {
		t.Fatal("empty store has a block")
	}
	if _, err := bs.Get(ctx, v1); !ipld.IsNotFound(err) {
		t.Fatalf("get absent: %v", err)
	}
	blk, _ := blocks.NewBlockWithCid(data, v1)
	if err := bs.Put(ctx, blk); err != nil {
		t.Fatal(err)
	}
	// Keyed by multihash: the CIDv0 of the same bytes finds it.
	if n, err := bs.GetSize(ctx, v0); err != nil || n != len(data) {
		t.Fatalf("size via CIDv0: %d %v", n, err)
	}
	got, err := bs.Get(ctx, v1)
	if err != nil || string(got.RawData()) != string(data) || !got.Cid().Equals(v1) {
		t.Fatalf("get: %v %v", got, err)
	}
	// Bytes that do not hash to the CID are refused.
	bad, _ := blocks.NewBlockWithCid([]byte("other bytes"), cid.NewCidV1(cid.Raw, mustSum(t, "third")))
	if err := bs.Put(ctx, bad); !errors.Is(err, ErrBlockMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	if err := bs.PutDataset(ctx, v1, []byte(`{"cid":"x"}`)); err != nil {
		t.Fatal(err)
	}
	var recs []string
	_ = bs.Datasets(ctx, func(r []byte) error { recs = append(recs, string(r)); return nil })
	if len(recs) != 1 {
		t.Fatalf("datasets %v", recs)
	}
	ch, _ := bs.AllKeysChan(ctx)
	n := 0
	for range ch {
		n++
	}
	if n != 1 {
		t.Fatalf("%d keys", n)
	}
	_ = bs.DeleteDataset(ctx, v1)
	_ = bs.DeleteBlock(ctx, v1)
	if ok, _ := bs.Has(ctx, v1); ok {
		t.Fatal("deleted block still there")
	}
	if r, _ := bs.GetDataset(ctx, v1); r != nil {
		t.Fatal("deleted record still there")
	}
	// The syncer's keyspaces do not see the block prefixes.
	if err := db.Scan(ctx, "blobs", nil, func(k, v []byte) error { t.Fatal("blob keyspace sees a block"); return nil }); err != nil {
		t.Fatal(err)
	}
}

func mustSum(t *testing.T, s string) mh.Multihash {
	h, err := mh.Sum([]byte(s), mh.SHA2_256, -1)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
