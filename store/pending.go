package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/tenzro/train/wire"
)

// Blobs written after (docs/RATIONALE.md, "The new state is written after
// the commit"): a syncer's new weights and momentum are a deterministic
// function of durable things (the inputs and the previous state), so the
// commit that names them need not wait for their fsync. WriteBlobAfter
// copies the bytes into memory while it hashes them, once, and returns
// their hash; the durable write (temporary file, fsync, rename, directory
// fsync: the same invariant as every blob) runs on another goroutine.
// Until it ends the blob is pending: Has, Size, Get, Open, OpenBlob and Map
// answer from the bytes in memory, which are the hashed bytes and never
// change; Durable waits for the file. A write that fails is retried with
// a growing delay while the bytes stay served from memory; a node that
// dies first re-derives the blob at its restart (syncer.Node.RestoreState).

// pendingBlob is a blob whose bytes are hashed and held in memory while
// their durable write runs.
type pendingBlob struct {
	b    []byte
	done chan struct{} // closed when the write ended: durable, or given up at Close
	err  error         // the write's last failure (set before done closes)
	// refs counts the readers holding b (OpenBlob, Map) and ended says
	// the write is over (both under Blobs.pendMu): b goes back to the
	// free list once both allow.
	refs  int
	ended bool
	// release, when set, gives b back to its owner (HoldBlobHashed)
	// instead of the free list.
	release func()
}

// freeBufs is how many buffers of ended deferred writes the store keeps
// for the next ones (a syncer's weights and momentum: the next commit's
// are the same sizes), so that their pages are not faulted in and zeroed
// again on the commit's critical path.
const freeBufs = 4

// takeBuf returns a buffer of size bytes: a kept one that fits (its cap at
// most 1/8 larger), else a new one. Its bytes are arbitrary.
func (s *Blobs) takeBuf(size int64) []byte {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	best := -1
	for i, b := range s.free {
		c := int64(cap(b))
		if c >= size && c <= size+size/8 && (best < 0 || c < int64(cap(s.free[best]))) {
			best = i
		}
	}
	if best < 0 {
		return make([]byte, size)
	}
	b := s.free[best][:size]
	s.free = append(s.free[:best], s.free[best+1:]...)
	return b
}

// putBuf keeps b for a later deferred write (dropped when the list is
// full). Called with pendMu held.
func (s *Blobs) putBuf(b []byte) {
	if len(s.free) < freeBufs && cap(b) > 0 {
		s.free = append(s.free, b[:0])
	}
}

// letGo gives p's bytes back, once the store no longer needs them: to
// the free list, or (a held blob) the owner's release, which it returns
// for the caller to run once pendMu is unlocked. Called with pendMu held.
func (s *Blobs) letGo(p *pendingBlob) (release func()) {
	if p.release == nil {
		s.putBuf(p.b)
		return nil
	}
	release, p.release = p.release, nil
	return release
}

// ref takes a reader's hold on p's bytes; the returned function lets go
// (once).
func (s *Blobs) ref(p *pendingBlob) func() {
	p.refs++ // pendMu held by the caller
	var once sync.Once
	return func() {
		once.Do(func() {
			var release func()
			s.pendMu.Lock()
			p.refs--
			if p.refs == 0 && p.ended {
				release = s.letGo(p)
			}
			s.pendMu.Unlock()
			if release != nil {
				release()
			}
		})
	}
}

// Retry delays of a failed deferred write.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 30 * time.Second
)

// memPiece is how much of a WriteBlobAfter write is copied before it is
// hashed: small enough that the hasher reads the copy from the cache.
const memPiece = 256 << 10

// memWriter copies what is written into b and hashes the copy.
type memWriter struct {
	b []byte
	n int
	h *wire.ContentHasher
}

