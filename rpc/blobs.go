package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Blobs over HTTP (docs/PROTOCOL.md, "Blobs over HTTP"): bulk bytes travel
// raw on the RPC port instead of base64 inside JSON.
//
//	PUT  /blobs/<64 hex>   upload; the body is written to the blob store
//	                       while it is hashed, in O(buffer) memory
//	GET  /blobs/<64 hex>   download (Range, If-None-Match); HEAD: size only
//
// A PUT answers 201 when it stored the blob, 200 when the blob was already
// there, 400 for a malformed hash, 413 as soon as the body passes the cap
// (before reading when Content-Length says so), 422 when the bytes do not
// hash to the hash in the path (nothing is kept), 408 for a body slower
// than the minimum rate, 503 when no upload slot freed in time. Error
// bodies are JSON-RPC error objects (id null) like the rest of the port.

// BlobAuthorizer decides who may upload (docs/protocol/blobs.md): the node
// wires it to its chain state (balances, enrolments) and its upload ledger.
type BlobAuthorizer interface {
	// ChainID is the chain id intents are signed for.
	ChainID(ctx context.Context) (string, error)
	// Reserve admits an upload of size bytes of the blob h by did (for the
	// run task, "" for none) against its funding and quota, or refuses it
	// with a machine.Error (KindFunds when unfunded or over quota). done
	// is called once the upload ended: stored says whether this upload
	// created the blob (then it is the uploader's until a record takes it
	// up), and returns the reservation.
	Reserve(ctx context.Context, did, task string, h wire.Hash, size int64) (done func(stored bool), err error)
}

// Defaults of the upload intent rules.
const (
	// MaxIntentLifetime is how far in the future an intent may expire.
	MaxIntentLifetime = 15 * time.Minute
	// DefaultBlobPeerBytesPerHour bounds what one remote IP uploads per hour.
	DefaultBlobPeerBytesPerHour = 16 << 30
)

// BlobStore is the node's blob store as served here (store.Blobs).
type BlobStore interface {
	OpenBlob(ctx context.Context, h wire.Hash) (*store.Blob, error)
	PutStream(ctx context.Context, h wire.Hash, r io.Reader, limit int64) (store.PutResult, error)
}

// BlobPath is the URL path prefix of the blob endpoints.
const BlobPath = "/blobs/"

// Defaults of the upload slots. Uploads hold O(buffer) memory, so the
// bound is on disk bandwidth and on what one address can hold, not memory.
const (
	DefaultMaxBlobUploads        = 8
	DefaultMaxBlobUploadsPerPeer = 2
)

// BlobResult is the JSON body of a successful PUT.
type BlobResult struct {
	Hash wire.Hash `json:"hash"`
	Size int64     `json:"size"`
	// Created is false when the blob was already stored.
	Created bool `json:"created"`
}

type blobSlots struct {
	all  *semaphore.Weighted
	peer peerSlots

	mu     sync.Mutex
	window time.Time        // start of the current hour of per-peer accounting
	bytes  map[string]int64 // bytes admitted per remote IP in this hour
}

// admitPeer counts n bytes against ip's hourly upload budget.
func (b *blobSlots) admitPeer(ip string, n, limit int64, now time.Time) (ok bool, used int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.window) >= time.Hour || b.bytes == nil {
		b.window, b.bytes = now, map[string]int64{}
	}
	if b.bytes[ip]+n > limit {
		return false, b.bytes[ip]
	}
	b.bytes[ip] += n
	return true, b.bytes[ip]
}

