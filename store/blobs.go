package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// Blobs is the node's content-addressed file store for bulk bytes held off
// chain: submission payloads, initial weights files, fragment weights,
// evidence. A blob lives in
//
//	<dir>/<first 2 hex digits of its hash>/<64 hex digits>
//
// where the hash is wire.ContentHash (BLAKE3-256) of the file's bytes. A
// write goes to a temporary file in the same directory while a
// wire.ContentHasher hashes the same bytes and the size limit is enforced
// as they arrive; then the file is fsynced, renamed to its final name and
// the directory fsynced. So after a crash at any instant a blob is either
// whole under its name or absent; temporary files a crash leaves behind are
// removed by OpenBlobs. A blob whose bytes do not hash to the expected hash
// is refused and nothing of it is kept.
//
// Blobs are immutable once named: readers (Open, OpenBlob, Blob.Bytes's
// mmap) never see a file change under them. Concurrent writers of one hash
// each write their own temporary file; the rename makes one of them the
// blob, with the same bytes either way. Blobs is safe for concurrent use.
type Blobs struct {
	dir     string
	maxSize int64
	noSync  bool
	log     *slog.Logger
	lock    *os.File
	hooks   *blobHooks // failure injection (tests)

	commitMu sync.Mutex // stat+rename of one commit, so Created is exact

	// Disk accounting (blobcap.go): bytes and blobs named, bytes reserved
	// by writes in progress, and the cap (0: none).
	capMu    sync.Mutex
	used     int64
	count    int64
	reserved int64
	cap      int64

	// Deferred writes (pending.go): blobs hashed and held in memory while
	// their durable write runs.
	pendMu        sync.Mutex
	pending       map[wire.Hash]*pendingBlob
	lost          map[wire.Hash]error // deferred writes given up at Close
	free          [][]byte            // buffers of ended deferred writes (takeBuf)
	pendWG        sync.WaitGroup
	closing       bool
	closed        chan struct{}
	writeFailures int64
	syncWrites    int64 // deferred writes written before returning (holdRefusal)
	heldWrites    int64 // blobs HoldBlobHashed took without copying
	pendCap       int64 // bytes deferred writes may hold in memory (maxPendingBytes)
	retryFirst    time.Duration
	holdWrite     func(wire.Hash)
}

// BlobOptions tune a blob store. The zero value is usable.
type BlobOptions struct {
	// MaxSize bounds one blob (default MaxValueSize, 1 GiB). Writers may
	// pass a lower limit per write.
	MaxSize int64
	// Logger receives the store's messages (slog.Default() when nil).
	Logger *slog.Logger
	// NoSync skips fsync (tests and benchmarks of other parts only: a
	// crash may then lose or truncate blobs).
	NoSync bool
	// HoldWrite, when set, is called on a deferred write's goroutine
	// (WriteBlobAfter) before the write starts, and may block it: the
	// crash tests' window between a commit and its durable write. Close
	// waits for held writes. Tests only.
	HoldWrite func(h wire.Hash)
}

// Blob store errors. Each is wrapped with context; test with errors.Is.
var (
	// ErrBlobNotFound: no blob with that hash. It matches
	// syncer.ErrNotFound too.
	ErrBlobNotFound = fmt.Errorf("blob %w", machine.ErrNotFound)
	// ErrBlobMismatch: the bytes written do not hash to the expected hash.
	ErrBlobMismatch = errors.New("blob bytes do not hash to the expected hash")
	// ErrBlobTooLarge: more bytes than the limit were offered.
	ErrBlobTooLarge = errors.New("blob larger than the limit")
	// ErrBlobWriterDone: a BlobWriter was used after Commit or Abort.
	ErrBlobWriterDone = errors.New("blob writer already committed or aborted")
)

// tmpPrefix starts every temporary file's name. Final names are 64 hex
// digits, so a temporary file can never be mistaken for a blob.
const tmpPrefix = ".tmp-"

