package store

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/tenzro/train/wire"
)

// The disk cap refuses a write that would pass it, before any byte is
// written; deletes give the room back; the accounting survives a reopen.
func TestBlobCapAndLedger(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := OpenBlobs(dir, BlobOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s.SetCap(1000)
	a, b := bytes.Repeat([]byte{1}, 600), bytes.Repeat([]byte{2}, 600)
	ha, hb := wire.ContentHash(a), wire.ContentHash(b)
	if _, err := s.PutStream(ctx, ha, bytes.NewReader(a), int64(len(a))); err != nil {
		t.Fatal(err)
	}
	_, err = s.PutStream(ctx, hb, bytes.NewReader(b), int64(len(b)))
	if !errors.Is(err, ErrBlobStoreFull) {
		t.Fatalf("second blob past the cap: %v", err)
	}
	if u := s.Usage(); u.Bytes != 600 || u.Blobs != 1 || u.Reserved != 0 {
		t.Fatalf("usage %+v", u)
	}
	if err := s.MarkUpload(ha, "did:tenzro:human:z6Mkx", "run-1"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = OpenBlobs(dir, BlobOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if u := s.Usage(); u.Bytes != 600 || u.Blobs != 1 {
		t.Fatalf("usage after reopen %+v", u)
	}
	var ups []Upload
	if err := s.Uploads(ctx, func(u Upload) error { ups = append(ups, u); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(ups) != 1 || ups[0].Hash != ha || ups[0].DID != "did:tenzro:human:z6Mkx" || ups[0].Task != "run-1" || ups[0].Size != 600 {
		t.Fatalf("uploads %+v", ups)
	}
	s.SetCap(1000)
	if err := s.Delete(ctx, ha); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutStream(ctx, hb, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatalf("after delete: %v", err)
	}
	ups = nil
	_ = s.Uploads(ctx, func(u Upload) error { ups = append(ups, u); return nil })
	if u := s.Usage(); u.Bytes != 600 || u.Blobs != 1 || len(ups) != 0 {
		t.Fatalf("usage %+v, uploads %d after delete", u, len(ups))
	}
}
