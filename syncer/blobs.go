package syncer

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// KVBlobs is Blobs over a KV's KSBlobs key space (one value per blob,
// keyed by its 32-byte hash). The blob store of files that the node uses
// for large blobs replaces it behind the same interface.
type KVBlobs struct{ KV machine.KV }

var _ Blobs = KVBlobs{}

// Has implements Blobs.
func (b KVBlobs) Has(ctx context.Context, h wire.Hash) (bool, error) {
	_, err := b.KV.Get(ctx, machine.KSBlobs, h[:])
	if errors.Is(err, machine.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Get implements Blobs.
func (b KVBlobs) Get(ctx context.Context, h wire.Hash) ([]byte, error) {
	return b.KV.Get(ctx, machine.KSBlobs, h[:])
}

// Put implements Blobs (one synced batch).
func (b KVBlobs) Put(ctx context.Context, h wire.Hash, v []byte) error {
	var batch machine.Batch
	batch.Set(machine.KSBlobs, h[:], v)
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

// BlobMapper is implemented by blob stores that can map a blob into memory
// (store.Blobs: a read-only mmap of the file) instead of copying it.
type BlobMapper interface {
	Map(ctx context.Context, h wire.Hash) ([]byte, func() error, error)
}

// loadBlob returns a blob's bytes and the function that releases them:
// mapped when the store can map (the bytes are then valid only until
// release), else a copy. A missing blob is an error matching ErrNotFound.
func loadBlob(ctx context.Context, bs Blobs, h wire.Hash) ([]byte, func(), error) {
	if m, ok := bs.(BlobMapper); ok {
		b, release, err := m.Map(ctx, h)
		if err != nil {
			return nil, nil, err
		}
		return b, func() { _ = release() }, nil
	}
	b, err := bs.Get(ctx, h)
	if err != nil {
		return nil, nil, err
	}
	return b, func() {}, nil
}
