package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultURL is the node's default RPC endpoint.
const DefaultURL = "http://127.0.0.1:8545"

// DefaultTimeout bounds one call unless the context has an earlier deadline.
// It is generous because a submission carries tens of megabytes.
const DefaultTimeout = 5 * time.Minute

// MaxResponseBytes bounds a response body (a fragment's weights travel
// base64-encoded; the default allows 512 MiB).
const MaxResponseBytes = 512 << 20

// Error is a JSON-RPC error answered by the node.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
	// HTTPStatus is the HTTP status of the response that carried it.
	HTTPStatus int `json:"-"`
}

func (e *Error) Error() string { return fmt.Sprintf("rpc error %d: %s", e.Code, e.Message) }

// Kind returns the refusal kind named in the error's data ("not_found",
// "conflict", …), or "".
func (e *Error) Kind() string {
	var d struct {
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return d.Kind
}

// CodeOf returns the JSON-RPC code of err, or 0 when err is not an *Error.
func CodeOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// Client calls one node. It is safe for concurrent use.
type Client struct {
	url     string
	hc      *http.Client
	timeout time.Duration
	id      atomic.Uint64
	chain   atomic.Pointer[string] // the node's chain id, once asked
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default: a dedicated *http.Client).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTimeout sets the per-call timeout (DefaultTimeout; 0 or less: none).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// New returns a client of the node at url (e.g. http://127.0.0.1:8545).
func New(url string, opts ...Option) *Client {
	if url == "" {
		url = DefaultURL
	}
	c := &Client{url: url, hc: &http.Client{}, timeout: DefaultTimeout}
	for _, o := range opts {
		o(c)
	}
	return c
}

// URL returns the endpoint.
func (c *Client) URL() string { return c.url }

type request struct {
	V      string `json:"jsonrpc"`
	ID     uint64 `json:"id"`
	Method string `json:"method"`
	Params any    `json:"params,omitempty"`
}

type response struct {
	V      string          `json:"jsonrpc"`
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *Error          `json:"error"`
}

// Call invokes method with params (nil for none) and decodes the result
// into result (nil to discard). A refusal is returned as *Error.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	raw, err := c.CallRaw(ctx, method, params)
	if err != nil {
		return err
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(raw, result); err != nil {
		return fmt.Errorf("%s: decode result: %w", method, err)
	}
	return nil
}

// CallRaw invokes method and returns the result's JSON as the node sent it.
func (c *Client) CallRaw(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	id := c.id.Add(1)
	body, err := json.Marshal(request{V: "2.0", ID: id, Method: method, Params: params})
	if err != nil {
		return nil, fmt.Errorf("%s: encode params: %w", method, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: read response: %w", method, err)
	}
	if len(rb) > MaxResponseBytes {
		return nil, fmt.Errorf("%s: response exceeds %d bytes", method, MaxResponseBytes)
	}
	var r response
	if err := json.Unmarshal(rb, &r); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d from %s: not a JSON-RPC response: %s", method, resp.StatusCode, c.url, snippet(rb))
	}
	if r.Error != nil {
		r.Error.HTTPStatus = resp.StatusCode
		return nil, r.Error
	}
	if r.V != "2.0" || string(r.ID) != fmt.Sprint(id) {
		return nil, fmt.Errorf("%s: malformed JSON-RPC response (id %s, want %d)", method, snippet(r.ID), id)
	}
	if r.Result == nil {
		return nil, fmt.Errorf("%s: response has neither result nor error", method)
	}
	return r.Result, nil
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