// authorizeBlob checks the upload's signed intent and admits it against
// the uploader's funding and quota and the peer's budget. It writes the
// refusal itself when it fails.
func (s *Server) authorizeBlob(w http.ResponseWriter, r *http.Request, h wire.Hash) (done func(bool), ok bool) {
	deny := func(status, code int, format string, a ...any) (func(bool), bool) {
		blobError(w, status, code, nil, format, a...)
		return nil, false
	}
	hv := r.Header.Values(wire.BlobIntentHeader)
	if len(hv) != 1 {
		return deny(http.StatusUnauthorized, CodeUnauthorized,
			"upload refused: PUT %s needs exactly one %s header, a signed upload intent (docs/protocol/blobs.md); got %d; or send the payload inline (base64) in the JSON-RPC request", BlobPath, wire.BlobIntentHeader, len(hv))
	}
	in, err := wire.ParseBlobIntent(hv[0])
	if err != nil {
		return deny(http.StatusBadRequest, CodeInvalidParams, "upload refused: %v", err)
	}
	if r.ContentLength < 0 || uint64(r.ContentLength) != in.Size {
		return deny(http.StatusBadRequest, CodeInvalidParams,
			"upload refused: the intent signs a size of %d bytes; the request's Content-Length is %d (required, and equal)", in.Size, r.ContentLength)
	}
	now := time.Now()
	switch exp := time.Unix(int64(min(in.Expires, 1<<62)), 0); {
	case !exp.After(now):
		return deny(http.StatusUnauthorized, CodeUnauthorized, "upload refused: the intent expired at %s (now %s)", exp.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case exp.After(now.Add(MaxIntentLifetime)):
		return deny(http.StatusUnauthorized, CodeUnauthorized, "upload refused: the intent expires at %s, more than %s from now", exp.UTC().Format(time.RFC3339), MaxIntentLifetime)
	}
	chainID, err := s.opts.BlobAuth.ChainID(r.Context())
	if err != nil {
		ref := newRef()
		s.log.ErrorContext(r.Context(), "rpc: blob intent: chain id", "ref", ref, "err", err)
		blobError(w, http.StatusInternalServerError, CodeInternal, &errData{Kind: "internal", Ref: ref}, "internal error (node log ref %s)", ref)
		return nil, false
	}
	if err := did.Verify(in.DID, in.Preimage(chainID, h), in.Sig); err != nil {
		return deny(http.StatusUnauthorized, CodeUnauthorized,
			"upload refused: the intent's signature does not verify for %s over blob %s, %d bytes, chain %q: %v", in.DID, h, in.Size, chainID, err)
	}
	ip := peerIP(r)
	if ok, used := s.blobSlots.admitPeer(ip, int64(in.Size), s.opts.BlobPeerBytesPerHour, now); !ok {
		return deny(http.StatusTooManyRequests, CodeBusy,
			"upload refused: %s uploaded %d bytes this hour; %d more would pass the per-peer limit of %d bytes per hour", ip, used, in.Size, s.opts.BlobPeerBytesPerHour)
	}
	done, err = s.opts.BlobAuth.Reserve(r.Context(), in.DID, in.Task, h, int64(in.Size))
	if err != nil {
		status := http.StatusForbidden
		if machine.KindOf(err) == machine.KindFunds {
			status = http.StatusPaymentRequired
		}
		e := mapError(r.Context(), s.log, "PUT "+BlobPath, err)
		writeRaw(w, status, rawError(nil, e))
		return nil, false
	}
	return done, true
}

// parseBlobPath returns the hash named by a /blobs/<hash> path.
func parseBlobPath(p string) (wire.Hash, error) {
	x := strings.TrimPrefix(p, BlobPath)
	var h wire.Hash
	if len(x) != 64 {
		return h, fmt.Errorf("blob path %q: want %s followed by the blob's content hash as 64 hex digits (BLAKE3-256), got %d characters", trunc(p), BlobPath, len(x))
	}
	for i := 0; i < len(x); i++ {
		c := x[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return h, fmt.Errorf("blob path %q: character %d (%q) is not a hex digit", trunc(p), len(BlobPath)+i, c)
		}
	}
	return wire.ParseHash(strings.ToLower(x))
}

func blobError(w http.ResponseWriter, status, code int, data *errData, format string, a ...any) {
	writeRaw(w, status, rawError(nil, newError(code, data, format, a...)))
}

// serveBlob handles /blobs/<hash>.
func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request) {
	if s.opts.Blobs == nil {
		blobError(w, http.StatusNotFound, CodeNotFound, nil, "this node has no blob store: send payloads inline (base64) in the JSON-RPC request")
		return
	}
	switch r.Method {
	case http.MethodPut, http.MethodGet, http.MethodHead:
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		blobError(w, http.StatusMethodNotAllowed, CodeInvalidRequest, nil, "HTTP method %s not allowed on %s: PUT uploads, GET and HEAD download", r.Method, BlobPath)
		return
	}
	h, err := parseBlobPath(r.URL.Path)
	if err != nil {
		blobError(w, http.StatusBadRequest, CodeInvalidParams, nil, "%v", err)
		return
	}
	if r.Method == http.MethodPut {
		s.putBlob(w, r, h)
		return
	}
	b, err := s.opts.Blobs.OpenBlob(r.Context(), h)
	if errors.Is(err, store.ErrBlobNotFound) && s.opts.FetchBlob != nil {
		if ferr := s.fetchMissingBlob(r.Context(), h); ferr != nil {
			blobError(w, http.StatusNotFound, CodeNotFound, nil, "no blob %s on this node, and no peer gave it: %v", h, ferr)
			return
		}
		b, err = s.opts.Blobs.OpenBlob(r.Context(), h)
	}
	if errors.Is(err, store.ErrBlobNotFound) {
		blobError(w, http.StatusNotFound, CodeNotFound, nil, "no blob %s on this node", h)
		return
	}
	if err != nil {
		ref := newRef()
		s.log.ErrorContext(r.Context(), "rpc: open blob", "hash", h, "ref", ref, "err", err)
		blobError(w, http.StatusInternalServerError, CodeInternal, &errData{Kind: "internal", Ref: ref}, "internal error (node log ref %s)", ref)
		return
	}
	defer b.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", `"`+h.String()+`"`)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	// ServeContent answers Range (206, 416) and If-None-Match (304), and
	// sends the file with sendfile where the connection allows.
	http.ServeContent(w, r, "", time.Time{}, b)
}

