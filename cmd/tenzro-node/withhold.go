package main

import (
	"context"
	"io"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/rpc/gossip"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// servedBlobs is the blob store as the node's parts use it.
type servedBlobs interface {
	syncer.Blobs
	gossip.BlobStore
	rpc.BlobStore
}

// withheldBlobs answers "not found" for what a test fault withholds
// (syncer.Fault.Withhold): to peers, getPayload, /blobs and this node. Only
// a faultinject build can set a fault (fault_inject.go).
type withheldBlobs struct {
	*store.Blobs
	f *syncer.Fault
}

func (b withheldBlobs) Has(ctx context.Context, h wire.Hash) (bool, error) {
	if b.f.Withheld(h) {
		return false, nil
	}
	return b.Blobs.Has(ctx, h)
}

func (b withheldBlobs) Size(ctx context.Context, h wire.Hash) (int64, error) {
	if b.f.Withheld(h) {
		return 0, store.ErrBlobNotFound
	}
	return b.Blobs.Size(ctx, h)
}

func (b withheldBlobs) Get(ctx context.Context, h wire.Hash) ([]byte, error) {
	if b.f.Withheld(h) {
		return nil, store.ErrBlobNotFound
	}
	return b.Blobs.Get(ctx, h)
}

func (b withheldBlobs) Open(ctx context.Context, h wire.Hash) (io.ReadCloser, int64, error) {
	if b.f.Withheld(h) {
		return nil, 0, store.ErrBlobNotFound
	}
	return b.Blobs.Open(ctx, h)
}

func (b withheldBlobs) OpenBlob(ctx context.Context, h wire.Hash) (*store.Blob, error) {
	if b.f.Withheld(h) {
		return nil, store.ErrBlobNotFound
	}
	return b.Blobs.OpenBlob(ctx, h)
}

func (b withheldBlobs) Map(ctx context.Context, h wire.Hash) ([]byte, func() error, error) {
	if b.f.Withheld(h) {
		return nil, nil, store.ErrBlobNotFound
	}
	return b.Blobs.Map(ctx, h)
}

// nodeBlobs is the store the node serves from: the blob store itself, or
// with a test fault, the withholding view of it.
func nodeBlobs(b *store.Blobs, f *syncer.Fault) servedBlobs {
	if f == nil {
		return b
	}
	return withheldBlobs{b, f}
}
