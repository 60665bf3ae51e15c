package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

func openTestBlobs(t *testing.T, dir string) *Blobs {
	t.Helper()
	s, err := OpenBlobs(dir, BlobOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func blobData(seed uint64, n int) []byte {
	var key [32]byte
	key[0], key[1] = byte(seed), byte(seed>>8)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(key).Read(b)
	return b
}

// leftovers lists every file under dir that is neither a blob named by its
// hash nor the lock file.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == lockName {
			return err
		}
		if _, herr := wire.ParseHash(d.Name()); herr != nil || len(d.Name()) != 64 {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkAllBlobs checks that every named blob hashes to its name.
func checkAllBlobs(t *testing.T, s *Blobs) int {
	t.Helper()
	n := 0
	err := s.Walk(context.Background(), func(h wire.Hash, size int64) error {
		b, err := s.Get(context.Background(), h)
		if err != nil {
			return err
		}
		if got := wire.ContentHash(b); got != h || int64(len(b)) != size {
			return fmt.Errorf("blob %s holds %d bytes hashing to %s", h, len(b), got)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestBlobsRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTestBlobs(t, t.TempDir())
	for _, n := range []int{0, 1, 1000, blobBuf - 1, blobBuf, blobBuf + 1, 3<<20 + 17} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			data := blobData(uint64(n), n)
			h := wire.ContentHash(data)
			if ok, err := s.Has(ctx, h); err != nil || ok {
				t.Fatalf("Has before Put = %v, %v", ok, err)
			}
			if _, err := s.Get(ctx, h); !errors.Is(err, ErrBlobNotFound) || !errors.Is(err, machine.ErrNotFound) {
				t.Fatalf("Get before Put: %v, want ErrBlobNotFound matching syncer.ErrNotFound", err)
			}
			res, err := s.PutStream(ctx, h, iotest.HalfReader(bytes.NewReader(data)), int64(n))
			if err != nil || !res.Created || res.Size != int64(n) || res.Hash != h {
				t.Fatalf("PutStream = %+v, %v", res, err)
			}
			got, err := s.Get(ctx, h)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Get: %d bytes, %v", len(got), err)
			}
			if sz, err := s.Size(ctx, h); err != nil || sz != int64(n) {
				t.Fatalf("Size = %d, %v", sz, err)
			}
			b, err := s.OpenBlob(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			m, err := b.Bytes()
			if err != nil || !bytes.Equal(m, data) {
				t.Fatalf("Bytes (mmap): %d bytes, %v", len(m), err)
			}
			if n > 10 {
				p := make([]byte, 5)
				if _, err := b.ReadAt(p, int64(n-5)); err != nil || !bytes.Equal(p, data[n-5:]) {
					t.Fatalf("ReadAt: %x, %v", p, err)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			rc, size, err := s.Open(ctx, h)
			if err != nil || size != int64(n) {
				t.Fatalf("Open = %d, %v", size, err)
			}
			all, _ := io.ReadAll(rc)
			rc.Close()
			if !bytes.Equal(all, data) {
				t.Fatal("Open: bytes differ")
			}
			fi, err := os.Stat(s.Path(h))
			if err != nil || fi.Mode().Perm()&0o222 != 0 {
				t.Fatalf("blob file %v mode %v: want read-only", err, fi.Mode())
			}
			// Again: already present, the reader is not touched.
			res, err = s.PutStream(ctx, h, iotest.ErrReader(errors.New("must not be read")), int64(n))
			if err != nil || res.Created {
				t.Fatalf("second PutStream = %+v, %v", res, err)
			}
			if err := s.Put(ctx, h, data); err != nil {
				t.Fatalf("Put of a stored blob: %v", err)
			}
		})
	}
	if l := leftovers(t, s.Dir()); len(l) > 0 {
		t.Fatalf("left behind: %v", l)
	}
}

func TestBlobsRefusals(t *testing.T) {
	ctx := context.Background()
	data := blobData(1, 1<<20+3)
	h := wire.ContentHash(data)
	boom := errors.New("connection reset")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		hash  wire.Hash
		r     io.Reader
		limit int64
		want  error
	}{
		{"hash mismatch", ctx, wire.ContentHash([]byte("other")), bytes.NewReader(data), 0, ErrBlobMismatch},
		{"one byte flipped", ctx, h, bytes.NewReader(append(append([]byte{}, data[:100]...), append([]byte{data[100] ^ 1}, data[101:]...)...)), 0, ErrBlobMismatch},
		{"truncated", ctx, h, bytes.NewReader(data[:len(data)-1]), 0, ErrBlobMismatch},
		{"one byte over the limit", ctx, h, bytes.NewReader(data), int64(len(data) - 1), ErrBlobTooLarge},
		{"far over the limit", ctx, h, bytes.NewReader(data), 1000, ErrBlobTooLarge},
		{"reader fails midway", ctx, h, io.MultiReader(bytes.NewReader(data[:500000]), iotest.ErrReader(boom)), 0, boom},
		{"context cancelled", cancelled, h, bytes.NewReader(data), 0, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTestBlobs(t, t.TempDir())
			_, err := s.PutStream(tc.ctx, tc.hash, tc.r, tc.limit)
			if !errors.Is(err, tc.want) {
				t.Fatalf("PutStream: %v, want %v", err, tc.want)
			}
			if n := checkAllBlobs(t, s); n != 0 {
				t.Fatalf("%d blobs stored after a refusal", n)
			}
			if l := leftovers(t, s.Dir()); len(l) > 0 {
				t.Fatalf("left behind: %v", l)
			}
			// Exactly at the limit is fine.
			if _, err := s.PutStream(ctx, h, bytes.NewReader(data), int64(len(data))); err != nil {
				t.Fatalf("PutStream at the limit: %v", err)
			}
		})
	}
	t.Run("Put mismatch", func(t *testing.T) {
		s := openTestBlobs(t, t.TempDir())
		if err := s.Put(ctx, h, data[1:]); !errors.Is(err, ErrBlobMismatch) {
			t.Fatalf("Put: %v", err)
		}
		if l := leftovers(t, s.Dir()); len(l) > 0 || checkAllBlobs(t, s) != 0 {
			t.Fatalf("left behind: %v", l)
		}
	})
	t.Run("store limit", func(t *testing.T) {
		s, err := OpenBlobs(t.TempDir(), BlobOptions{MaxSize: 1000, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.PutStream(ctx, h, bytes.NewReader(data), 1<<30); !errors.Is(err, ErrBlobTooLarge) {
			t.Fatalf("PutStream above the store's MaxSize: %v", err)
		}
	})
}

// TestBlobsInjectedFailures fails each step of a write in turn: the write
// reports the error, and afterwards the blob is either whole or absent and
// no temporary file is left; a retry succeeds.
func TestBlobsInjectedFailures(t *testing.T) {
	ctx := context.Background()
	data := blobData(2, 700000)
	h := wire.ContentHash(data)
	for _, tc := range []struct {
		point     hookPoint
		name      string
		keepsBlob bool // the failure comes after the rename
	}{
		{hookCreate, "create", false},
		{hookWrite, "write", false},
		{hookSync, "fsync", false},
		{hookRename, "rename", false},
		{hookSyncDir, "directory fsync", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTestBlobs(t, t.TempDir())
			injected := errors.New("injected " + tc.name + " failure")
			s.hooks = &blobHooks{fail: map[hookPoint]error{tc.point: injected}}
			_, err := s.PutStream(ctx, h, bytes.NewReader(data), 0)
			if !errors.Is(err, injected) {
				t.Fatalf("PutStream: %v, want the injected failure", err)
			}
			has, _ := s.Has(ctx, h)
			if has != tc.keepsBlob {
				t.Fatalf("blob present = %v after a %s failure", has, tc.name)
			}
			checkAllBlobs(t, s)
			if l := leftovers(t, s.Dir()); len(l) > 0 {
				t.Fatalf("left behind: %v", l)
			}
			s.hooks = nil
			if _, err := s.PutStream(ctx, h, bytes.NewReader(data), 0); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if got, err := s.Get(ctx, h); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("after retry: %v", err)
			}
		})
	}
}

func TestBlobsConcurrentSameHash(t *testing.T) {
	ctx := context.Background()
	s := openTestBlobs(t, t.TempDir())
	data := blobData(3, 2<<20)
	h := wire.ContentHash(data)
	var created atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			var r io.Reader = bytes.NewReader(data)
			if i%2 == 0 {
				r = iotest.OneByteReader(io.LimitReader(bytes.NewReader(data), 1000))
				r = io.MultiReader(r, bytes.NewReader(data[1000:]))
			}
			res, err := s.PutStream(ctx, h, r, 0)
			if err != nil {
				t.Errorf("writer %d: %v", i, err)
				return
			}
			if res.Created {
				created.Add(1)
			}
			// Every reader sees the whole blob at every moment.
			if got, err := s.Get(ctx, h); err != nil || !bytes.Equal(got, data) {
				t.Errorf("writer %d reads back %d bytes, %v", i, len(got), err)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	if created.Load() != 1 {
		t.Fatalf("%d writers report creating the blob, want 1", created.Load())
	}
	if l := leftovers(t, s.Dir()); len(l) > 0 {
		t.Fatalf("left behind: %v", l)
	}
}

// TestBlobsResume writes a blob in pieces with one writer, as a fetch that
// resumes after a broken stream does.
func TestBlobsResume(t *testing.T) {
	ctx := context.Background()
	s := openTestBlobs(t, t.TempDir())
	data := blobData(4, 1<<20)
	h := wire.ContentHash(data)
	w, err := s.Create(h, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	cut := errors.New("stream reset")
	n, err := w.ReadFrom(io.MultiReader(bytes.NewReader(data[:300001]), iotest.ErrReader(cut)))
	if !errors.Is(err, cut) || n != 300001 || w.Written() != 300001 {
		t.Fatalf("first part: %d, %v", n, err)
	}
	if _, err := w.ReadFrom(bytes.NewReader(data[w.Written():])); err != nil {
		t.Fatal(err)
	}
	if created, err := w.Commit(ctx); err != nil || !created {
		t.Fatalf("Commit = %v, %v", created, err)
	}
	if _, err := w.Write([]byte{1}); !errors.Is(err, ErrBlobWriterDone) {
		t.Fatalf("Write after Commit: %v", err)
	}
	if got, _ := s.Get(ctx, h); !bytes.Equal(got, data) {
		t.Fatal("resumed blob differs")
	}
}

func TestBlobsOpenCleansAndLocks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := OpenBlobs(dir, BlobOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBlobs(dir, BlobOptions{Logger: slog.New(slog.DiscardHandler)}); err == nil {
		t.Fatal("a second OpenBlobs of one directory succeeded")
	}
	data := []byte("kept")
	h := wire.ContentHash(data)
	if err := s.Put(ctx, h, data); err != nil {
		t.Fatal(err)
	}
	// An interrupted write: a temporary file that was never renamed.
	w, err := s.Create(wire.ContentHash([]byte("lost")), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("lo"))
	tmp := w.tmp
	w.f.Close()
	s.Close()
	if _, err := os.Stat(tmp); err != nil {
		t.Fatal(err)
	}
	s = openTestBlobs(t, dir)
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file survived OpenBlobs: %v", err)
	}
	if got, err := s.Get(ctx, h); err != nil || string(got) != "kept" {
		t.Fatalf("blob after reopen: %q, %v", got, err)
	}
	if err := s.Delete(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, h); err != nil {
		t.Fatalf("Delete of an absent blob: %v", err)
	}
	if ok, _ := s.Has(ctx, h); ok {
		t.Fatal("blob survived Delete")
	}
}

func TestBlobsMapSurvivesDelete(t *testing.T) {
	ctx := context.Background()
	s := openTestBlobs(t, t.TempDir())
	data := blobData(5, 100000)
	h := wire.ContentHash(data)
	if err := s.Put(ctx, h, data); err != nil {
		t.Fatal(err)
	}
	m, release, err := s.Map(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, h); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m, data) {
		t.Fatal("mapping changed after Delete")
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if strings.Count(s.Path(h), string(filepath.Separator)) < 2 {
		t.Fatal("path is not <dir>/<2 hex>/<64 hex>")
	}
}

func BenchmarkBlobsPutStream33MB(b *testing.B) {
	data := blobData(6, 33<<20)
	h := wire.ContentHash(data)
	s, err := OpenBlobs(b.TempDir(), BlobOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := s.PutStream(ctx, h, bytes.NewReader(data), 0); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		_ = s.Delete(ctx, h)
		b.StartTimer()
	}
}

// TestBlobWriterLargeWrites: a Write of several hashing pieces (hashed on
// another goroutine while the next piece is written) names the blob by the
// content hash of exactly its bytes, alone, after small writes, and at
// sizes around a piece; a write that fails leaves the writer's hash at the
// bytes written and keeps nothing.
func TestBlobWriterLargeWrites(t *testing.T) {
	ctx := context.Background()
	s := openTestBlobs(t, t.TempDir())
	for i, sizes := range [][]int{
		{2 * hashPiece},
		{2*hashPiece - 1},
		{2*hashPiece + 1},
		{5*hashPiece + 12345},
		{7, 3*hashPiece + 1, 100, 2 * hashPiece},
	} {
		var all []byte
		h, err := s.WriteBlob(ctx, 0, func(w io.Writer) error {
			for j, n := range sizes {
				b := blobData(uint64(100*i+j), n)
				all = append(all, b...)
				if m, err := w.Write(b); err != nil || m != n {
					return fmt.Errorf("wrote %d of %d: %v", m, n, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := wire.ContentHash(all); h != want {
			t.Fatalf("sizes %v: blob named %s, its bytes hash to %s", sizes, h, want)
		}
		got, err := s.Get(ctx, h)
		if err != nil || !bytes.Equal(got, all) {
			t.Fatalf("sizes %v: stored bytes differ (%v)", sizes, err)
		}
	}
	// A failing write: the file is closed under the writer.
	w, err := s.Create(wire.Hash{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	head := blobData(7, 1000)
	if _, err := w.Write(head); err != nil {
		t.Fatal(err)
	}
	_ = w.f.Close()
	if n, err := w.Write(blobData(8, 3*hashPiece)); err == nil || n != 0 {
		t.Fatalf("write to a closed file: %d, %v", n, err)
	}
	if w.Written() != int64(len(head)) || w.Sum() != wire.ContentHash(head) {
		t.Fatalf("after a failed write: %d bytes, hash %s", w.Written(), w.Sum())
	}
	w.f = nil
	w.Abort()
	if left := leftovers(t, s.Dir()); len(left) != 0 {
		t.Fatalf("a failed write left %v", left)
	}
}

// TestReadFromWritesWholePieces: however small the reads of the source (a
// network body), ReadFrom hands the file whole blobBuf pieces, each at a
// multiple of blobBuf (so the page cache keeps the file in large folios),
// but the last; the blob is exactly the bytes.
func TestReadFromWritesWholePieces(t *testing.T) {
	for _, size := range []int{0, 1, blobBuf - 1, blobBuf, blobBuf + 1, 3*blobBuf + 12345} {
		s := openTestBlobs(t, t.TempDir())
		hooks := &blobHooks{}
		s.hooks = hooks
		data := blobData(uint64(size)+3, size)
		h := wire.ContentHash(data)
		w, err := s.Create(h, int64(size))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.ReadFrom(iotest.HalfReader(iotest.OneByteReader(bytes.NewReader(data)))); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i, n := range hooks.writes {
			if last := i == len(hooks.writes)-1; n != blobBuf && !(last && n == size%blobBuf) {
				t.Fatalf("%d bytes: write %d of %d bytes (all: %v), want %d (the last %d)", size, i, n, hooks.writes, blobBuf, size%blobBuf)
			}
		}
		if got, err := s.Get(context.Background(), h); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: stored %v", size, err)
		}
	}
	// A source cut short says so (io.ErrUnexpectedEOF, as an HTTP body
	// does), not a clean end.
	s := openTestBlobs(t, t.TempDir())
	data := blobData(9, blobBuf+100)
	w, err := s.Create(wire.ContentHash(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	cut := io.MultiReader(bytes.NewReader(data[:blobBuf+10]), iotest.ErrReader(io.ErrUnexpectedEOF))
	if n, err := w.ReadFrom(cut); !errors.Is(err, io.ErrUnexpectedEOF) || n != blobBuf+10 {
		t.Fatalf("a cut source: %d bytes, %v; want %d and io.ErrUnexpectedEOF", n, err, blobBuf+10)
	}
}
