package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenzro/train/wire"
)

// writeAfter stores data with WriteBlobAfter, written in two pieces (a
// header and the values, as a weights file is).
func writeAfter(t *testing.T, s *Blobs, data []byte) wire.Hash {
	t.Helper()
	h, err := s.WriteBlobAfter(context.Background(), int64(len(data)), func(w io.Writer) error {
		if _, err := w.Write(data[:min(100, len(data))]); err != nil {
			return err
		}
		_, err := w.Write(data[min(100, len(data)):])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if h != wire.ContentHash(data) {
		t.Fatalf("WriteBlobAfter hash %s, want %s", h, wire.ContentHash(data))
	}
	return h
}

// readAll checks every way of reading blob h gives data.
func readAll(t *testing.T, s *Blobs, h wire.Hash, data []byte) {
	t.Helper()
	ctx := context.Background()
	if ok, err := s.Has(ctx, h); err != nil || !ok {
		t.Fatalf("Has: %v %v", ok, err)
	}
	if n, err := s.Size(ctx, h); err != nil || n != int64(len(data)) {
		t.Fatalf("Size: %d %v, want %d", n, err, len(data))
	}
	if got, err := s.Get(ctx, h); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get: %v, equal %v", err, bytes.Equal(got, data))
	}
	m, release, err := s.Map(ctx, h)
	if err != nil || !bytes.Equal(m, data) {
		t.Fatalf("Map: %v", err)
	}
	_ = release()
	b, err := s.OpenBlob(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	part := make([]byte, 1000)
	if _, err := b.ReadAt(part, 5000); err != nil || !bytes.Equal(part, data[5000:6000]) {
		t.Fatalf("ReadAt: %v", err)
	}
	if _, err := b.Seek(7, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(b); err != nil || !bytes.Equal(rest, data[7:]) {
		t.Fatalf("Seek+Read: %v", err)
	}
}

// holdWrites makes every deferred write wait until release is closed; held
// receives each hash as its write starts waiting.
func holdWrites() (hold func(wire.Hash), held chan wire.Hash, release chan struct{}) {
	held, release = make(chan wire.Hash, 16), make(chan struct{})
	return func(h wire.Hash) { held <- h; <-release }, held, release
}

// TestWriteBlobAfterServesPending: while the durable write is held, the
// blob is served from memory, byte-identical, by every reader, and no file
// is named; once it is released the file is whole and nothing is pending.
func TestWriteBlobAfterServesPending(t *testing.T) {
	hold, held, release := holdWrites()
	s, err := OpenBlobs(t.TempDir(), BlobOptions{HoldWrite: hold, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	data := blobData(7, 3<<20+123)
	h := writeAfter(t, s, data)
	if got := <-held; got != h {
		t.Fatalf("held %s, want %s", got, h)
	}
	if !s.Pending(h) {
		t.Fatal("not pending while its write is held")
	}
	if _, err := os.Stat(s.Path(h)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file named before the write: %v", err)
	}
	readAll(t, s, h, data)
	// A reader that holds the pending bytes past the write keeps them.
	holder, err := s.OpenBlob(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	// A second write of the same bytes joins the pending one.
	if h2 := writeAfter(t, s, data); h2 != h {
		t.Fatal("second write, another hash")
	}
	// Put of the same hash is a no-op (the blob is there).
	if err := s.Put(context.Background(), h, data); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Durable(ctx, h); err == nil {
		t.Fatal("Durable returned before the write with a cancelled context")
	}
	close(release)
	if err := s.Durable(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	if s.Pending(h) {
		t.Fatal("pending after Durable")
	}
	raw, err := os.ReadFile(s.Path(h))
	if err != nil || wire.ContentHash(raw) != h {
		t.Fatalf("file after the write: %v", err)
	}
	readAll(t, s, h, data)
	if l := leftovers(t, s.Dir()); len(l) > 0 {
		t.Fatalf("left behind: %v", l)
	}
	// Its buffer is not reused while the reader holds it: a write of
	// other bytes of the same size takes a new one.
	other := blobData(8, len(data))
	h2 := writeAfter(t, s, other)
	<-held
	if err := s.Durable(context.Background(), h2); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := holder.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("a held pending blob changed under its reader: %v", err)
	}
	// Once let go, the next write of that size reuses a kept buffer, and
	// every blob still reads right.
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	s.pendMu.Lock()
	kept := len(s.free)
	s.pendMu.Unlock()
	if kept != 2 {
		t.Fatalf("%d buffers kept after both writes ended, want 2", kept)
	}
	third := blobData(9, len(data))
	h3 := writeAfter(t, s, third)
	<-held
	if err := s.Durable(context.Background(), h3); err != nil {
		t.Fatal(err)
	}
	readAll(t, s, h, data)
	readAll(t, s, h2, other)
	readAll(t, s, h3, third)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWriteBlobAfterDiskFull: the durable write fails (ENOSPC at the
// write, then at the fsync); the node keeps serving the right bytes from
// memory, never names a partial file, retries, and completes once the disk
// has room.
func TestWriteBlobAfterDiskFull(t *testing.T) {
	var logs syncBuffer
	s, err := OpenBlobs(t.TempDir(), BlobOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.retryFirst = time.Millisecond
	full := &blobHooks{fail: map[hookPoint]error{hookWrite: syscall.ENOSPC, hookSync: syscall.ENOSPC}}
	s.hooks = full
	data := blobData(9, 1<<20+5)
	h := writeAfter(t, s, data)
	deadline := time.Now().Add(time.Minute)
	for s.WriteFailures() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("no retries seen")
		}
		readAll(t, s, h, data) // right bytes, from memory, while the disk is full
		if _, err := os.Stat(s.Path(h)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("file named while its writes fail: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	full.mu.Lock()
	delete(full.fail, hookWrite) // the write passes, the fsync still fails
	full.mu.Unlock()
	for n := s.WriteFailures(); s.WriteFailures() < n+2; {
		if time.Now().After(deadline) {
			t.Fatal("no retries seen")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := os.Stat(s.Path(h)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file named after a failed fsync: %v", err)
	}
	full.mu.Lock()
	delete(full.fail, hookSync)
	full.mu.Unlock()
	if err := s.Durable(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(s.Path(h))
	if err != nil || !bytes.Equal(raw, data) {
		t.Fatalf("file after the disk has room: %v", err)
	}
	for _, want := range []string{"deferred write failed; the bytes stay served from memory, retrying", "no space left on device", "deferred write succeeded after failures"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if l := leftovers(t, s.Dir()); len(l) > 0 {
		t.Fatalf("left behind: %v", l)
	}
}

// TestWriteBlobAfterCloseGivesUp: a write that still fails when the store
// closes gets a last attempt and is given up: Durable says why, nothing is
// named, and a new store in the directory has no such blob (what the
// node's restart re-derives).
func TestWriteBlobAfterCloseGivesUp(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBlobs(dir, BlobOptions{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	s.retryFirst = time.Hour // the retry waits for Close
	s.hooks = &blobHooks{fail: map[hookPoint]error{hookRename: syscall.EIO}}
	data := blobData(11, 70000)
	h := writeAfter(t, s, data)
	for s.WriteFailures() < 1 {
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Durable(context.Background(), h); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Durable after a given-up write: %v", err)
	}
	if _, err := s.WriteBlobAfter(context.Background(), 1, func(w io.Writer) error { _, err := w.Write([]byte{1}); return err }); err == nil {
		t.Fatal("deferred write accepted after Close")
	}
	s2 := openTestBlobs(t, dir)
	if ok, _ := s2.Has(context.Background(), h); ok {
		t.Fatal("a given-up write left a blob")
	}
	if l := leftovers(t, dir); len(l) > 0 {
		t.Fatalf("left behind: %v", l)
	}
}

// TestWriteBlobAfterRefusals: a write of other than the announced size,
// or a failing producer, keeps nothing.
func TestWriteBlobAfterRefusals(t *testing.T) {
	s := openTestBlobs(t, t.TempDir())
	ctx := context.Background()
	boom := errors.New("producer failed")
	for name, tc := range map[string]struct {
		size  int64
		write func(io.Writer) error
		want  error
	}{
		"more":   {4, func(w io.Writer) error { _, err := w.Write([]byte("hello")); return err }, ErrBlobTooLarge},
		"fewer":  {6, func(w io.Writer) error { _, err := w.Write([]byte("hello")); return err }, nil},
		"failed": {5, func(w io.Writer) error { _, _ = w.Write([]byte("hel")); return boom }, boom},
		"huge":   {s.MaxSize() + 1, func(io.Writer) error { return nil }, ErrBlobTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			h, err := s.WriteBlobAfter(ctx, tc.size, tc.write)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if !h.IsZero() || s.Pending(wire.ContentHash([]byte("hello"))) {
				t.Fatal("refused write left something")
			}
		})
	}
	if n := checkAllBlobs(t, s); n != 0 {
		t.Fatalf("%d blobs after refusals", n)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// syncBuffer is a bytes.Buffer safe for the store's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWriteBlobAfterBoundsMemory: deferred writes hold at most pendCap
// bytes, and none more while one is failing. Past the cap a write is
// durable before it returns; while the disk fails, a new write fails its
// caller at once (the commit abstains) instead of joining the bytes held.
func TestWriteBlobAfterBoundsMemory(t *testing.T) {
	t.Run("cap", func(t *testing.T) {
		hold, held, release := holdWrites()
		s, err := OpenBlobs(t.TempDir(), BlobOptions{HoldWrite: hold, Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		s.pendCap = 3 << 20
		a, b := blobData(21, 2<<20), blobData(22, 2<<20)
		ha := writeAfter(t, s, a)
		<-held
		hb := writeAfter(t, s, b) // 4 MiB would be held: written now
		if s.Pending(hb) || s.SyncWrites() != 1 {
			t.Fatalf("over the cap: pending %v, sync writes %d", s.Pending(hb), s.SyncWrites())
		}
		if raw, err := os.ReadFile(s.Path(hb)); err != nil || !bytes.Equal(raw, b) {
			t.Fatalf("the write past the cap is not durable: %v", err)
		}
		if !s.Pending(ha) {
			t.Fatal("the held write stopped being pending")
		}
		close(release)
		if err := s.Durable(context.Background(), ha); err != nil {
			t.Fatal(err)
		}
		readAll(t, s, ha, a)
		readAll(t, s, hb, b)
	})
	t.Run("failing", func(t *testing.T) {
		s, err := OpenBlobs(t.TempDir(), BlobOptions{Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		s.retryFirst = time.Millisecond
		full := &blobHooks{fail: map[hookPoint]error{hookWrite: syscall.ENOSPC}}
		s.hooks = full
		a, b := blobData(23, 1<<20), blobData(24, 1<<20)
		ha := writeAfter(t, s, a)
		deadline := time.Now().Add(time.Minute)
		for s.WriteFailures() < 1 {
			if time.Now().After(deadline) {
				t.Fatal("no failure seen")
			}
			time.Sleep(time.Millisecond)
		}
		_, err = s.WriteBlobAfter(context.Background(), int64(len(b)), func(w io.Writer) error { _, err := w.Write(b); return err })
		if err == nil || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "is failing") {
			t.Fatalf("a deferred write while another fails: %v, want ENOSPC and why", err)
		}
		hb := wire.ContentHash(b)
		if ok, _ := s.Has(context.Background(), hb); ok {
			t.Fatal("the refused blob is readable")
		}
		readAll(t, s, ha, a) // the failing one is still served from memory
		full.mu.Lock()
		delete(full.fail, hookWrite)
		full.mu.Unlock()
		if err := s.Durable(context.Background(), ha); err != nil {
			t.Fatal(err)
		}
		if got := writeAfter(t, s, b); got != hb {
			t.Fatalf("after the disk recovered: %s", got)
		}
		if err := s.Durable(context.Background(), hb); err != nil {
			t.Fatal(err)
		}
		if l := leftovers(t, s.Dir()); len(l) > 0 {
			t.Fatalf("left behind: %v", l)
		}
	})
}

// TestWriteBlobHashed: bytes given in parts with the hash their producer
// computed are a deferred write like WriteBlobAfter's — served from memory
// while the durable write is held, then a whole file of exactly those
// bytes; the same hash again while pending copies nothing; past the memory
// cap and on a failing disk the write is made before returning (and fails
// there); too large, a cancelled context and a closed store keep nothing.
func TestWriteBlobHashed(t *testing.T) {
	ctx := context.Background()
	parts := func(data []byte) [][]byte { return [][]byte{data[:min(88, len(data))], data[min(88, len(data)):]} }
	t.Run("pending then durable", func(t *testing.T) {
		hold, held, release := holdWrites()
		s, err := OpenBlobs(t.TempDir(), BlobOptions{HoldWrite: hold, Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{0, 1, 88, 89, 3<<20 + 123} {
			data := blobData(uint64(31+size), size)
			h := wire.ContentHash(data)
			if err := s.WriteBlobHashed(ctx, h, parts(data)...); err != nil {
				t.Fatal(err)
			}
			if got := <-held; got != h {
				t.Fatalf("held %s, want %s", got, h)
			}
			if !s.Pending(h) {
				t.Fatal("not pending while its write is held")
			}
			if size > 6000 {
				readAll(t, s, h, data)
			}
			if err := s.WriteBlobHashed(ctx, h, parts(data)...); err != nil { // joins the pending one
				t.Fatal(err)
			}
			release <- struct{}{}
			if err := s.Durable(ctx, h); err != nil {
				t.Fatal(err)
			}
			if raw, err := os.ReadFile(s.Path(h)); err != nil || !bytes.Equal(raw, data) {
				t.Fatalf("%d bytes: file after the write: %v", size, err)
			}
			if size > 6000 {
				readAll(t, s, h, data)
			}
			// Again once durable: nothing new is held.
			if err := s.WriteBlobHashed(ctx, h, parts(data)...); err != nil || s.Pending(h) {
				t.Fatalf("a durable blob written again: %v, pending %v", err, s.Pending(h))
			}
		}
		close(release)
		if l := leftovers(t, s.Dir()); len(l) > 0 {
			t.Fatalf("left behind: %v", l)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		data := blobData(40, 100)
		if err := s.WriteBlobHashed(ctx, wire.ContentHash(data), data); err == nil {
			t.Fatal("a write after Close succeeded")
		}
	})
	t.Run("cap", func(t *testing.T) {
		hold, held, release := holdWrites()
		s, err := OpenBlobs(t.TempDir(), BlobOptions{HoldWrite: hold, Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { close(release); s.Close() })
		s.pendCap = 3 << 20
		a, b := blobData(41, 2<<20), blobData(42, 2<<20)
		ha, hb := wire.ContentHash(a), wire.ContentHash(b)
		if err := s.WriteBlobHashed(ctx, ha, parts(a)...); err != nil {
			t.Fatal(err)
		}
		<-held
		if err := s.WriteBlobHashed(ctx, hb, parts(b)...); err != nil {
			t.Fatal(err)
		}
		if s.Pending(hb) || s.SyncWrites() != 1 {
			t.Fatalf("over the cap: pending %v, sync writes %d", s.Pending(hb), s.SyncWrites())
		}
		if raw, err := os.ReadFile(s.Path(hb)); err != nil || !bytes.Equal(raw, b) {
			t.Fatalf("the write past the cap is not durable: %v", err)
		}
	})
	t.Run("failing", func(t *testing.T) {
		s, err := OpenBlobs(t.TempDir(), BlobOptions{Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		s.retryFirst = time.Millisecond
		full := &blobHooks{fail: map[hookPoint]error{hookSync: syscall.ENOSPC}}
		s.hooks = full
		a, b := blobData(43, 1<<20), blobData(44, 1<<20)
		if err := s.WriteBlobHashed(ctx, wire.ContentHash(a), a); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for s.WriteFailures() < 1 {
			if time.Now().After(deadline) {
				t.Fatal("no failure seen")
			}
			time.Sleep(time.Millisecond)
		}
		hb := wire.ContentHash(b)
		if err := s.WriteBlobHashed(ctx, hb, b); err == nil || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("a hashed write while another fails: %v, want ENOSPC", err)
		}
		if ok, _ := s.Has(ctx, hb); ok {
			t.Fatal("the refused blob is readable")
		}
		readAll(t, s, wire.ContentHash(a), a)
	})
	t.Run("refused", func(t *testing.T) {
		s := openTestBlobs(t, t.TempDir())
		data := blobData(45, 5000)
		h := wire.ContentHash(data)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.WriteBlobHashed(cancelled, h, data); err == nil {
			t.Fatal("a write with a cancelled context succeeded")
		}
		s.maxSize = int64(len(data)) - 1
		if err := s.WriteBlobHashed(ctx, h, data[:100], data[100:]); !errors.Is(err, ErrBlobTooLarge) {
			t.Fatalf("too large: %v", err)
		}
		if ok, _ := s.Has(ctx, h); ok || s.Pending(h) {
			t.Fatal("a refused write left something")
		}
	})
}
