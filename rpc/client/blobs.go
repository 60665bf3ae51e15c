package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// ErrNoBlobEndpoint says that the node does not serve PUT/GET /blobs (an
// older node, or one without a blob store): send payloads inline (base64)
// in the JSON-RPC request instead.
var ErrNoBlobEndpoint = errors.New("the node does not serve /blobs (HTTP 404/405): send the payload inline")

// blobURL is the node's /blobs/<hash> URL: the JSON-RPC endpoint's path
// followed by /blobs/<hash>.
func (c *Client) blobURL(h wire.Hash) (string, error) {
	u, err := url.Parse(c.url)
	if err != nil {
		return "", fmt.Errorf("node url %q: %w", c.url, err)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + rpc.BlobPath + h.String()
	u.RawQuery, u.Fragment = "", ""
	return u.String(), nil
}

// blobError turns a non-success answer of /blobs into an error: a
// JSON-RPC error object as *Error, 404/405 from a node without the
// endpoint as ErrNoBlobEndpoint.
func blobError(op string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var r response
	if json.Unmarshal(b, &r) == nil && r.Error != nil {
		r.Error.HTTPStatus = resp.StatusCode
		if resp.StatusCode == http.StatusNotFound && strings.Contains(r.Error.Message, "no blob store") {
			return fmt.Errorf("%s: %w (%s)", op, ErrNoBlobEndpoint, r.Error.Message)
		}
		if resp.StatusCode == http.StatusMethodNotAllowed {
			return fmt.Errorf("%s: %w (%s)", op, ErrNoBlobEndpoint, r.Error.Message)
		}
		return fmt.Errorf("%s: %w", op, r.Error)
	}
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		return fmt.Errorf("%s: %w", op, ErrNoBlobEndpoint)
	}
	return fmt.Errorf("%s: HTTP %d: %s", op, resp.StatusCode, snippet(b))
}

// PutBlob uploads size bytes from body as the blob h (PUT /blobs/<h>): the
// node hashes them as they arrive and stores them only when they hash to
// h. It sends "Expect: 100-continue", so a blob the node already holds (or
// one over its limit) is answered before the body is sent. A node without
// the endpoint gives ErrNoBlobEndpoint.
func (c *Client) PutBlob(ctx context.Context, h wire.Hash, body io.Reader, size int64) (*rpc.BlobResult, error) {
	return c.putBlob(ctx, nil, h, body, size)
}

// BlobSigner signs upload intents (docs/protocol/blobs.md): the uploader's
// key and the run the blob is for ("" for none), which a node admits when
// the key is enrolled in (or sponsors) that active run, or when its
// balance covers the node's price per byte.
type BlobSigner struct {
	Key  *did.Key
	Task string
}

// intentLifetime is how long a signed intent stays valid (the node accepts
// up to rpc.MaxIntentLifetime).
const intentLifetime = 10 * time.Minute

// PutBlobSigned is PutBlob with a signed upload intent, which nodes that
// price uploads require.
func (c *Client) PutBlobSigned(ctx context.Context, s BlobSigner, h wire.Hash, body io.Reader, size int64) (*rpc.BlobResult, error) {
	return c.putBlob(ctx, &s, h, body, size)
}

// chainID is the node's chain id (cached; "" for a node without a chain).
func (c *Client) chainID(ctx context.Context) (string, error) {
	if id := c.chain.Load(); id != nil {
		return *id, nil
	}
	info, err := c.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("chain id for the upload intent: %w", err)
	}
	id := ""
	if info.Chain != nil {
		id = info.Chain.ChainID
	}
	c.chain.Store(&id)
	return id, nil
}

// UploadRefused reports whether a PutBlob error means the payload should
// travel inline instead: the node has no /blobs endpoint, or it does not
// fund uploads from this key (HTTP 402).
func UploadRefused(err error) bool {
	var e *Error
	return errors.Is(err, ErrNoBlobEndpoint) || (errors.As(err, &e) && e.HTTPStatus == http.StatusPaymentRequired)
}

