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

	"github.com/tenzro/train/wire"
)

// BlobProtocol wire format (docs/protocol/gossip.md):
//
//	request:  32 bytes, the ContentHash (BLAKE3-256) of the wanted blob; then the
//	          requester closes its write side.
//	response: 1 status byte; on blobOK it is followed by the payload length
//	          as 8 big-endian bytes and the payload.
const (
	blobOK       byte = 0
	blobNotFound byte = 1
	blobBusy     byte = 2
)

// Blob fetch errors.
var (
	ErrBlobNotFound     = errors.New("peer does not have the blob")
	ErrBlobBusy         = errors.New("peer is serving too many blobs")
	ErrBlobTooLarge     = errors.New("blob larger than the limit")
	ErrBlobHashMismatch = errors.New("blob does not hash to the requested hash")
)

// blobTimeout bounds one blob stream when the caller's context has no
// deadline (and always on the serving side).
const blobTimeout = 2 * time.Minute

func (n *Node) lookupBlob(h wire.Hash) ([]byte, bool) {
	if b, ok := n.cache.get(h); ok {
		return b, true
	}
	if n.hd.Blob != nil {
		return n.hd.Blob(h)
	}
	return nil, false
}

func (n *Node) serveBlob(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(blobTimeout))
	var h wire.Hash
	if _, err := io.ReadFull(s, h[:]); err != nil {
		n.c.blobServeErrors.Add(1)
		n.log.Debug("blob request unreadable", "peer", s.Conn().RemotePeer(), "err", err)
		_ = s.Reset()
		return
	}
	select {
	case n.serveSem <- struct{}{}:
		defer func() { <-n.serveSem }()
	default:
		_, _ = s.Write([]byte{blobBusy})
		return
	}
	data, ok := n.lookupBlob(h)
	if !ok {
		_, _ = s.Write([]byte{blobNotFound})
		return
	}
	hdr := make([]byte, 9)
	hdr[0] = blobOK
	binary.BigEndian.PutUint64(hdr[1:], uint64(len(data)))
	if _, err := s.Write(hdr); err != nil {
		n.c.blobServeErrors.Add(1)
		_ = s.Reset()
		return
	}
	if _, err := s.Write(data); err != nil {
		n.c.blobServeErrors.Add(1)
		n.log.Debug("blob send failed", "peer", s.Conn().RemotePeer(), "hash", h, "err", err)
		_ = s.Reset()
		return
	}
	n.c.blobsServed.Add(1)
}

// FetchBlob fetches the payload with the given ContentHash from a peer over
// BlobProtocol. It refuses payloads above Config.MaxBlob before reading them
// and payloads that do not hash to hash.
func (n *Node) FetchBlob(ctx context.Context, peerID string, hash wire.Hash) ([]byte, error) {
	return n.fetchBlob(ctx, peerID, hash, n.maxBlob, -1)
}

// fetchBlob is FetchBlob with a limit and, when want ≥ 0, an exact size.
func (n *Node) fetchBlob(ctx context.Context, peerID string, hash wire.Hash, limit, want int64) ([]byte, error) {
	b, err := n.fetch(ctx, peerID, hash, limit, want)
	if err != nil {
		n.c.blobFetchErrors.Add(1)
		return nil, fmt.Errorf("gossip: fetch blob %s from %s: %w", hash, peerID, err)
	}
	n.c.blobsFetched.Add(1)
	return b, nil
}

func (n *Node) fetch(ctx context.Context, peerID string, hash wire.Hash, limit, want int64) ([]byte, error) {
	pid, err := peer.Decode(peerID)
	if err != nil {
		return nil, fmt.Errorf("peer id: %w", err)
	}
	s, done, err := n.openStream(ctx, pid, BlobProtocol, blobTimeout)
	if err != nil {
		return nil, err
	}
	defer done()

	if _, err := s.Write(hash[:]); err != nil {
		return nil, fmt.Errorf("send request: %w", ctxErr(ctx, err))
	}
	if err := s.CloseWrite(); err != nil {
		return nil, fmt.Errorf("send request: %w", ctxErr(ctx, err))
	}
	var hdr [9]byte
	if _, err := io.ReadFull(s, hdr[:1]); err != nil {
		return nil, fmt.Errorf("read response: %w", ctxErr(ctx, err))
	}
	switch hdr[0] {
	case blobOK:
	case blobNotFound:
		return nil, ErrBlobNotFound
	case blobBusy:
		return nil, ErrBlobBusy
	default:
		_ = s.Reset()
		return nil, fmt.Errorf("response status %d unknown", hdr[0])
	}
	if _, err := io.ReadFull(s, hdr[1:]); err != nil {
		return nil, fmt.Errorf("read response: %w", ctxErr(ctx, err))
	}
	size := binary.BigEndian.Uint64(hdr[1:])
	if size > uint64(limit) {
		_ = s.Reset()
		return nil, fmt.Errorf("peer offers %d bytes, limit %d: %w", size, limit, ErrBlobTooLarge)
	}
	if want >= 0 && size != uint64(want) {
		_ = s.Reset()
		return nil, fmt.Errorf("peer offers %d bytes, announced %d", size, want)
	}
	// Grow as bytes arrive rather than trusting the header with a large
	// allocation up front.
	var buf bytes.Buffer
	buf.Grow(int(min(size, 4<<20)))
	if _, err := io.CopyN(&buf, s, int64(size)); err != nil {
		return nil, fmt.Errorf("read payload: %w", ctxErr(ctx, err))
	}
	if wire.ContentHash(buf.Bytes()) != hash {
		return nil, ErrBlobHashMismatch
	}
	return buf.Bytes(), nil
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// blobCache keeps payloads a Forwarder announced, bounded by total bytes;
// the oldest entries go first.
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
