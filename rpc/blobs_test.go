package rpc_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire"
)

type blobHarness struct {
	t     *testing.T
	blobs *store.Blobs
	srv   *rpc.Server
	url   string
	addr  string
}

func newBlobHarness(t *testing.T, opts rpc.Options) *blobHarness {
	t.Helper()
	bs, err := store.OpenBlobs(t.TempDir(), store.BlobOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	opts.Blobs = bs
	opts.Logger = slog.New(slog.DiscardHandler)
	srv, err := rpc.New(&fakeService{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &blobHarness{t: t, blobs: bs, srv: srv, url: ts.URL, addr: strings.TrimPrefix(ts.URL, "http://")}
}

func randomBlob(seed uint64, n int) []byte {
	var key [32]byte
	key[0] = byte(seed)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(key).Read(b)
	return b
}

// do sends one request and returns the status and body.
func (h *blobHarness) do(method, path string, body io.Reader, hdr map[string]string) (int, []byte, http.Header) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func (h *blobHarness) stored(hash wire.Hash) bool {
	ok, err := h.blobs.Has(context.Background(), hash)
	if err != nil {
		h.t.Fatal(err)
	}
	return ok
}

func (h *blobHarness) count() int {
	n := 0
	_ = h.blobs.Walk(context.Background(), func(wire.Hash, int64) error { n++; return nil })
	return n
}

// onlyReader hides bytes.Reader's length so the client sends the body
// chunked (no Content-Length).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestBlobPutGet(t *testing.T) {
	h := newBlobHarness(t, rpc.Options{MaxBlobBytes: 4 << 20})
	data := randomBlob(1, 3<<20+5)
	hash := wire.ContentHash(data)
	path := rpc.BlobPath + hash.String()
	other := randomBlob(2, 1000)

	for _, tc := range []struct {
		name     string
		method   string
		path     string
		body     func() io.Reader
		hdr      map[string]string
		status   int
		contains string
		stored   bool
	}{
		{"GET before upload", "GET", path, nil, nil, 404, "no blob " + hash.String(), false},
		{"bad hash: short", "PUT", rpc.BlobPath + "abcd", func() io.Reader { return bytes.NewReader(data) }, nil, 400, "64 hex digits", false},
		{"bad hash: not hex", "PUT", rpc.BlobPath + strings.Repeat("g", 64), func() io.Reader { return bytes.NewReader(data) }, nil, 400, "not a hex digit", false},
		{"bad hash: 0x prefix", "GET", rpc.BlobPath + "0x" + hash.String(), nil, nil, 400, "64 hex digits", false},
		{"method not allowed", "DELETE", path, nil, nil, 405, "not allowed", false},
		{"mismatch", "PUT", path, func() io.Reader { return bytes.NewReader(other) }, nil, 422, "hash to " + wire.ContentHash(other).String(), false},
		{"mismatch, chunked", "PUT", path, func() io.Reader { return onlyReader{bytes.NewReader(data[1:])} }, nil, 422, "nothing was stored", false},
		{"too large by Content-Length", "PUT", path, func() io.Reader { return bytes.NewReader(make([]byte, 4<<20+1)) }, nil, 413, "limit of 4194304 bytes", false},
		{"too large, chunked", "PUT", path, func() io.Reader { return onlyReader{bytes.NewReader(make([]byte, 5<<20))} }, nil, 413, "nothing was stored", false},
		{"upload", "PUT", path, func() io.Reader { return bytes.NewReader(data) }, nil, 201, `"created":true`, true},
		{"upload again", "PUT", path, func() io.Reader { return bytes.NewReader(data) }, nil, 200, `"created":false`, true},
		{"upload again, chunked", "PUT", path, func() io.Reader { return onlyReader{bytes.NewReader(data)} }, nil, 200, `"created":false`, true},
		{"HEAD", "HEAD", path, nil, nil, 200, "", true},
		{"GET", "GET", path, nil, nil, 200, "", true},
		{"GET range", "GET", path, nil, map[string]string{"Range": "bytes=100-199"}, 206, "", true},
		{"GET range past the end", "GET", path, nil, map[string]string{"Range": fmt.Sprintf("bytes=%d-", len(data)+10)}, 416, "", true},
		{"GET not modified", "GET", path, nil, map[string]string{"If-None-Match": `"` + hash.String() + `"`}, 304, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != nil {
				body = tc.body()
			}
			st, b, hdr := h.do(tc.method, tc.path, body, tc.hdr)
			if st != tc.status || !bytes.Contains(b, []byte(tc.contains)) {
				t.Fatalf("%s %s: %d %.300s, want %d containing %q", tc.method, tc.path, st, b, tc.status, tc.contains)
			}
			if h.stored(hash) != tc.stored {
				t.Fatalf("stored = %v, want %v", !tc.stored, tc.stored)
			}
			if st >= 400 && st != 416 && hdr.Get("Content-Type") != "application/json" { // 416 is ServeContent's own
				t.Fatalf("error body is %s, want JSON", hdr.Get("Content-Type"))
			}
			switch tc.name {
			case "GET":
				if !bytes.Equal(b, data) {
					t.Fatal("GET returned other bytes")
				}
			case "GET range":
				if !bytes.Equal(b, data[100:200]) {
					t.Fatal("GET range returned other bytes")
				}
			case "HEAD":
				if hdr.Get("Content-Length") != fmt.Sprint(len(data)) {
					t.Fatalf("HEAD Content-Length %s", hdr.Get("Content-Length"))
				}
			case "upload":
				var res rpc.BlobResult
				if err := json.Unmarshal(b, &res); err != nil || res.Hash != hash || res.Size != int64(len(data)) {
					t.Fatalf("PUT result %s: %v", b, err)
				}
			}
		})
	}
	if n := h.count(); n != 1 {
		t.Fatalf("%d blobs stored, want 1", n)
	}
}

func TestBlobNoStore(t *testing.T) {
	srv, err := rpc.New(&fakeService{}, rpc.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	req, _ := http.NewRequest("PUT", ts.URL+rpc.BlobPath+wire.ContentHash(nil).String(), strings.NewReader(""))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("PUT to a node without a blob store: %d, want 404 (clients then send base64)", resp.StatusCode)
	}
}

// rawPut opens a connection and sends the request line and headers of a
// PUT; the caller writes the body.
func rawPut(t *testing.T, addr, path string, hdr ...string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", path, addr, strings.Join(hdr, ""))
	return c, bufio.NewReader(c)
}

// TestBlobTooLargeMidStream: a chunked body is refused with 413 as soon as
// it passes the cap, while the client is still sending.
func TestBlobTooLargeMidStream(t *testing.T) {
	h := newBlobHarness(t, rpc.Options{MaxBlobBytes: 1 << 20})
	hash := wire.ContentHash([]byte("x"))
	c, br := rawPut(t, h.addr, rpc.BlobPath+hash.String(), "Transfer-Encoding: chunked\r\n")
	chunk := make([]byte, 64<<10)
	for sent := 0; sent <= 1<<20; sent += len(chunk) {
		fmt.Fprintf(c, "%x\r\n", len(chunk))
		c.Write(chunk)
		c.Write([]byte("\r\n"))
	}
	// The body is not finished (no last chunk): the answer comes anyway.
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || !bytes.Contains(b, []byte("nothing was stored")) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if h.count() != 0 {
		t.Fatal("a blob was stored")
	}
}

// TestBlobSlowBody: an upload that stalls loses its slot after the grace
// with 408, keeps nothing, and an honest upload from the same address
// then gets through.
func TestBlobSlowBody(t *testing.T) {
	h := newBlobHarness(t, rpc.Options{LargeMinRate: 64 << 10, LargeGrace: 300 * time.Millisecond, MaxBlobUploadsPerPeer: 1})
	data := randomBlob(3, 1<<20)
	hash := wire.ContentHash(data)
	c, br := rawPut(t, h.addr, rpc.BlobPath+hash.String(), fmt.Sprintf("Content-Length: %d\r\n", len(data)))
	c.Write(data[:10])
	waitFor(t, "the stalled upload holds a slot", func() bool { return h.srv.BlobUploadsInFlight() == 1 })
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 408 || !bytes.Contains(b, []byte("too slow")) {
		t.Fatalf("stalled upload: %d %s", resp.StatusCode, b)
	}
	if h.stored(hash) || h.count() != 0 {
		t.Fatal("a stalled upload left a blob")
	}
	if st, b, _ := h.do("PUT", rpc.BlobPath+hash.String(), bytes.NewReader(data), nil); st != 201 {
		t.Fatalf("honest upload after the stalled one: %d %s", st, b)
	}
}

// TestBlobTruncatedBody: a client that declares more than it sends and
// hangs up leaves nothing.
func TestBlobTruncatedBody(t *testing.T) {
	h := newBlobHarness(t, rpc.Options{})
	data := randomBlob(4, 500000)
	hash := wire.ContentHash(data)
	c, _ := rawPut(t, h.addr, rpc.BlobPath+hash.String(), fmt.Sprintf("Content-Length: %d\r\n", len(data)))
	c.Write(data[:200000])
	c.Close()
	waitFor(t, "the upload ends", func() bool { return h.srv.BlobUploadsInFlight() == 0 })
	if h.count() != 0 {
		t.Fatal("a truncated upload left a blob")
	}
}

// TestBlobConcurrentSameHash: many clients upload one blob at once; every
// one succeeds, exactly one creates it, and it is whole.
func TestBlobConcurrentSameHash(t *testing.T) {
	h := newBlobHarness(t, rpc.Options{MaxBlobUploadsPerPeer: 8})
	data := randomBlob(5, 2<<20)
	hash := wire.ContentHash(data)
	var wg sync.WaitGroup
	statuses := make(chan int, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var body io.Reader = bytes.NewReader(data)
			if i%2 == 1 {
				body = onlyReader{body}
			}
			req, _ := http.NewRequest("PUT", h.url+rpc.BlobPath+hash.String(), body)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		}(i)
	}
	wg.Wait()
	close(statuses)
	created := 0
	for st := range statuses {
		switch st {
		case 201:
			created++
		case 200:
		default:
			t.Fatalf("status %d", st)
		}
	}
	if created != 1 {
		t.Fatalf("%d uploads report 201, want 1", created)
	}
	got, err := h.blobs.Get(context.Background(), hash)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored blob: %v", err)
	}
}