// lockName is the file OpenBlobs locks so that two processes never share a
// blob directory (the second one's start-up cleanup would delete the first
// one's temporary files).
const lockName = "LOCK"

// OpenBlobs opens the blob store in dir, creating it when absent. It removes
// the temporary files an interrupted write left behind and fails when
// another process holds the directory.
func OpenBlobs(dir string, opts BlobOptions) (*Blobs, error) {
	if opts.MaxSize <= 0 {
		opts.MaxSize = MaxValueSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Blobs{dir: dir, maxSize: opts.MaxSize, noSync: opts.NoSync, log: opts.Logger, closed: make(chan struct{}), retryFirst: retryFirst, pendCap: maxPendingBytes,
		holdWrite: opts.HoldWrite}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open blob store %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open blob store %s: %w", dir, err)
	}
	if err := lockDir(lock); err != nil {
		lock.Close()
		return nil, fmt.Errorf("open blob store %s: locked by another process: %w", dir, err)
	}
	s.lock = lock
	removed := 0
	for i := 0; i < 256; i++ {
		sub := filepath.Join(dir, fmt.Sprintf("%02x", i))
		if err := os.Mkdir(sub, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			s.Close()
			return nil, fmt.Errorf("open blob store %s: %w", dir, err)
		}
		ents, err := os.ReadDir(sub)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("open blob store %s: %w", dir, err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), tmpPrefix) {
				if err := os.Remove(filepath.Join(sub, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					s.Close()
					return nil, fmt.Errorf("open blob store %s: remove interrupted write: %w", dir, err)
				}
				removed++
			}
		}
		if removed > 0 {
			if err := s.syncDir(sub); err != nil {
				s.Close()
				return nil, fmt.Errorf("open blob store %s: %w", dir, err)
			}
		}
	}
	// The 256 subdirectories exist durably before any blob is renamed into
	// one of them.
	if err := s.syncDir(dir); err != nil {
		s.Close()
		return nil, fmt.Errorf("open blob store %s: %w", dir, err)
	}
	if removed > 0 {
		s.log.Info("blob store: removed temporary files of interrupted writes", "dir", dir, "files", removed)
	}
	if err := s.Walk(context.Background(), func(_ wire.Hash, size int64) error {
		s.used += size
		s.count++
		return nil
	}); err != nil {
		s.Close()
		return nil, fmt.Errorf("open blob store %s: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, uploadsDir), 0o755); err != nil {
		s.Close()
		return nil, fmt.Errorf("open blob store %s: %w", dir, err)
	}
	return s, nil
}

// Close waits for the deferred writes (WriteBlobAfter; one that keeps
// failing gets a last attempt) and releases the directory lock. Open blobs
// stay readable.
func (s *Blobs) Close() error {
	s.flushPending()
	if s.lock == nil {
		return nil
	}
	err := s.lock.Close()
	s.lock = nil
	return err
}

// Dir is the store's directory.
func (s *Blobs) Dir() string { return s.dir }

// MaxSize is the largest blob the store accepts.
func (s *Blobs) MaxSize() int64 { return s.maxSize }

// Path is the file that holds (or would hold) the blob h. The file is
// read-only by contract: never write or truncate it.
func (s *Blobs) Path(h wire.Hash) string {
	x := hex.EncodeToString(h[:])
	return filepath.Join(s.dir, x[:2], x)
}

// Has reports whether the blob h is stored (pending included).
func (s *Blobs) Has(ctx context.Context, h wire.Hash) (bool, error) {
	_, err := s.Size(ctx, h)
	if errors.Is(err, ErrBlobNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Size returns the size of the blob h, or ErrBlobNotFound.
func (s *Blobs) Size(ctx context.Context, h wire.Hash) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if p := s.pendingOf(h); p != nil {
		return int64(len(p.b)), nil
	}
	fi, err := os.Stat(s.Path(h))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%w: %s", ErrBlobNotFound, h)
	}
	if err != nil {
		return 0, fmt.Errorf("blob store: stat %s: %w", h, err)
	}
	return fi.Size(), nil
}

