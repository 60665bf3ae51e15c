package dataset

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Client talks to a node's dataset API and gateway (base is the node's HTTP
// address, e.g. http://127.0.0.1:8545).
type Client struct {
	Base string
	HTTP *http.Client
	// Key signs imports, removes and fetches (Tenzro-Dataset-Request) for
	// ChainID, the chain of the node at Base. Without a Key a fetch is
	// anonymous (the node pins for itself) and imports and removes are
	// refused by the node.
	Key     *did.Key
	ChainID string
}

// sign sets the request's Tenzro-Dataset-Request for op on c.
func (c *Client) sign(req *http.Request, op string, root cid.Cid) {
	if c.Key != nil {
		req.Header.Set(wire.DatasetRequestHeader, SignRequest(c.Key, c.ChainID, op, root, requestLifetime))
	}
}

// requestLifetime is how long a signed request stays valid.
const requestLifetime = 5 * time.Minute

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) url(p string, q url.Values) string {
	u := strings.TrimRight(c.Base, "/") + p
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (c *Client) do(req *http.Request, out any) error {
	resp, err := c.http().Do(req)
	if err != nil {
		return fmt.Errorf("dataset api %s: %w", req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("dataset api %s: %w", req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("node refused (%s): %s", resp.Status, e.Error)
		}
		return fmt.Errorf("dataset api %s: %s: %s", req.URL.Path, resp.Status, trunc(string(body)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("dataset api %s: answer: %w", req.URL.Path, err)
	}
	return nil
}

// AddOptions tune Add.
type AddOptions struct {
	Layout      Layout
	Encrypted   bool
	DatasetHash string
	// Progress, when not nil, receives bytes read in the upload pass.
	Progress func(n int64)
}

// Add computes the DAG of path locally (a first pass gives the root CID
// for the CAR header), then streams it as a CAR to the node, which verifies
// and pins it.
func (c *Client) Add(ctx context.Context, path string, o AddOptions) (*Record, error) {
	root, err := RootCID(ctx, path, o.Layout)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		cw, err := NewCARWriter(pw, root)
		if err == nil {
			var got string
			n, e := ImportPath(ctx, cw, path, o.Layout, o.Progress)
			if e == nil {
				got = n.Cid().String()
				if got != root.String() {
					e = fmt.Errorf("add %s: the file changed while it was read (root %s, then %s)", path, root, got)
				}
			}
			if e == nil {
				e = cw.Flush()
			}
			err = e
		}
		pw.CloseWithError(err)
	}()
	q := url.Values{"root": {root.String()}, "name": {filepath.Base(path)}, "layout": {o.Layout.String()}}
	if o.Encrypted {
		q.Set("encrypted", "1")
	}
	if o.DatasetHash != "" {
		q.Set("dataset_hash", o.DatasetHash)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url("/api/dataset/import", q), pr)
	if err != nil {
		pr.CloseWithError(err)
		return nil, err
	}
	req.Header.Set("Content-Type", "application/vnd.ipld.car")
	c.sign(req, wire.DatasetOpImport, root)
	var rec Record
	if err := c.do(req, &rec); err != nil {
		pr.CloseWithError(err)
		return nil, err
	}
	return &rec, nil
}

// Fetch asks the node to hold ref (fetching it from its peers).
func (c *Client) Fetch(ctx context.Context, ref string, maxBytes int64) (*Record, error) {
	q := url.Values{"ref": {ref}}
	if maxBytes > 0 {
		q.Set("max_bytes", fmt.Sprint(maxBytes))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url("/api/dataset/fetch", q), nil)
	if err != nil {
		return nil, err
	}
	if root, _, err := ParseRef(ref); err == nil { // else the node says what is wrong with it
		c.sign(req, wire.DatasetOpFetch, root)
	}
	var rec Record
	return &rec, c.do(req, &rec)
}

// List lists the node's datasets.
func (c *Client) List(ctx context.Context) ([]Record, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/api/dataset/list", nil), nil)
	if err != nil {
		return nil, err
	}
	var out []Record
	return out, c.do(req, &out)
}

// RemoveResult is the node's answer to a remove: Removed when the dataset
// is gone, else Unpinned with the DIDs that still pin it.
type RemoveResult struct {
	Removed       string   `json:"removed,omitempty"`
	Unpinned      string   `json:"unpinned,omitempty"`
	StillPinnedBy []string `json:"still_pinned_by,omitempty"`
}

// Remove drops the Key's pin of a dataset (the dataset goes once no DID
// pins it).
func (c *Client) Remove(ctx context.Context, ref string) (*RemoveResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url("/api/dataset/remove", url.Values{"cid": {ref}}), nil)
	if err != nil {
		return nil, err
	}
	if root, _, err := ParseRef(ref); err == nil { // else the node says what is wrong with it
		c.sign(req, wire.DatasetOpRemove, root)
	}
	var out RemoveResult
	return &out, c.do(req, &out)
}

// Download fetches ref through the node (held complete first) and copies the
// file at ref (with its path) from the gateway to w; format "car" writes the
// verifiable CAR instead.
func (c *Client) Download(ctx context.Context, ref, format string, maxBytes int64, w io.Writer) (int64, error) {
	root, p, err := ParseRef(ref)
	if err != nil {
		return 0, err
	}
	if _, err := c.Fetch(ctx, "ipfs://"+root.String(), maxBytes); err != nil {
		return 0, err
	}
	u := "/ipfs/" + root.String()
	if p != "" {
		u += "/" + p
	}
	q := url.Values{}
	if format != "" {
		q.Set("format", format)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(u, q), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return 0, fmt.Errorf("gateway: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, fmt.Errorf("gateway %s: %s: %s", u, resp.Status, strings.TrimSpace(string(b)))
	}
	return io.Copy(w, resp.Body)
}
