package syncer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tenzro/train/wire"
)

// Blobs is the node's content-addressed store of bytes it holds off chain:
// payloads, initial weights files, fragment weights, evidence. Keys are
// content hashes (wire.ContentHash); Put is durable when it returns.
// store.Blobs implements it over files (<data-dir>/blobs); a Node without
// one keeps blobs in its KV's KSBlobs keyspace (tests).
type Blobs interface {
	Has(ctx context.Context, h wire.Hash) (bool, error)
	// Get returns the blob's bytes, or an error matching ErrNotFound.
	Get(ctx context.Context, h wire.Hash) ([]byte, error)
	// Put stores b under h; b must hash to h.
	Put(ctx context.Context, h wire.Hash, b []byte) error
	// Open reads a large blob as a stream, with its size.
	Open(ctx context.Context, h wire.Hash) (io.ReadCloser, int64, error)
}

// BlobMapper is implemented by blob stores that can map a blob into memory
// (store.Blobs: a read-only mmap of the file) instead of copying it.
type BlobMapper interface {
	Map(ctx context.Context, h wire.Hash) ([]byte, func() error, error)
}

// loadBlob returns the blob's bytes and the function that releases them
// (mapped when the store can map: the bytes are then valid only until
// release). A missing blob is an error matching ErrNotFound.
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

// kvBlobs keeps blobs as values of the KSBlobs keyspace.
type kvBlobs struct{ kv KV }

// KVBlobs returns a Blobs over kv's KSBlobs keyspace (one synced write per
// Put), for nodes and tests without a file blob store.
func KVBlobs(kv KV) Blobs { return kvBlobs{kv} }

func (b kvBlobs) Has(ctx context.Context, h wire.Hash) (bool, error) {
	_, err := b.kv.Get(ctx, KSBlobs, h[:])
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (b kvBlobs) Get(ctx context.Context, h wire.Hash) ([]byte, error) {
	v, err := b.kv.Get(ctx, KSBlobs, h[:])
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("blob %s: %w", h, ErrNotFound)
	}
	return v, err
}

func (b kvBlobs) Put(ctx context.Context, h wire.Hash, v []byte) error {
	if got := wire.ContentHash(v); got != h {
		return fmt.Errorf("blob of %d bytes hashes to %s, not %s", len(v), got, h)
	}
	var batch Batch
	batch.Set(KSBlobs, h[:], v)
	return b.kv.Commit(ctx, &batch)
}

func (b kvBlobs) Open(ctx context.Context, h wire.Hash) (io.ReadCloser, int64, error) {
	v, err := b.Get(ctx, h)
	if err != nil {
		return nil, 0, err
	}
	return io.NopCloser(bytes.NewReader(v)), int64(len(v)), nil
}