// putBlob handles PUT /blobs/<hash>: the body goes straight to the blob
// store through its hasher, under the same slow-body rules as large
// JSON-RPC requests (rpc/slots.go).
func (s *Server) putBlob(w http.ResponseWriter, r *http.Request, h wire.Hash) {
	limit := s.opts.MaxBlobBytes
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		blobError(w, http.StatusRequestEntityTooLarge, CodeInvalidRequest, &errData{Limit: limit},
			"blob of %d bytes exceeds the limit of %d bytes (node flag --max-blob-bytes)", r.ContentLength, limit)
		return
	}
	stored := false
	if s.opts.BlobAuth != nil {
		done, ok := s.authorizeBlob(w, r, h)
		if !ok {
			return
		}
		defer func() { done(stored) }()
		// The intent signs the exact size: nothing past it is read.
		limit = r.ContentLength
	}
	release, ok := s.acquireBlobSlot(w, r)
	if !ok {
		return
	}
	defer release()
	// The rate clock starts with the slot: time spent queueing is not the
	// client's.
	rr := &rateReader{r: r.Body, rc: http.NewResponseController(w), start: time.Now(), grace: s.opts.LargeGrace, minRate: s.opts.LargeMinRate}
	defer rr.disarm()
	// Every error the body itself yields is the client's (tagged, to tell
	// it from a fault of the store). A body shorter than its Content-Length
	// ends in io.ErrUnexpectedEOF from net/http.
	var body io.Reader = clientBody{rr}
	res, err := s.opts.Blobs.PutStream(r.Context(), h, body, limit)
	if err == nil && !res.Created && r.Header.Get("Expect") == "" {
		// Already stored: the client sends its body anyway (no
		// 100-continue), so take it, within the same limits, before
		// answering, rather than reset a connection it is still writing.
		var n int64
		n, err = io.Copy(io.Discard, io.LimitReader(body, limit+1))
		if err == nil && n > limit {
			err = store.ErrBlobTooLarge
		}
	}
	stored = err == nil && res.Created
	switch {
	case err == nil:
		st := http.StatusOK
		if res.Created {
			if s.opts.OnBlobIn != nil {
				s.opts.OnBlobIn(res.Size)
			}
			st = http.StatusCreated
			w.Header().Set("Location", BlobPath+h.String())
		}
		out, _ := json.Marshal(BlobResult{Hash: h, Size: res.Size, Created: res.Created})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		w.WriteHeader(st)
		_, _ = w.Write(out)
	case errors.Is(err, store.ErrBlobTooLarge):
		w.Header().Set("Connection", "close")
		blobError(w, http.StatusRequestEntityTooLarge, CodeInvalidRequest, &errData{Limit: limit},
			"blob body exceeds the limit of %d bytes (node flag --max-blob-bytes); nothing was stored", limit)
	case errors.Is(err, store.ErrBlobStoreFull):
		w.Header().Set("Connection", "close")
		blobError(w, http.StatusInsufficientStorage, CodeBusy, nil,
			"upload refused: %v (node flag --blob-disk-cap); nothing was stored", err)
	case errors.Is(err, store.ErrBlobMismatch):
		blobError(w, http.StatusUnprocessableEntity, CodeInvalidParams, nil,
			"blob bytes do not match the hash in the path: %d bytes hash to %s (BLAKE3-256), the path says %s; nothing was stored", res.Size, res.Hash, h)
	case errors.Is(err, errTooSlow):
		w.Header().Set("Connection", "close")
		blobError(w, http.StatusRequestTimeout, CodeInvalidRequest, &errData{Limit: s.opts.LargeMinRate}, "%v; nothing was stored", err)
	case errors.Is(err, io.ErrUnexpectedEOF) && r.ContentLength >= 0:
		w.Header().Set("Connection", "close")
		blobError(w, http.StatusBadRequest, CodeInvalidRequest, nil, "blob body ended after %d of its %d bytes; nothing was stored", rr.count(), r.ContentLength)
	case errors.As(err, new(clientBodyError)), r.Context().Err() != nil:
		w.Header().Set("Connection", "close")
		blobError(w, http.StatusBadRequest, CodeInvalidRequest, nil, "reading blob body: %v; nothing was stored", err)
	default:
		// The body may still be being read ahead (store.BlobWriter.ReadFrom):
		// this connection serves nothing more.
		w.Header().Set("Connection", "close")
		ref := newRef()
		s.log.ErrorContext(r.Context(), "rpc: store blob", "hash", h, "ref", ref, "err", err)
		blobError(w, http.StatusInternalServerError, CodeInternal, &errData{Kind: "internal", Ref: ref}, "internal error storing the blob (node log ref %s); nothing was stored", ref)
	}
}