// Get returns a copy of the blob's bytes, or ErrBlobNotFound.
func (s *Blobs) Get(ctx context.Context, h wire.Hash) ([]byte, error) {
	b, err := s.OpenBlob(ctx, h)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	out := make([]byte, b.Size())
	if _, err := b.ReadAt(out, 0); err != nil && !(errors.Is(err, io.EOF) && len(out) == 0) {
		return nil, fmt.Errorf("blob store: read %s: %w", h, err)
	}
	return out, nil
}

// Put stores b under h. The bytes are hashed as they are written: a b that
// does not hash to h is refused with ErrBlobMismatch and nothing is kept.
// It is durable when it returns nil; storing a blob that is already there
// is a no-op.
func (s *Blobs) Put(ctx context.Context, h wire.Hash, b []byte) error {
	if ok, err := s.Has(ctx, h); err != nil || ok {
		return err
	}
	w, err := s.Create(h, int64(len(b)))
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		w.Abort()
		return err
	}
	_, err = w.Commit(ctx)
	return err
}

// WriteBlob stores the bytes write produces, whose hash is not known
// before they are written (a syncer's new weights): they are hashed as
// they are written, once, and the blob is named by that hash, synced like
// Put. At most limit bytes (≤ 0: MaxSize). An error from write or the
// store keeps nothing.
func (s *Blobs) WriteBlob(ctx context.Context, limit int64, write func(io.Writer) error) (wire.Hash, error) {
	w, err := s.Create(wire.Hash{}, limit)
	if err != nil {
		return wire.Hash{}, err
	}
	if err := write(w); err != nil {
		w.Abort()
		return wire.Hash{}, err
	}
	w.h = w.hasher.Sum()
	w.final = s.Path(w.h) // the temporary file moves across fan-out directories of one store
	if _, err := w.Commit(ctx); err != nil {
		return wire.Hash{}, err
	}
	return w.h, nil
}

// PutResult says what PutStream did.
type PutResult struct {
	// Size is the blob's size.
	Size int64
	// Created is false when the blob was already stored (by an earlier
	// write or a concurrent one); r was then not read at all when it was
	// there before the call.
	Created bool
	// Hash is the hash the bytes were found to have (h itself on success).
	Hash wire.Hash
}

// PutStream stores the bytes r yields under h, hashing them as they are
// written, in O(buffer) memory. It refuses with ErrBlobTooLarge as soon as
// more than limit bytes arrive (limit ≤ 0: the store's MaxSize), and with
// ErrBlobMismatch when the bytes do not hash to h; nothing is kept then. A
// blob already stored is not read again (Created false).
func (s *Blobs) PutStream(ctx context.Context, h wire.Hash, r io.Reader, limit int64) (PutResult, error) {
	if n, err := s.Size(ctx, h); err == nil {
		return PutResult{Size: n, Hash: h}, nil
	} else if !errors.Is(err, ErrBlobNotFound) {
		return PutResult{}, err
	}
	w, err := s.Create(h, limit)
	if err != nil {
		return PutResult{}, err
	}
	if _, err := w.ReadFrom(ctxReader{ctx, r}); err != nil {
		w.Abort()
		return PutResult{Size: w.Written()}, err
	}
	created, err := w.Commit(ctx)
	return PutResult{Size: w.Written(), Created: created, Hash: w.Sum()}, err
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Delete removes the blob h (absent is not an error), once its deferred
// write, if any, has ended. Readers that have it open keep reading the old
// file.
func (s *Blobs) Delete(ctx context.Context, h wire.Hash) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Durable(ctx, h); err != nil && ctx.Err() != nil {
		return err
	}
	p := s.Path(h)
	_ = os.Remove(s.uploadPath(h))
	s.commitMu.Lock()
	fi, serr := os.Lstat(p)
	err := os.Remove(p)
	s.commitMu.Unlock()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("blob store: delete %s: %w", h, err)
	}
	if serr == nil {
		s.account(-fi.Size(), -1)
	}
	return s.syncDir(filepath.Dir(p))
}

