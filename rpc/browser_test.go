package rpc_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/wire"
)

// Finding 10 of issue 22: a page on another origin could POST JSON-RPC
// (a "simple" request, no preflight) and call the dataset API. Each such
// request is now refused before any handler runs; the node's own origin,
// listed origins and non-browser clients still pass.
func TestBrowserRequestsRefused(t *testing.T) {
	var routeCalls int
	route := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { routeCalls++; w.WriteHeader(http.StatusOK) })
	h := newHarness(t, rpc.Options{AllowedOrigins: []string{"https://ops.example"}})
	host := strings.TrimPrefix(h.http.URL, "http://")
	body := call(wire.MethodNodeInfo, "")
	cases := []struct {
		name   string
		hdr    []string
		status int
	}{
		{"no content type (simple request)", []string{"Content-Type", ""}, http.StatusUnsupportedMediaType},
		{"form content type", []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"text/plain from another origin", []string{"Content-Type", "text/plain", "Origin", "https://evil.example"}, http.StatusForbidden},
		{"json from another origin", []string{"Origin", "https://evil.example"}, http.StatusForbidden},
		{"opaque origin", []string{"Origin", "null"}, http.StatusForbidden},
		{"cross-site fetch metadata", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"same origin", []string{"Origin", "http://" + host}, http.StatusOK},
		{"listed origin", []string{"Origin", "https://ops.example"}, http.StatusOK},
		{"no origin (CLI, SDK)", nil, http.StatusOK},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, b := h.post(t, body, c.hdr...)
			if status != c.status {
				t.Fatalf("HTTP %d, want %d: %s", status, c.status, b)
			}
		})
	}
	// Routes beside JSON-RPC (the dataset API) get the same origin rule.
	guarded := rpc.SameOrigin(route, nil)
	for _, c := range []struct {
		origin string
		want   int
		calls  int
	}{{"https://evil.example", http.StatusForbidden, 0}, {"", http.StatusOK, 1}} {
		req, _ := http.NewRequest(http.MethodPost, "http://node/api/dataset/remove?cid=x", nil)
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		rec := &recorder{h: http.Header{}}
		before := routeCalls
		guarded.ServeHTTP(rec, req)
		if rec.status != c.want || routeCalls-before != c.calls {
			t.Errorf("dataset route, Origin %q: HTTP %d, handler ran %d times; want %d, %d", c.origin, rec.status, routeCalls-before, c.want, c.calls)
		}
	}
}

type recorder struct {
	h      http.Header
	status int
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return len(b), nil
}
func (r *recorder) WriteHeader(s int) { r.status = s }