// clientBody tags the errors of a request body (malformed chunking, a
// connection cut, too slow) as the client's.
type clientBody struct{ r io.Reader }

type clientBodyError struct{ err error }

func (e clientBodyError) Error() string { return e.err.Error() }
func (e clientBodyError) Unwrap() error { return e.err }

func (c clientBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		err = clientBodyError{err}
	}
	return n, err
}

// acquireBlobSlot takes the peer's upload slot and then a global one,
// waiting up to LargeWait in all. It writes the refusal itself when it fails.
func (s *Server) acquireBlobSlot(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.LargeWait)
	defer cancel()
	ip := peerIP(r)
	relPeer, err := s.blobSlots.peer.acquire(ctx, ip, s.opts.MaxBlobUploadsPerPeer)
	if err != nil {
		blobError(w, http.StatusServiceUnavailable, CodeBusy, nil,
			"server busy: %s already has %d blob upload(s) in flight (per-peer limit) and none finished within %s; retry later",
			ip, s.opts.MaxBlobUploadsPerPeer, s.opts.LargeWait)
		return nil, false
	}
	if err := s.blobSlots.all.Acquire(ctx, 1); err != nil {
		relPeer()
		blobError(w, http.StatusServiceUnavailable, CodeBusy, nil,
			"server busy: %d blob uploads in flight and no slot freed within %s; retry later", s.opts.MaxBlobUploads, s.opts.LargeWait)
		return nil, false
	}
	s.blobsInFlight.Add(1)
	return func() { s.blobsInFlight.Add(-1); s.blobSlots.all.Release(1); relPeer() }, true
}

// BlobUploadsInFlight is the number of blob uploads being received now.
func (s *Server) BlobUploadsInFlight() int { return int(s.blobsInFlight.Load()) }

// Network fetches on a blob miss (Options.FetchBlob): at most
// blobFetchSlots at once, each at most blobFetchTimeout, so requests for
// hashes nobody holds cost a node a bounded share of its peers' time.
const (
	blobFetchSlots   = 2
	blobFetchTimeout = 2 * time.Minute
)

// fetchMissingBlob asks the network for h through Options.FetchBlob, in one
// of the server's fetch slots.
func (s *Server) fetchMissingBlob(ctx context.Context, h wire.Hash) error {
	select {
	case s.blobFetch <- struct{}{}:
		defer func() { <-s.blobFetch }()
	case <-ctx.Done():
		return ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, blobFetchTimeout)
	defer cancel()
	return s.opts.FetchBlob(ctx, h)
}