// Walk calls fn with the hash and size of every stored blob, in hash order.
// An error from fn stops the walk and is returned.
func (s *Blobs) Walk(ctx context.Context, fn func(h wire.Hash, size int64) error) error {
	for i := 0; i < 256; i++ {
		ents, err := os.ReadDir(filepath.Join(s.dir, fmt.Sprintf("%02x", i)))
		if err != nil {
			return fmt.Errorf("blob store: walk: %w", err)
		}
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return err
			}
			h, err := wire.ParseHash(e.Name())
			if err != nil || len(e.Name()) != 64 {
				continue
			}
			fi, err := e.Info()
			if err != nil {
				continue // deleted meanwhile
			}
			if err := fn(h, fi.Size()); err != nil {
				return err
			}
		}
	}
	return nil
}

// Open returns the blob h as a stream with its size (a *Blob, which also
// reads at offsets and maps). The caller closes it.
func (s *Blobs) Open(ctx context.Context, h wire.Hash) (io.ReadCloser, int64, error) {
	b, err := s.OpenBlob(ctx, h)
	if err != nil {
		return nil, 0, err
	}
	return b, b.Size(), nil
}

// OpenBlob opens the blob h read-only, or fails with ErrBlobNotFound. A
// pending blob (WriteBlobAfter) is read from memory: the Blob then has no
// file (Name "", File nil).
func (s *Blobs) OpenBlob(ctx context.Context, h wire.Hash) (*Blob, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if b := s.openPending(h); b != nil {
		return b, nil
	}
	f, err := os.Open(s.Path(h))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrBlobNotFound, h)
	}
	if err != nil {
		return nil, fmt.Errorf("blob store: open %s: %w", h, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("blob store: open %s: %w", h, err)
	}
	return &Blob{f: f, size: fi.Size(), hash: h}, nil
}

// Map returns the blob's bytes mapped read-only into memory, and the
// function that unmaps them; the slice must not be used after it. Pages are
// read from the file as they are touched and belong to the page cache, not
// the process's heap.
func (s *Blobs) Map(ctx context.Context, h wire.Hash) ([]byte, func() error, error) {
	b, err := s.OpenBlob(ctx, h)
	if err != nil {
		return nil, nil, err
	}
	data, err := b.Bytes()
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return data, b.Close, nil
}

// Blob is an open, immutable blob: read sequentially (Read, Seek), at
// offsets (ReadAt) or mapped (Bytes). A pending blob's is read from its
// bytes in memory.
type Blob struct {
	f     *os.File
	mem   *bytes.Reader // a pending blob: f is nil
	memb  []byte
	unref func() // lets go of a pending blob's bytes
	size  int64
	hash  wire.Hash

	mu sync.Mutex
	mm []byte
}

// Size is the blob's length in bytes.
func (b *Blob) Size() int64 { return b.size }

// Hash is the blob's content hash.
func (b *Blob) Hash() wire.Hash { return b.hash }

// Name is the blob's file path ("" for a pending blob, read from memory).
func (b *Blob) Name() string {
	if b.mem != nil {
		return ""
	}
	return b.f.Name()
}

// File is the underlying read-only file (nil for a pending blob).
func (b *Blob) File() *os.File { return b.f }

// Read reads from the current offset (the blob starts at 0).
func (b *Blob) Read(p []byte) (int, error) {
	if b.mem != nil {
		return b.mem.Read(p)
	}
	return b.f.Read(p)
}

// ReadAt reads len(p) bytes at off.
func (b *Blob) ReadAt(p []byte, off int64) (int, error) {
	if b.mem != nil {
		return b.mem.ReadAt(p, off)
	}
	return b.f.ReadAt(p, off)
}

