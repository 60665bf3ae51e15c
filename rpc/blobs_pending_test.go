package rpc_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire"
)

// TestGetPendingBlob: GET, HEAD and a Range GET of a blob whose durable
// write is still running (a syncer's new weights, store.WriteBlobAfter)
// answer its exact bytes from memory, and the same once it is written.
func TestGetPendingBlob(t *testing.T) {
	held, release := make(chan wire.Hash, 1), make(chan struct{})
	bs, err := store.OpenBlobs(t.TempDir(), store.BlobOptions{Logger: slog.New(slog.DiscardHandler),
		HoldWrite: func(h wire.Hash) { held <- h; <-release }})
	if err != nil {
		t.Fatal(err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
		bs.Close()
	})
	srv, err := rpc.New(&fakeService{}, rpc.Options{Blobs: bs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	data := randomBlob(42, 1<<20+17)
	h, err := bs.WriteBlobAfter(context.Background(), int64(len(data)), func(w io.Writer) error { _, err := w.Write(data); return err })
	if err != nil {
		t.Fatal(err)
	}
	<-held
	get := func(method string, hdr map[string]string) (int, []byte, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+rpc.BlobPath+h.String(), nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, resp.Header
	}
	check := func(when string) {
		t.Helper()
		if code, b, _ := get(http.MethodGet, nil); code != http.StatusOK || wire.ContentHash(b) != h {
			t.Fatalf("%s: GET %d, %d bytes hashing to %s, want %s", when, code, len(b), wire.ContentHash(b), h)
		}
		if code, b, _ := get(http.MethodGet, map[string]string{"Range": "bytes=1000-1999"}); code != http.StatusPartialContent || string(b) != string(data[1000:2000]) {
			t.Fatalf("%s: Range GET %d, %d bytes", when, code, len(b))
		}
		if code, _, hd := get(http.MethodHead, nil); code != http.StatusOK || hd.Get("Content-Length") != strconv.Itoa(len(data)) {
			t.Fatalf("%s: HEAD %d, Content-Length %s", when, code, hd.Get("Content-Length"))
		}
	}
	if !bs.Pending(h) {
		t.Fatal("not pending while held")
	}
	check("pending")
	close(release)
	released = true
	if err := bs.Durable(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	check("written")
}