func (c *Client) putBlob(ctx context.Context, s *BlobSigner, h wire.Hash, body io.Reader, size int64) (*rpc.BlobResult, error) {
	op := "upload blob " + h.String()
	var intent string
	if s != nil && s.Key != nil {
		chain, err := c.chainID(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		in := wire.BlobIntent{DID: s.Key.DID.String(), Size: uint64(size), Expires: uint64(time.Now().Add(intentLifetime).Unix()), Task: s.Task}
		in.Sig = s.Key.Sign(in.Preimage(chain, h))
		intent = in.String()
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	u, err := c.blobURL(h)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, io.NopCloser(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Expect", "100-continue")
	if intent != "" {
		req.Header.Set(wire.BlobIntentHeader, intent)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return nil, blobError(op, resp)
	}
	var res rpc.BlobResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&res); err != nil {
		return nil, fmt.Errorf("%s: decode answer: %w", op, err)
	}
	if res.Hash != h || res.Size != size {
		return nil, fmt.Errorf("%s: node stored %d bytes as %s, sent %d as %s", op, res.Size, res.Hash, size, h)
	}
	return &res, nil
}

// HashFile returns the content hash (BLAKE3-256) and size of a file,
// reading it once in O(buffer) memory and refusing files above limit.
func HashFile(path string, limit int64) (wire.Hash, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return wire.Hash{}, 0, err
	}
	defer f.Close()
	hs := wire.NewContentHasher()
	n, err := io.Copy(hs, io.LimitReader(f, limit+1))
	if err != nil {
		return wire.Hash{}, 0, err
	}
	if n > limit {
		return wire.Hash{}, 0, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return hs.Sum(), n, nil
}

// PutBlobFile uploads a file whose hash and size the caller computed
// (HashFile), streaming it from disk.
// A signer (at most one) signs the upload intent.
func (c *Client) PutBlobFile(ctx context.Context, path string, h wire.Hash, size int64, signer ...BlobSigner) (*rpc.BlobResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var s *BlobSigner
	if len(signer) > 0 {
		s = &signer[0]
	}
	return c.putBlob(ctx, s, h, io.LimitReader(f, size), size)
}

// GetBlob downloads the blob h (GET /blobs/<h>) into w, at most limit
// bytes, hashing it as it arrives; it fails when the bytes do not hash to
// h (w then holds bytes it must discard). A node without the endpoint, or
// without the blob, gives ErrNoBlobEndpoint or an *Error with
// HTTPStatus 404.
func (c *Client) GetBlob(ctx context.Context, h wire.Hash, w io.Writer, limit int64) (int64, error) {
	op := "download blob " + h.String()
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	u, err := c.blobURL(h)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, blobError(op, resp)
	}
	if resp.ContentLength > limit {
		return 0, fmt.Errorf("%s: %d bytes, limit %d", op, resp.ContentLength, limit)
	}
	hs := wire.NewContentHasher()
	n, err := io.Copy(io.MultiWriter(w, hs), io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return n, fmt.Errorf("%s: %w", op, err)
	}
	if n > limit {
		return n, fmt.Errorf("%s: more than %d bytes", op, limit)
	}
	if got := hs.Sum(); got != h {
		return n, fmt.Errorf("%s: %d bytes hash to %s", op, n, got)
	}
	return n, nil
}

// GetBlobFile downloads the blob h into the file path (written to a
// temporary file beside it and renamed once the hash checked).
func (c *Client) GetBlobFile(ctx context.Context, h wire.Hash, path string, limit int64) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".part-*")
	if err != nil {
		return 0, err
	}
	n, err := c.GetBlob(ctx, h, tmp, limit)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return n, err
	}
	return n, nil
}

// noBlob reports whether err says the node has no /blobs endpoint or no
// such blob there (a JSON-RPC fallback may still find it).
func noBlob(err error) bool {
	var e *Error
	return errors.Is(err, ErrNoBlobEndpoint) || (errors.As(err, &e) && e.HTTPStatus == http.StatusNotFound)
}