// Seek sets the offset of the next Read.
func (b *Blob) Seek(off int64, whence int) (int64, error) {
	if b.mem != nil {
		return b.mem.Seek(off, whence)
	}
	return b.f.Seek(off, whence)
}

// Bytes maps the blob read-only and returns its bytes, valid until Close.
// Repeated calls return the same mapping.
func (b *Blob) Bytes() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mem != nil {
		return b.memb, nil
	}
	if b.mm != nil || b.size == 0 {
		if b.mm == nil {
			return []byte{}, nil
		}
		return b.mm, nil
	}
	mm, err := mmapFile(b.f, b.size)
	if err != nil {
		return nil, fmt.Errorf("blob store: map %s: %w", b.hash, err)
	}
	b.mm = mm
	return mm, nil
}

// Close unmaps and closes the blob.
func (b *Blob) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mem != nil {
		b.mem, b.memb = nil, nil
		b.unref()
		return nil
	}
	var err error
	if b.mm != nil {
		err = unmap(b.mm)
		b.mm = nil
	}
	if b.f != nil {
		err = errors.Join(err, b.f.Close())
		b.f = nil
	}
	return err
}

// Create starts writing the blob h: a BlobWriter that accepts at most limit
// bytes (limit ≤ 0 or above MaxSize: MaxSize). Bytes go to a temporary file
// and through a content hasher; Commit names the blob, Abort removes
// everything. A BlobWriter kept after a broken transfer resumes where it
// stopped (Written says how far).
func (s *Blobs) Create(h wire.Hash, limit int64) (*BlobWriter, error) {
	if limit <= 0 || limit > s.maxSize {
		limit = s.maxSize
	}
	if err := s.hooks.err(hookCreate); err != nil {
		return nil, fmt.Errorf("blob store: create %s: %w", h, err)
	}
	if err := s.reserve(h, limit); err != nil {
		return nil, err
	}
	final := s.Path(h)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(final), tmpPrefix+filepath.Base(final)+"-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		s.unreserve(limit)
		return nil, fmt.Errorf("blob store: create %s: %w", h, err)
	}
	return &BlobWriter{s: s, h: h, f: f, tmp: tmp, final: final, limit: limit, held: limit, hasher: wire.NewContentHasher()}, nil
}

// BlobWriter writes one blob (see Create). It is not safe for concurrent use.
type BlobWriter struct {
	s     *Blobs
	h     wire.Hash
	f     *os.File
	tmp   string
	final string
	limit int64
	n     int64
	// flushed is how far write-back has been started.
	flushed int64
	hasher  *wire.ContentHasher
	err     error // sticky write error
	done    bool
	// held is the disk reservation this write still holds.
	held int64
	// trusted: the bytes were hashed before (a deferred write of bytes
	// held in memory); they are written without a second hash.
	trusted bool
}

// Write appends p. It refuses (writing nothing of p) when p would take the
// blob past its limit.
func (w *BlobWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, ErrBlobWriterDone
	}
	if w.err != nil {
		return 0, w.err
	}
	if int64(len(p)) > w.limit-w.n {
		w.err = fmt.Errorf("blob %s: more than %d bytes: %w", w.h, w.limit, ErrBlobTooLarge)
		return 0, w.err
	}
	if err := w.s.hooks.err(hookWrite); err != nil {
		w.err = fmt.Errorf("blob store: write %s: %w", w.h, err)
		return 0, w.err
	}
	if h := w.s.hooks; h != nil {
		h.mu.Lock()
		h.writes = append(h.writes, len(p))
		h.mu.Unlock()
	}
	if w.trusted {
		n, err := w.f.Write(p)
		return n, w.wrote(n, err)
	}
	if len(p) < 2*hashPiece {
		n, err := w.f.Write(p)
		w.hasher.Write(p[:n])
		return n, w.wrote(n, err)
	}
	// A large write (a syncer's new weights, written from memory): its
	// pieces are hashed on another goroutine as soon as each is written,
	// so the hash of one piece overlaps the write of the next. The hasher
	// still sees exactly the bytes written, in order.
	pieces := make(chan []byte, 2)
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		for b := range pieces {
			w.hasher.Write(b)
		}
	}()
	total := 0
	var err error
	for len(p) > 0 && err == nil {
		q := p[:min(hashPiece, len(p))]
		var n int
		n, err = w.f.Write(q)
		if n > 0 {
			pieces <- q[:n]
		}
		total += n
		err = w.wrote(n, err)
		p = p[len(q):]
	}
	close(pieces)
	<-hashed
	return total, err
}

