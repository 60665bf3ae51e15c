package syncer

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/tenzro/train/wire"
)

// KVBlobs is Blobs over a KV's KSBlobs key space (one value per blob,
// keyed by its 32-byte hash). The blob store of files that the node uses
// for large blobs replaces it behind the same interface.
type KVBlobs struct{ KV KV }

var _ Blobs = KVBlobs{}

// Has implements Blobs.
func (b KVBlobs) Has(ctx context.Context, h wire.Hash) (bool, error) {
	_, err := b.KV.Get(ctx, KSBlobs, h[:])
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Get implements Blobs.
func (b KVBlobs) Get(ctx context.Context, h wire.Hash) ([]byte, error) {
	return b.KV.Get(ctx, KSBlobs, h[:])
}

// Put implements Blobs (one synced batch).
func (b KVBlobs) Put(ctx context.Context, h wire.Hash, v []byte) error {
	var batch Batch
	batch.Set(KSBlobs, h[:], v)
	return b.KV.Commit(ctx, &batch)
}

// Open implements Blobs.
func (b KVBlobs) Open(ctx context.Context, h wire.Hash) (io.ReadCloser, int64, error) {
	v, err := b.Get(ctx, h)
	if err != nil {
		return nil, 0, err
	}
	return io.NopCloser(bytes.NewReader(v)), int64(len(v)), nil
}