func (w *memWriter) Write(p []byte) (int, error) {
	if len(p) > len(w.b)-w.n {
		return 0, fmt.Errorf("blob of %d bytes announced, more written: %w", len(w.b), ErrBlobTooLarge)
	}
	total := len(p)
	for len(p) > 0 {
		k := min(len(p), memPiece)
		dst := w.b[w.n : w.n+k]
		copy(dst, p[:k])
		w.h.Write(dst)
		w.n += k
		p = p[k:]
	}
	return total, nil
}

// deferrable refuses a deferred write of size bytes the store may not take
// (past its MaxSize) or whose ctx has ended.
func (s *Blobs) deferrable(ctx context.Context, size int64) error {
	if size < 0 || size > s.maxSize {
		return fmt.Errorf("blob store: deferred write of %d bytes (limit %d): %w", size, s.maxSize, ErrBlobTooLarge)
	}
	return ctx.Err()
}

// WriteBlobAfter stores the size bytes write produces, whose hash is not
// known before they are written (a syncer's new weights and momentum). The
// bytes are copied into memory and hashed as they arrive — each once — and
// the blob is readable under the returned hash as soon as this returns;
// its durable write completes later (Durable waits for it). Writing other
// than size bytes, or more than the store's MaxSize, keeps nothing.
func (s *Blobs) WriteBlobAfter(ctx context.Context, size int64, write func(io.Writer) error) (wire.Hash, error) {
	if err := s.deferrable(ctx, size); err != nil {
		return wire.Hash{}, err
	}
	mw := &memWriter{b: s.takeBuf(size), h: wire.NewContentHasher()}
	if err := write(mw); err != nil {
		s.dropBuf(mw.b)
		return wire.Hash{}, err
	}
	if int64(mw.n) != size {
		s.dropBuf(mw.b)
		return wire.Hash{}, fmt.Errorf("blob store: deferred write: %d bytes written of the %d announced", mw.n, size)
	}
	return s.hold(mw.h.Sum(), mw.b, nil)
}

// WriteBlobHashed is WriteBlobAfter for bytes whose hash the caller
// computed as it produced them (the engine's new weights and momentum,
// hashed inside the finalize's sweep: syncer.StateHashes): the blob is
// the concatenation of parts, h must be its content hash, and the store
// copies the parts into memory without reading them again to hash them.
// The rest is WriteBlobAfter's: readable under h at once, durable later.
// The store trusts h; a caller that cannot vouch for it uses
// WriteBlobAfter.
func (s *Blobs) WriteBlobHashed(ctx context.Context, h wire.Hash, parts ...[]byte) error {
	var size int64
	for _, p := range parts {
		size += int64(len(p))
	}
	if err := s.deferrable(ctx, size); err != nil {
		return err
	}
	if s.Pending(h) {
		return nil // the same bytes are on their way (nothing to copy)
	}
	b := s.takeBuf(size)
	off := 0
	for _, p := range parts {
		off += copy(b[off:], p)
	}
	_, err := s.hold(h, b, nil)
	return err
}

// HoldBlobHashed is WriteBlobHashed for bytes the caller hands over
// instead of having them copied (the new state in a plugin worker's
// arena, syncer.FinalizeInput.Hold): b becomes the pending blob h as it
// is, so it must not change until release is called. The store calls
// release exactly once, whatever this returns, as soon as it no longer
// needs b: the durable write ended and no reader holds b; at once when h
// is pending or stored already, or when b is refused (too large, ctx
// ended, the store closing); after the synchronous write when holding it
// is refused (holdRefusal). The store trusts h, as WriteBlobHashed does.
func (s *Blobs) HoldBlobHashed(ctx context.Context, h wire.Hash, b []byte, release func()) error {
	if release == nil {
		release = func() {}
	}
	if err := s.deferrable(ctx, int64(len(b))); err != nil {
		release()
		return err
	}
	s.pendMu.Lock()
	s.heldWrites++
	s.pendMu.Unlock()
	_, err := s.hold(h, b, release)
	return err
}