// hashPiece is the piece of a large Write that is hashed while the next
// one is written.
const hashPiece = 4 << 20

// wrote accounts for n bytes written (and hashed, or being hashed) and
// starts their write-back; a write error becomes the writer's sticky
// error.
func (w *BlobWriter) wrote(n int, err error) error {
	w.n += int64(n)
	if err != nil {
		w.err = fmt.Errorf("blob store: write %s: %w", w.h, err)
		return w.err
	}
	if !w.s.noSync && w.n-w.flushed >= writeBehind {
		// Start writing back what has arrived so far without waiting for
		// it, so the disk works while the rest arrives and Commit's fsync
		// waits only for the tail.
		startWriteBack(w.f, w.flushed, w.n-w.flushed)
		w.flushed = w.n
	}
	return nil
}

// writeBehind is how many written bytes a BlobWriter lets accumulate before
// it starts their write-back.
const writeBehind = 4 << 20

// blobBuf is the copy buffer of ReadFrom, filled before it is hashed and
// written: each write to the file is a whole, aligned 2 MiB (but the last),
// so the page cache holds the file in 2 MiB folios and a reader that maps
// it (the plugin worker, mapping a round's inputs at the commit) maps it
// with one fault per 2 MiB instead of one per 64 KiB. Written in 256 KiB
// pieces (the size of a network read), a K=6 commit's 8 mapped files took
// 2.1–2.9k page faults and 3–27 ms of the worker's system time, and the
// sweep ran on 4 KiB pages (bench/results/finalize.md).
const blobBuf = 2 << 20

var blobBufs = sync.Pool{New: func() any { b := make([]byte, blobBuf); return &b }}

// pipeDepth is how many read buffers ReadFrom lets the reading goroutine
// run ahead of hashing and writing (with the one being read and the one
// being written: at most pipeDepth+2 buffers per write).
const pipeDepth = 1

type readChunk struct {
	buf *[]byte
	n   int
	err error
}

