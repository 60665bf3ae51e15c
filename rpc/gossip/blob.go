package gossip

import (
	"bytes"
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire"
)

// BlobProtocol wire format (docs/protocol/gossip.md, "Blob stream"):
//
//	request:  48 bytes: the blob's ContentHash (32), offset (8, big-endian),
//	          limit (8, big-endian); then the requester closes its write side.
//	          Anything else is refused.
//	response: 1 status byte; on blobOK it is followed by the blob's total
//	          size (8, big-endian) and min(limit, size − offset) bytes of the
//	          blob from offset.
//
// A fetch that breaks asks again from the first byte it does not have, from
// the same peer or another one, and checks the hash over the whole blob at
// the end.
const (
	blobOK         byte = 0
	blobNotFound   byte = 1
	blobBusy       byte = 2
	blobBadRequest byte = 3
)

// BlobRequestSize is the exact length of a blob stream request.
const BlobRequestSize = 48

// Blob fetch errors.
var (
	ErrBlobNotFound     = errors.New("peer does not have the blob")
	ErrBlobBusy         = errors.New("peer is serving too many blobs")
	ErrBlobTooLarge     = errors.New("blob larger than the limit")
	ErrBlobHashMismatch = errors.New("blob does not hash to the requested hash")
	ErrBlobBadRequest   = errors.New("peer refused the request (offset past the end, or malformed)")
	// ErrNoBlobStore: the node was configured without Config.Blobs.
	ErrNoBlobStore = errors.New("gossip node has no blob store")
)

// blobTimeout bounds one blob stream when the caller's context has no
// deadline (and always on the serving side). A transfer cut by it resumes.
const blobTimeout = 2 * time.Minute

// Bounds on streams served at once: blob streams in total and per
// requesting peer, and the small control protocols (nonce, chain info),
// which have slots of their own so that blob streams never starve them
// (issue 22, finding 8).
const (
	maxConcurrentServes = 16
	maxServesPerPeer    = 2
	maxControlServes    = 16
)

// Idle deadlines of a served blob stream: the 48-byte request must arrive
// within requestTimeout, and while the answer is sent every write must make
// progress within streamIdle. A reader that stops reading holds its slot
// for streamIdle, not blobTimeout.
const (
	requestTimeout = 10 * time.Second
	streamIdle     = 15 * time.Second
)

// maxFetchAttempts bounds the streams one FetchBlobTo opens in all.
const maxFetchAttempts = 16

// BlobRequest asks for the bytes of the blob Hash from Offset, at most Limit
// of them (0: none; the response then only says the blob's size).
type BlobRequest struct {
	Hash   wire.Hash
	Offset uint64
	Limit  uint64
}

// Marshal renders the request's fixed 48-byte layout.
func (r BlobRequest) Marshal() []byte {
	b := make([]byte, 0, BlobRequestSize)
	b = append(b, r.Hash[:]...)
	b = binary.BigEndian.AppendUint64(b, r.Offset)
	return binary.BigEndian.AppendUint64(b, r.Limit)
}

// ParseBlobRequest parses exactly one request: 48 bytes, no more, no less.
func ParseBlobRequest(b []byte) (BlobRequest, error) {
	var r BlobRequest
	if len(b) != BlobRequestSize {
		return r, fmt.Errorf("blob request of %d bytes, want exactly %d (hash, offset, limit)", len(b), BlobRequestSize)
	}
	copy(r.Hash[:], b[:32])
	r.Offset = binary.BigEndian.Uint64(b[32:40])
	r.Limit = binary.BigEndian.Uint64(b[40:48])
	if r.Offset > 1<<62 || r.Limit > 1<<62 {
		return r, fmt.Errorf("blob request offset %d / limit %d out of range", r.Offset, r.Limit)
	}
	return r, nil
}