// hold makes b, hashed to h, the pending blob h (or drops it when h is
// pending or stored already) and starts its durable write; past the
// memory bound it writes b durably before returning. b is the store's
// (from takeBuf: back to the free list when done) when release is nil,
// its caller's otherwise (release gives it back: HoldBlobHashed).
func (s *Blobs) hold(h wire.Hash, b []byte, release func()) (wire.Hash, error) {
	h, kept, err := s.holdOrWrite(h, b, release)
	if !kept {
		if release != nil {
			release()
		} else {
			s.dropBuf(b)
		}
	}
	return h, err
}

// holdOrWrite is hold but for giving b back when it is not kept (kept:
// b became the pending blob h and is given back when its write ends).
func (s *Blobs) holdOrWrite(h wire.Hash, b []byte, release func()) (_ wire.Hash, kept bool, _ error) {
	size := int64(len(b))
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	if s.closing {
		return wire.Hash{}, false, fmt.Errorf("blob store: deferred write of %s after Close", h)
	}
	if _, ok := s.pending[h]; ok {
		return h, false, nil // the same bytes are on their way
	}
	if _, err := os.Stat(s.Path(h)); err == nil {
		return h, false, nil // already durable (the same state again)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return wire.Hash{}, false, fmt.Errorf("blob store: stat %s: %w", h, err)
	}
	if why := s.holdRefusal(size); why != "" {
		// Memory is bounded: the blob is written durably before this
		// returns, as WriteBlob does, and a failure fails the caller.
		s.syncWrites++
		s.pendMu.Unlock()
		err := s.writeTrusted(h, b)
		s.pendMu.Lock()
		if err != nil {
			return wire.Hash{}, false, fmt.Errorf("blob store: %s, so %s was written before returning, and that failed: %w", why, h, err)
		}
		return h, false, nil
	}
	p := &pendingBlob{b: b, done: make(chan struct{}), release: release}
	if s.pending == nil {
		s.pending = map[wire.Hash]*pendingBlob{}
	}
	s.pending[h] = p
	s.pendWG.Add(1)
	go s.persist(h, p)
	return h, true, nil
}

// maxPendingBytes bounds the bytes deferred writes hold in memory
// (Blobs.pendCap): past it, a deferred write is written before it returns.
const maxPendingBytes = 2 << 30

// holdRefusal says why a deferred write of size bytes must not be held in
// memory ("" when it may; s.pendMu held): a pending write is failing (the
// disk is full or broken: holding more state would only grow memory, so
// the caller learns of the failure now), or the held bytes would pass
// pendCap.
func (s *Blobs) holdRefusal(size int64) string {
	var held int64
	for h, p := range s.pending {
		if p.err != nil {
			return fmt.Sprintf("the deferred write of %s is failing (%v)", h, p.err)
		}
		held += int64(len(p.b))
	}
	if held+size > s.pendCap {
		return fmt.Sprintf("deferred writes hold %d bytes in memory and %d more would pass the cap of %d", held, size, s.pendCap)
	}
	return ""
}

// HeldWrites counts the blobs HoldBlobHashed took without copying them
// (whether they were then held, written at once or found stored).
func (s *Blobs) HeldWrites() int64 {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	return s.heldWrites
}

// SyncWrites counts the deferred writes written before they returned
// because holding them was refused (holdRefusal).
func (s *Blobs) SyncWrites() int64 {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	return s.syncWrites
}