// ReadFrom copies r into the blob until EOF, in O(pipeDepth·blobBuf)
// memory: one goroutine reads r while this one hashes and writes what was
// read before, so a network transfer, the hash and the disk overlap. It
// stops with ErrBlobTooLarge as soon as r yields more than the limit allows.
// It returns once the reading goroutine has finished, except when the
// write fails while r blocks: that goroutine then drops what it reads.
func (w *BlobWriter) ReadFrom(r io.Reader) (int64, error) {
	full := make(chan readChunk, pipeDepth)
	stop := make(chan struct{})
	go func() {
		defer close(full)
		for {
			bp := blobBufs.Get().(*[]byte)
			// Fill the buffer; r's own error (io.EOF, or a body cut short:
			// io.ErrUnexpectedEOF) comes with the last piece unchanged.
			var n int
			var err error
			for n < len(*bp) && err == nil {
				var k int
				k, err = r.Read((*bp)[n:])
				n += k
			}
			select {
			case full <- readChunk{bp, n, err}:
			case <-stop:
				blobBufs.Put(bp)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var total int64
	for c := range full {
		var werr error
		if c.n > 0 {
			var m int
			m, werr = w.Write((*c.buf)[:c.n])
			total += int64(m)
		}
		blobBufs.Put(c.buf)
		switch {
		case werr != nil:
			close(stop)
			go func() { // return the buffers already read
				for c := range full {
					blobBufs.Put(c.buf)
				}
			}()
			return total, werr
		case c.err == io.EOF:
			return total, nil
		case c.err != nil:
			return total, c.err
		}
	}
	return total, nil
}

// Written is the number of bytes written so far.
func (w *BlobWriter) Written() int64 { return w.n }

// Hash is the hash the blob is expected to have.
func (w *BlobWriter) Hash() wire.Hash { return w.h }

// Sum is the content hash of the bytes written so far.
func (w *BlobWriter) Sum() wire.Hash { return w.hasher.Sum() }

// Commit checks the bytes' hash, syncs the file, names it and syncs the
// directory. created is false when the blob was already stored (the bytes
// just written were identical and are dropped). On a mismatch it fails with
// ErrBlobMismatch; on any failure nothing is kept.
func (w *BlobWriter) Commit(ctx context.Context) (created bool, err error) {
	if w.done {
		return false, ErrBlobWriterDone
	}
	defer func() {
		if err != nil {
			w.Abort()
		}
	}()
	if w.err != nil {
		return false, w.err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if got := w.hasher.Sum(); !w.trusted && got != w.h {
		return false, fmt.Errorf("blob of %d bytes hashes to %s, expected %s: %w", w.n, got, w.h, ErrBlobMismatch)
	}
	if err := w.s.hooks.err(hookSync); err != nil {
		return false, fmt.Errorf("blob store: sync %s: %w", w.h, err)
	}
	if !w.s.noSync {
		if err := w.f.Sync(); err != nil {
			return false, fmt.Errorf("blob store: sync %s: %w", w.h, err)
		}
	}
	if err := w.f.Close(); err != nil {
		return false, fmt.Errorf("blob store: close %s: %w", w.h, err)
	}
	w.f = nil
	if err := w.s.hooks.err(hookRename); err != nil {
		return false, fmt.Errorf("blob store: rename %s: %w", w.h, err)
	}
	w.s.commitMu.Lock()
	_, serr := os.Lstat(w.final)
	if serr == nil {
		w.s.commitMu.Unlock()
		w.done = true
		w.release()
		_ = os.Remove(w.tmp) // identical bytes are already named
		return false, nil
	}
	rerr := os.Rename(w.tmp, w.final)
	if rerr == nil {
		w.s.account(w.n, 1)
	}
	w.s.commitMu.Unlock()
	if rerr != nil {
		return false, fmt.Errorf("blob store: rename %s: %w", w.h, rerr)
	}
	w.done = true
	w.release()
	if err := w.s.hooks.err(hookSyncDir); err != nil {
		// The blob is named but its name may not survive a crash; the
		// bytes are right either way, so keep it and report the failure.
		return true, fmt.Errorf("blob store: sync directory of %s: %w", w.h, err)
	}
	if err := w.s.syncDir(filepath.Dir(w.final)); err != nil {
		return true, fmt.Errorf("blob store: sync directory of %s: %w", w.h, err)
	}
	return true, nil
}

// Abort drops the write and removes its temporary file. It is a no-op
// after Commit.
func (w *BlobWriter) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.release()
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
	}
	_ = os.Remove(w.tmp)
}

func (s *Blobs) syncDir(dir string) error {
	if s.noSync {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// Failure injection for tests: each hook point can be made to fail.
type hookPoint int

const (
	hookCreate hookPoint = iota
	hookWrite
	hookSync
	hookRename
	hookSyncDir
)

type blobHooks struct {
	mu   sync.Mutex
	fail map[hookPoint]error
	// writes records the size of each Write a BlobWriter is given.
	writes []int
}

func (h *blobHooks) err(p hookPoint) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fail[p]
}