// BlobStore is the node's blob store (store.Blobs): served from, fetched into.
type BlobStore interface {
	OpenBlob(ctx context.Context, h wire.Hash) (*store.Blob, error)
	Create(h wire.Hash, limit int64) (*store.BlobWriter, error)
	Size(ctx context.Context, h wire.Hash) (int64, error)
	Get(ctx context.Context, h wire.Hash) ([]byte, error)
	Put(ctx context.Context, h wire.Hash, b []byte) error
}

// blobSource is a blob being served.
type blobSource interface {
	io.ReaderAt
	Size() int64
	Close() error
}

type memBlob struct{ *bytes.Reader }

func (memBlob) Close() error { return nil }

// openBlob finds a blob to serve: the blob store, then the Forwarder's
// cache, then Handlers.Blob.
func (n *Node) openBlob(ctx context.Context, h wire.Hash) (blobSource, bool) {
	if n.blobs != nil {
		if b, err := n.blobs.OpenBlob(ctx, h); err == nil {
			return b, true
		}
	}
	if b, ok := n.cache.get(h); ok {
		return memBlob{bytes.NewReader(b)}, true
	}
	if n.hd.Blob != nil {
		if b, ok := n.hd.Blob(h); ok {
			return memBlob{bytes.NewReader(b)}, true
		}
	}
	return nil, false
}

