package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenzro/train/wire"
)

// ErrBlobStoreFull: the write would take the store past its disk cap
// (SetCap). Nothing was written.
var ErrBlobStoreFull = errors.New("blob store full")

// SetCap bounds the bytes the store holds (0: no bound). A write reserves
// its limit when it starts (Create) and is refused with ErrBlobStoreFull
// when the bytes named plus those reserved would pass the cap; blobs
// already stored are kept.
func (s *Blobs) SetCap(n int64) {
	s.capMu.Lock()
	s.cap = max(n, 0)
	s.capMu.Unlock()
}

// BlobUsage is the store's disk accounting.
type BlobUsage struct {
	Bytes, Blobs, Reserved, Cap int64
}

// Usage returns the bytes and blobs stored, the bytes reserved by writes
// in progress and the cap.
func (s *Blobs) Usage() BlobUsage {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	return BlobUsage{Bytes: s.used, Blobs: s.count, Reserved: s.reserved, Cap: s.cap}
}

func (s *Blobs) reserve(h wire.Hash, n int64) error {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	if s.cap > 0 && s.used+s.reserved+n > s.cap {
		return fmt.Errorf("blob %s: %d more bytes would pass the store's cap of %d (%d stored, %d being written): %w",
			h, n, s.cap, s.used, s.reserved, ErrBlobStoreFull)
	}
	s.reserved += n
	return nil
}

func (s *Blobs) unreserve(n int64) {
	s.capMu.Lock()
	s.reserved -= n
	s.capMu.Unlock()
}

func (s *Blobs) account(bytes, blobs int64) {
	s.capMu.Lock()
	s.used += bytes
	s.count += blobs
	s.capMu.Unlock()
}

// release returns the writer's reservation.
func (w *BlobWriter) release() {
	if w.held > 0 {
		w.s.unreserve(w.held)
		w.held = 0
	}
}

// Upload ledger. A blob stored by an upload that no record references yet
// has a marker <dir>/uploads/<64 hex> holding the uploader's DID and the
// run it named; its modification time is the upload's. The node's
// collector (cmd/tenzro-node) deletes the blobs whose marker outlived the
// TTL while still unreferenced, and drops the marker of a blob a record
// took up. Markers survive restarts, so quotas and collection do too.
const uploadsDir = "uploads"

// maxMarker bounds a marker file.
const maxMarker = 512

func (s *Blobs) uploadPath(h wire.Hash) string {
	return filepath.Join(s.dir, uploadsDir, h.String())
}

// Upload is one entry of the upload ledger.
type Upload struct {
	Hash wire.Hash
	DID  string
	Task string
	Size int64
	At   time.Time
}

// MarkUpload records that did uploaded the blob h (for the run task).
// Marking a blob again keeps the first uploader and time.
func (s *Blobs) MarkUpload(h wire.Hash, did, task string) error {
	if strings.ContainsAny(did, "\n") || strings.ContainsAny(task, "\n") || len(did)+len(task)+1 > maxMarker {
		return fmt.Errorf("blob store: mark upload %s: malformed uploader", h)
	}
	f, err := os.OpenFile(s.uploadPath(h), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("blob store: mark upload %s: %w", h, err)
	}
	_, err = f.WriteString(did + "\n" + task)
	if err == nil && !s.noSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(s.uploadPath(h))
		return fmt.Errorf("blob store: mark upload %s: %w", h, err)
	}
	return nil
}

// Unmark drops the upload marker of h (the blob is kept).
func (s *Blobs) Unmark(h wire.Hash) error {
	if err := os.Remove(s.uploadPath(h)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob store: unmark %s: %w", h, err)
	}
	return nil
}

// Uploads calls fn for every marked upload whose blob is stored; markers
// whose blob is gone (or malformed ones) are removed.
func (s *Blobs) Uploads(ctx context.Context, fn func(Upload) error) error {
	ents, err := os.ReadDir(filepath.Join(s.dir, uploadsDir))
	if err != nil {
		return fmt.Errorf("blob store: uploads: %w", err)
	}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := filepath.Join(s.dir, uploadsDir, e.Name())
		h, err := wire.ParseHash(e.Name())
		if err != nil || len(e.Name()) != 64 {
			_ = os.Remove(p)
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		b, err := os.ReadFile(p)
		did, task, ok := strings.Cut(string(b), "\n")
		size, serr := s.Size(ctx, h)
		if err != nil || !ok || len(b) > maxMarker || serr != nil {
			_ = os.Remove(p)
			continue
		}
		if err := fn(Upload{Hash: h, DID: did, Task: task, Size: size, At: fi.ModTime()}); err != nil {
			return err
		}
	}
	return nil
}