// TestPutBlobCountsPayloadIn: a blob stored by PUT /blobs is counted once in
// tenzro_payload_bytes_total{direction="in"} (a submission naming it by hash
// carries no bytes itself); a repeated PUT of a held blob and a refused one
// count nothing.
func TestPutBlobCountsPayloadIn(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := rpc.NewNodeMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := newBlobHarness(t, rpc.Options{OnBlobIn: m.PayloadIn, MaxBlobBytes: 1 << 20})
	in := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "tenzro_payload_bytes_total" {
				continue
			}
			for _, mt := range mf.GetMetric() {
				for _, l := range mt.GetLabel() {
					if l.GetName() == "direction" && l.GetValue() == "in" {
						return mt.GetCounter().GetValue()
					}
				}
			}
		}
		t.Fatal("no tenzro_payload_bytes_total{direction=in}")
		return 0
	}
	b := randomBlob(7, 5000)
	hash := wire.ContentHash(b)
	for i, want := range []float64{5000, 5000} { // the second PUT finds it held
		if st, body, _ := h.do(http.MethodPut, rpc.BlobPath+hash.String(), bytes.NewReader(b), nil); st/100 != 2 {
			t.Fatalf("PUT %d: %d %s", i, st, body)
		}
		if got := in(); got != want {
			t.Fatalf("after PUT %d: payload in = %v, want %v", i, got, want)
		}
	}
	other := wire.ContentHash(randomBlob(9, 100))
	if st, _, _ := h.do(http.MethodPut, rpc.BlobPath+other.String(), bytes.NewReader(randomBlob(8, 100)), nil); st/100 == 2 {
		t.Fatalf("a body that is not the named blob was stored: %d", st)
	}
	if got := in(); got != 5000 {
		t.Fatalf("after a refused PUT: payload in = %v, want 5000", got)
	}
}