// servePeer takes one of the requesting peer's serve slots.
func (n *Node) servePeer(p peer.ID) (release func(), ok bool) {
	n.servingMu.Lock()
	defer n.servingMu.Unlock()
	if n.serving[p] >= maxServesPerPeer {
		return nil, false
	}
	n.serving[p]++
	return func() {
		n.servingMu.Lock()
		if n.serving[p]--; n.serving[p] == 0 {
			delete(n.serving, p)
		}
		n.servingMu.Unlock()
	}, true
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

func (n *Node) serveBlob(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(min(requestTimeout, n.idle)))
	from := s.Conn().RemotePeer()
	raw, err := io.ReadAll(io.LimitReader(s, BlobRequestSize+1))
	if err != nil {
		n.c.blobServeErrors.Add(1)
		n.log.Debug("blob request unreadable", "peer", from, "err", err)
		_ = s.Reset()
		return
	}
	req, err := ParseBlobRequest(raw)
	if err != nil {
		n.c.blobServeErrors.Add(1)
		n.log.Debug("blob request refused", "peer", from, "err", err)
		_, _ = s.Write([]byte{blobBadRequest})
		return
	}
	select {
	case n.serveSem <- struct{}{}:
		defer func() { <-n.serveSem }()
	default:
		_, _ = s.Write([]byte{blobBusy})
		return
	}
	release, ok := n.servePeer(from)
	if !ok {
		_, _ = s.Write([]byte{blobBusy})
		return
	}
	defer release()
	src, ok := n.openBlob(n.ctx, req.Hash)
	if !ok {
		_, _ = s.Write([]byte{blobNotFound})
		return
	}
	defer src.Close()
	size := uint64(src.Size())
	if req.Offset > size {
		_, _ = s.Write([]byte{blobBadRequest})
		return
	}
	count := min(req.Limit, size-req.Offset)
	var hdr [9]byte
	hdr[0] = blobOK
	binary.BigEndian.PutUint64(hdr[1:], size)
	end := time.Now().Add(blobTimeout)
	_ = s.SetReadDeadline(end)
	out := &idleWriter{s: s, idle: n.idle, end: end}
	if _, err := out.Write(hdr[:]); err != nil {
		n.c.blobServeErrors.Add(1)
		_ = s.Reset()
		return
	}
	var body io.Reader = io.NewSectionReader(src, int64(req.Offset), int64(count))
	if cut := n.cutServeAfter.Swap(0); cut > 0 && uint64(cut) < count {
		// Test hook: the stream breaks after cut bytes.
		body = io.LimitReader(body, cut)
		defer func() { _ = s.Reset() }()
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	sent, err := io.CopyBuffer(out, body, *bp)
	n.c.blobBytesServed.Add(uint64(sent))
	if err != nil {
		n.c.blobServeErrors.Add(1)
		n.log.Debug("blob send failed", "peer", from, "hash", req.Hash, "err", err)
		_ = s.Reset()
		return
	}
	n.c.blobsServed.Add(1)
}

// idleWriter writes to a served stream in pieces, each with a deadline of
// idle from its start (never past end): a reader that stops reading is cut
// after idle. It hides the stream's ReadFrom so io.CopyBuffer uses its
// buffer.
type idleWriter struct {
	s    network.Stream
	idle time.Duration
	end  time.Time
}

// idleChunk is the most one deadline covers: at the slowest rate a reader
// keeps its slot with (idleChunk per idle, ≈ 4 KiB/s at 15 s).
const idleChunk = 64 << 10

func (w *idleWriter) Write(p []byte) (int, error) {
	var n int
	for len(p) > 0 {
		k := min(len(p), idleChunk)
		dl := time.Now().Add(w.idle)
		if dl.After(w.end) {
			dl = w.end
		}
		_ = w.s.SetWriteDeadline(dl)
		m, err := w.s.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// FetchBlob fetches the blob with the given ContentHash from a peer into
// memory. It refuses blobs above Config.MaxBlob before reading them and
// blobs that do not hash to hash. Large blobs should go to the blob store
// with FetchBlobTo.
func (n *Node) FetchBlob(ctx context.Context, peerID string, hash wire.Hash) ([]byte, error) {
	return n.fetchBlob(ctx, peerID, hash, n.maxBlob, -1)
}

// fetchBlob is FetchBlob with a limit and, when want ≥ 0, an exact size.
func (n *Node) fetchBlob(ctx context.Context, peerID string, hash wire.Hash, limit, want int64) ([]byte, error) {
	var buf bytes.Buffer
	sink := &memSink{buf: &buf, limit: limit}
	_, _, err := n.fetchRange(ctx, peerID, hash, sink, limit, want, -1)
	if err == nil && wire.ContentHash(buf.Bytes()) != hash {
		err = ErrBlobHashMismatch
	}
	if err != nil {
		n.c.blobFetchErrors.Add(1)
		return nil, fmt.Errorf("gossip: fetch blob %s from %s: %w", hash, peerID, err)
	}
	n.c.blobsFetched.Add(1)
	n.blobIn(int64(buf.Len()))
	return buf.Bytes(), nil
}

// blobSink receives a blob's bytes in order.
type blobSink interface {
	io.Writer
	Written() int64
}

type memSink struct {
	buf   *bytes.Buffer
	limit int64
}

func (m *memSink) Write(p []byte) (int, error) {
	if int64(m.buf.Len()+len(p)) > m.limit {
		return 0, ErrBlobTooLarge
	}
	return m.buf.Write(p)
}
func (m *memSink) Written() int64 { return int64(m.buf.Len()) }

// fetchRange asks peerID for the bytes of hash from dst.Written() and
// copies them into dst as they arrive. It returns the blob's total size as
// the peer states it and how many bytes it added. knownTotal ≥ 0 is a size
// stated before (by this peer or another): a peer that states another is
// refused. want ≥ 0 is the exact size the caller expects.
func (n *Node) fetchRange(ctx context.Context, peerID string, hash wire.Hash, dst blobSink, limit, want, knownTotal int64) (total, added int64, err error) {
	pid, err := peer.Decode(peerID)
	if err != nil {
		return -1, 0, fmt.Errorf("peer id: %w", err)
	}
	s, done, err := n.openStream(ctx, pid, BlobProtocol, blobTimeout)
	if err != nil {
		return -1, 0, err
	}
	defer done()
	off := dst.Written()
	req := BlobRequest{Hash: hash, Offset: uint64(off), Limit: uint64(max(limit-off, 0))}
	if _, err := s.Write(req.Marshal()); err != nil {
		return -1, 0, fmt.Errorf("send request: %w", ctxErr(ctx, err))
	}
	if err := s.CloseWrite(); err != nil {
		return -1, 0, fmt.Errorf("send request: %w", ctxErr(ctx, err))
	}
	var hdr [9]byte
	if _, err := io.ReadFull(s, hdr[:1]); err != nil {
		return -1, 0, fmt.Errorf("read response: %w", ctxErr(ctx, err))
	}
	switch hdr[0] {
	case blobOK:
	case blobNotFound:
		return -1, 0, ErrBlobNotFound
	case blobBusy:
		return -1, 0, ErrBlobBusy
	case blobBadRequest:
		return -1, 0, ErrBlobBadRequest
	default:
		_ = s.Reset()
		return -1, 0, fmt.Errorf("response status %d unknown", hdr[0])
	}
	if _, err := io.ReadFull(s, hdr[1:]); err != nil {
		return -1, 0, fmt.Errorf("read response: %w", ctxErr(ctx, err))
	}
	size := binary.BigEndian.Uint64(hdr[1:])
	switch {
	case size > uint64(limit):
		_ = s.Reset()
		return -1, 0, fmt.Errorf("peer offers %d bytes, limit %d: %w", size, limit, ErrBlobTooLarge)
	case want >= 0 && size != uint64(want):
		_ = s.Reset()
		return -1, 0, fmt.Errorf("peer offers %d bytes, announced %d", size, want)
	case knownTotal >= 0 && size != uint64(knownTotal):
		_ = s.Reset()
		return -1, 0, fmt.Errorf("peer offers %d bytes, another said %d", size, knownTotal)
	case uint64(off) > size:
		_ = s.Reset()
		return -1, 0, ErrBlobBadRequest
	}
	total = int64(size)
	if m, ok := dst.(*memSink); ok {
		// The size is within the caller's limit: hold it in one buffer
		// of exactly that size instead of growing one by doubling.
		m.buf.Grow(int(total - off))
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	added, err = io.CopyBuffer(dst, io.LimitReader(s, total-off), *bp)
	if err == nil && off+added < total {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return total, added, fmt.Errorf("read blob at byte %d of %d: %w", off+added, total, ctxErr(ctx, err))
	}
	return total, added, nil
}

// FetchBlobTo fetches the blob hash, at most limit bytes (the caller's cap,
// e.g. a record's payload_size), into the node's blob store, trying peers in
// order. Bytes go to the store as they arrive (no whole-blob buffer). A
// stream that breaks is resumed from the first missing byte, from the same
// peer while it makes progress, else from the next; the hash is checked
// over the whole blob at the end and a blob that fails it is not kept. A
// blob already stored is not fetched. It returns the blob's size.
func (n *Node) FetchBlobTo(ctx context.Context, hash wire.Hash, limit int64, peers ...string) (int64, error) {
	if n.blobs == nil {
		return 0, ErrNoBlobStore
	}
	if sz, err := n.blobs.Size(ctx, hash); err == nil {
		return sz, nil
	}
	size, err := n.fetchTo(ctx, hash, limit, peers)
	if err != nil {
		n.c.blobFetchErrors.Add(1)
		return 0, fmt.Errorf("gossip: fetch blob %s: %w", hash, err)
	}
	n.c.blobsFetched.Add(1)
	n.blobIn(size)
	return size, nil
}

func (n *Node) fetchTo(ctx context.Context, hash wire.Hash, limit int64, peers []string) (int64, error) {
	if len(peers) == 0 {
		return 0, errors.New("no peer to fetch from")
	}
	w, err := n.blobs.Create(hash, limit)
	if err != nil {
		return 0, err
	}
	committed := false
	defer func() {
		if !committed {
			w.Abort()
		}
	}()
	total := int64(-1)
	var errs []error
	for i, attempts := 0, 0; i < len(peers) && attempts < maxFetchAttempts; attempts++ {
		t, added, err := n.fetchRange(ctx, peers[i], hash, w, limit, -1, total)
		if t >= 0 {
			total = t
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil || errors.Is(err, store.ErrBlobTooLarge) || errors.Is(err, ErrBlobTooLarge) {
			return 0, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", peers[i], err))
		if added > 0 {
			// The stream broke after some progress: ask again from the
			// first missing byte, first of the same peer.
			n.c.blobResumes.Add(1)
			n.log.Debug("blob stream broke; resuming", "hash", hash, "peer", peers[i], "at", w.Written(), "of", total, "err", err)
			continue
		}
		i++
		if i < len(peers) && w.Written() > 0 {
			n.c.blobResumes.Add(1)
		}
	}
	if total < 0 || w.Written() != total {
		return 0, fmt.Errorf("%d of %d bytes after trying %d peer(s): %w", w.Written(), max(total, 0), len(peers), errors.Join(errs...))
	}
	if _, err := w.Commit(ctx); err != nil {
		committed = true // Commit removed what it wrote
		if errors.Is(err, store.ErrBlobMismatch) {
			return 0, fmt.Errorf("%w: %v", ErrBlobHashMismatch, err)
		}
		return 0, err
	}
	committed = true
	return total, nil
}

// Fetch fetches the blob h, at most maxSize bytes (a record's
// payload_size), into the blob store and returns its bytes: the peers the
// provider hint names first (ProviderHint's form, dialled from the
// addresses in it, or a bare peer id), then every connected peer. It is the
// syncer's PayloadFetcher.
func (n *Node) Fetch(ctx context.Context, h wire.Hash, maxSize uint64, provider string) ([]byte, error) {
	if n.blobs == nil {
		return nil, ErrNoBlobStore
	}
	if _, err := n.FetchFromAny(ctx, h, int64(min(maxSize, 1<<62)), provider); err != nil {
		return nil, err
	}
	return n.blobs.Get(ctx, h)
}

// FetchFromAny is FetchBlobTo from the peers the provider hint names (when
// not empty) and then every connected peer.
func (n *Node) FetchFromAny(ctx context.Context, h wire.Hash, limit int64, provider string) (int64, error) {
	peers := n.ResolveProvider(provider)
	seen := map[string]bool{n.PeerID(): true}
	for _, p := range peers {
		seen[p] = true
	}
	for _, p := range n.ConnectedPeerIDs() {
		if !seen[p] {
			seen[p] = true
			peers = append(peers, p)
		}
	}
	return n.FetchBlobTo(ctx, h, limit, peers...)
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// blobCache keeps blobs a Forwarder announced on a node without a blob
// store (and small evidence blobs), bounded by total bytes; the oldest
// entries go first.
type blobCache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	order *list.List // of wire.Hash, oldest first
	items map[wire.Hash]*cacheEntry
}

type cacheEntry struct {
	data []byte
	el   *list.Element
}

func newBlobCache(max int64) *blobCache {
	return &blobCache{max: max, order: list.New(), items: map[wire.Hash]*cacheEntry{}}
}

func (c *blobCache) put(h wire.Hash, data []byte) error {
	if int64(len(data)) > c.max {
		return fmt.Errorf("blob of %d bytes does not fit the %d-byte cache: %w", len(data), c.max, ErrBlobTooLarge)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[h]; ok {
		c.order.MoveToBack(e.el)
		return nil
	}
	c.items[h] = &cacheEntry{data: data, el: c.order.PushBack(h)}
	c.size += int64(len(data))
	for c.size > c.max {
		old := c.order.Remove(c.order.Front()).(wire.Hash)
		c.size -= int64(len(c.items[old].data))
		delete(c.items, old)
	}
	return nil
}

func (c *blobCache) get(h wire.Hash) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[h]
	if !ok {
		return nil, false
	}
	return e.data, true
}

// openStream opens a request stream of proto to pid whose deadline is ctx's
// (or timeout from now) and which is reset when ctx ends; done closes it.
func (n *Node) openStream(ctx context.Context, pid peer.ID, proto string, timeout time.Duration) (network.Stream, func(), error) {
	s, err := n.h.NewStream(ctx, pid, protocol.ID(proto))
	if err != nil {
		return nil, nil, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(timeout)
	}
	_ = s.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	return s, func() { stop(); _ = s.Close() }, nil
}

func (n *Node) blobIn(size int64) {
	if n.onBlobIn != nil {
		n.onBlobIn(size)
	}
}