// persist writes a pending blob durably, retrying after failures (the
// bytes stay served from memory meanwhile) until it succeeds or the store
// closes; then the blob stops being pending.
func (s *Blobs) persist(h wire.Hash, p *pendingBlob) {
	defer s.pendWG.Done()
	if s.holdWrite != nil {
		s.holdWrite(h)
	}
	start := time.Now()
	delay := s.retryFirst
	var err error
	for attempt := 1; ; attempt++ {
		if err = s.writeTrusted(h, p.b); err == nil {
			if attempt > 1 {
				s.log.Info("blob store: deferred write succeeded after failures", "hash", h, "attempts", attempt)
			}
			s.log.Debug("blob store: deferred write durable", "hash", h, "bytes", len(p.b), "after", time.Since(start))
			break
		}
		s.pendMu.Lock()
		p.err, s.writeFailures = err, s.writeFailures+1
		closing := s.closing
		s.pendMu.Unlock()
		if closing {
			s.log.Error("blob store: deferred write failed at close; the blob is lost here and re-derived at the next start", "hash", h, "attempts", attempt, "err", err)
			break
		}
		s.log.Warn("blob store: deferred write failed; the bytes stay served from memory, retrying", "hash", h, "attempt", attempt, "retry_in", delay, "err", err)
		select {
		case <-time.After(delay):
		case <-s.closed:
		}
		delay = min(2*delay, retryMax)
	}
	s.pendMu.Lock()
	if err == nil {
		p.err = nil
	} else {
		if s.lost == nil {
			s.lost = map[wire.Hash]error{}
		}
		s.lost[h] = err
	}
	delete(s.pending, h)
	p.ended = true
	var release func()
	if p.refs == 0 && (err == nil || p.release != nil) {
		release = s.letGo(p)
	}
	s.pendMu.Unlock()
	if release != nil {
		release() // before done: Durable's return says it ran
	}
	close(p.done)
}

// dropBuf returns a buffer no one saw to the free list.
func (s *Blobs) dropBuf(b []byte) {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	s.putBuf(b)
}

// openPending opens the pending blob h for reading (nil: not pending): the
// Blob holds its bytes until Close.
func (s *Blobs) openPending(h wire.Hash) *Blob {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	p := s.pending[h]
	if p == nil {
		return nil
	}
	return &Blob{mem: bytes.NewReader(p.b), memb: p.b, size: int64(len(p.b)), hash: h, unref: s.ref(p)}
}

// writeTrusted writes b, already hashed to h, as the blob h: temporary
// file, fsync, rename, directory fsync, without hashing it again.
func (s *Blobs) writeTrusted(h wire.Hash, b []byte) error {
	w, err := s.Create(h, int64(len(b)))
	if err != nil {
		return err
	}
	w.trusted = true
	if _, err := w.Write(b); err != nil {
		w.Abort()
		return err
	}
	_, err = w.Commit(context.Background())
	return err
}

// pendingOf returns the pending blob h (nil: not pending). Readers look
// here before the file: a blob stops being pending only once its file is
// named, so one of the two always answers.
func (s *Blobs) pendingOf(h wire.Hash) *pendingBlob {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	return s.pending[h]
}

// Durable waits until the blob h is durable under its name: at once when
// it is not pending. It fails when ctx ends first, or when the deferred
// write was given up (the store closed while it was failing).
func (s *Blobs) Durable(ctx context.Context, h wire.Hash) error {
	s.pendMu.Lock()
	p, lost := s.pending[h], s.lost[h]
	s.pendMu.Unlock()
	if lost != nil {
		return fmt.Errorf("blob store: write of %s given up at close: %w", h, lost)
	}
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("blob store: waiting for the write of %s: %w", h, ctx.Err())
	}
	if p.err != nil {
		return fmt.Errorf("blob store: write of %s: %w", h, p.err)
	}
	return nil
}

// Pending says whether the blob h is held in memory, its durable write
// not finished.
func (s *Blobs) Pending(h wire.Hash) bool { return s.pendingOf(h) != nil }

// WriteFailures counts the deferred writes' failed attempts since the
// store opened.
func (s *Blobs) WriteFailures() int64 {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	return s.writeFailures
}

// flushPending makes Close wait for the deferred writes: each finishes, or
// (when it keeps failing) makes one last attempt and is given up.
func (s *Blobs) flushPending() {
	s.pendMu.Lock()
	if !s.closing {
		s.closing = true
		close(s.closed)
	}
	s.pendMu.Unlock()
	s.pendWG.Wait()
}
