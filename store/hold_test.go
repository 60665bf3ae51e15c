package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tenzro/train/wire"
)

// owner hands bytes to HoldBlobHashed and counts the store's releases.
type owner struct {
	b        []byte
	released atomic.Int32
}

func (o *owner) release() { o.released.Add(1) }

func (o *owner) count() int { return int(o.released.Load()) }

// notFreed fails when the store put an owner's bytes on its free list
// (they are the owner's, not the store's to reuse).
func notFreed(t *testing.T, s *Blobs, b []byte) {
	t.Helper()
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	for _, f := range s.free {
		if cap(f) > 0 && len(b) > 0 && &f[:1][0] == &b[0] {
			t.Fatal("the store kept a held blob's bytes for reuse")
		}
	}
}

// TestHoldBlobHashed: bytes handed over with their hash become the pending
// blob as they are (no copy) — served by every reader while the durable
// write is held, then a whole file of those bytes — and the store calls
// release exactly once in every path: after the durable write, after the
// last reader when one holds the bytes past it, at once when the blob is
// pending or stored already or the bytes are refused, after the write
// made before returning past the memory cap, and at Close.
func TestHoldBlobHashed(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s *Blobs, o *owner, held chan wire.Hash, release chan struct{})
	}{
		{"durable, no reader", func(t *testing.T, s *Blobs, o *owner, held chan wire.Hash, release chan struct{}) {
			h := wire.ContentHash(o.b)
			if err := s.HoldBlobHashed(ctx, h, o.b, o.release); err != nil {
				t.Fatal(err)
			}
			<-held
			readAll(t, s, h, bytes.Clone(o.b))
			if n := o.count(); n != 0 || !s.Pending(h) {
				t.Fatalf("released %d times while pending (pending %v)", n, s.Pending(h))
			}
			close(release)
			if err := s.Durable(ctx, h); err != nil {
				t.Fatal(err)
			}
			if n := o.count(); n != 1 {
				t.Fatalf("released %d times after the durable write", n)
			}
			if raw, err := os.ReadFile(s.Path(h)); err != nil || !bytes.Equal(raw, o.b) {
				t.Fatalf("file after the write: %v", err)
			}
		}},
		{"a reader past the write", func(t *testing.T, s *Blobs, o *owner, held chan wire.Hash, release chan struct{}) {
			h := wire.ContentHash(o.b)
			want := bytes.Clone(o.b)
			if err := s.HoldBlobHashed(ctx, h, o.b, o.release); err != nil {
				t.Fatal(err)
			}
			<-held
			reader, err := s.OpenBlob(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			m, unmap, err := s.Map(ctx, h)
			if err != nil || &m[0] != &o.b[0] {
				t.Fatalf("Map of a held blob: %v, a copy %v", err, err == nil && &m[0] != &o.b[0])
			}
			close(release)
			if err := s.Durable(ctx, h); err != nil {
				t.Fatal(err)
			}
			if n := o.count(); n != 0 {
				t.Fatalf("released %d times while read", n)
			}
			got := make([]byte, len(want))
			if _, err := reader.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("reader after the write: %v", err)
			}
			_ = reader.Close()
			if n := o.count(); n != 0 {
				t.Fatalf("released %d times while mapped", n)
			}
			_ = unmap()
			if n := o.count(); n != 1 {
				t.Fatalf("released %d times after the last reader", n)
			}
			readAll(t, s, h, want) // from the file now
		}},
		{"pending already", func(t *testing.T, s *Blobs, o *owner, held chan wire.Hash, release chan struct{}) {
			h := wire.ContentHash(o.b)
			if err := s.WriteBlobHashed(ctx, h, o.b); err != nil {
				t.Fatal(err)
			}
			<-held
			if err := s.HoldBlobHashed(ctx, h, o.b, o.release); err != nil {
				t.Fatal(err)
			}
			if n := o.count(); n != 1 || !s.Pending(h) {
				t.Fatalf("released %d times, pending %v", n, s.Pending(h))
			}
			close(release)
			if err := s.Durable(ctx, h); err != nil {
				t.Fatal(err)
			}
		}},
		{"stored already", func(t *testing.T, s *Blobs, o *owner, held chan wire.Hash, release chan struct{}) {
			close(release)
			h := wire.ContentHash(o.b)
			if err := s.Put(ctx, h, o.b); err != nil {
				t.Fatal(err)
			}
			if err := s.HoldBlobHashed(ctx, h, o.b, o.release); err != nil {
				t.Fatal(err)
			}
			if n := o.count(); n != 1 || s.Pending(h) {
				t.Fatalf("released %d times, pending %v", n, s.Pending(h))
			}
		}},
		{"past the cap: written before returning", func(t *testing.T, s *Blobs, o *owner, held chan wire.Hash, release chan struct{}) {
			first := blobData(61, 2<<20)
			if err := s.WriteBlobHashed(ctx, wire.ContentHash(first), first); err != nil {
				t.Fatal(err)
			}
			<-held
			s.pendCap = 3 << 20
			h := wire.ContentHash(o.b)
			if err := s.HoldBlobHashed(ctx, h, o.b, o.release); err != nil {
				t.Fatal(err)
			}
			if n := o.count(); n != 1 || s.Pending(h) || s.SyncWrites() != 1 {
				t.Fatalf("released %d times, pending %v, sync writes %d", n, s.Pending(h), s.SyncWrites())
			}
			if raw, err := os.ReadFile(s.Path(h)); err != nil || !bytes.Equal(raw, o.b) {
				t.Fatalf("the write past the cap is not durable: %v", err)
			}
			close(release)
		}},
		{"another write failing", func(t *testing.T, s *Blobs, o *owner, held chan wire.Hash, release chan struct{}) {
			close(release)
			s.retryFirst = time.Millisecond
			full := &blobHooks{fail: map[hookPoint]error{hookSync: syscall.ENOSPC}}
			s.hooks = full
			first := blobData(62, 1<<20)
			if err := s.WriteBlobHashed(ctx, wire.ContentHash(first), first); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(time.Minute); s.WriteFailures() < 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no failure seen")
				}
			}
			h := wire.ContentHash(o.b)
			if err := s.HoldBlobHashed(ctx, h, o.b, o.release); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("a held write while another fails: %v, want ENOSPC", err)
			}
			if n := o.count(); n != 1 || s.Pending(h) {
				t.Fatalf("released %d times, pending %v", n, s.Pending(h))
			}
			full.mu.Lock()
			delete(full.fail, hookSync)
			full.mu.Unlock()
		}},
		{"refused", func(t *testing.T, s *Blobs, o *owner, held chan wire.Hash, release chan struct{}) {
			close(release)
			h := wire.ContentHash(o.b)
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			if err := s.HoldBlobHashed(cancelled, h, o.b, o.release); err == nil || o.count() != 1 {
				t.Fatalf("cancelled: %v, released %d times", err, o.count())
			}
			s.maxSize = int64(len(o.b)) - 1
			if err := s.HoldBlobHashed(ctx, h, o.b, o.release); !errors.Is(err, ErrBlobTooLarge) || o.count() != 2 {
				t.Fatalf("too large: %v, released %d times", err, o.count())
			}
			o.released.Add(-1) // one release per call: this case made two
			if ok, _ := s.Has(ctx, h); ok || s.Pending(h) {
				t.Fatal("a refused write left something")
			}
		}},
		{"held at Close", func(t *testing.T, s *Blobs, o *owner, held chan wire.Hash, release chan struct{}) {
			h := wire.ContentHash(o.b)
			if err := s.HoldBlobHashed(ctx, h, o.b, o.release); err != nil {
				t.Fatal(err)
			}
			<-held
			close(release)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if n := o.count(); n != 1 {
				t.Fatalf("released %d times after Close", n)
			}
		}},
		{"given up at Close", func(t *testing.T, s *Blobs, o *owner, held chan wire.Hash, release chan struct{}) {
			close(release)
			s.retryFirst = time.Hour // the retry waits for Close
			s.hooks = &blobHooks{fail: map[hookPoint]error{hookRename: syscall.EIO}}
			h := wire.ContentHash(o.b)
			if err := s.HoldBlobHashed(ctx, h, o.b, o.release); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(time.Minute); s.WriteFailures() < 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no failure seen")
				}
			}
			if n := o.count(); n != 0 {
				t.Fatalf("released %d times while failing", n)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if n := o.count(); n != 1 {
				t.Fatalf("released %d times after a write given up at Close", n)
			}
			if err := s.HoldBlobHashed(ctx, h, o.b, o.release); err == nil || o.count() != 2 {
				t.Fatalf("after Close: %v, released %d times", err, o.count())
			}
			o.released.Add(-1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hold, held, release := holdWrites()
			s, err := OpenBlobs(t.TempDir(), BlobOptions{HoldWrite: hold, Logger: discard()})
			if err != nil {
				t.Fatal(err)
			}
			o := &owner{b: blobData(60, 3<<20+77)}
			before := s.HeldWrites()
			tc.run(t, s, o, held, release)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if n := o.count(); n != 1 {
				t.Fatalf("released %d times, want exactly once", n)
			}
			if s.HeldWrites() == before && tc.name != "refused" {
				t.Fatal("HeldWrites did not count the write")
			}
			notFreed(t, s, o.b)
		})
	}
}
