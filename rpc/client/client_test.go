package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/rpc/client"
)

func TestTransportFailures(t *testing.T) {
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    string
		code    int
	}{
		{"not JSON", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(502)
			w.Write([]byte("bad gateway"))
		}, "HTTP 502", 0},
		{"rpc error with HTTP 413", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(413)
			w.Write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"request body exceeds the limit","data":{"limit":10}}}`))
		}, "exceeds the limit", -32600},
		{"wrong id", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"jsonrpc":"2.0","id":99,"result":{}}`))
		}, "malformed", 0},
		{"no result", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"jsonrpc":"2.0","id":1}`))
		}, "neither result nor error", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := httptest.NewServer(c.handler)
			defer ts.Close()
			_, err := client.New(ts.URL).Info(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) || client.CodeOf(err) != c.code {
				t.Fatalf("got %v (code %d), want %q code %d", err, client.CodeOf(err), c.want, c.code)
			}
			var e *client.Error
			if c.code != 0 && (!errors.As(err, &e) || e.HTTPStatus != 413) {
				t.Fatalf("HTTP status not kept: %#v", err)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	block := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer ts.Close()
	defer close(block)
	_, err := client.New(ts.URL, client.WithTimeout(50*time.Millisecond)).Info(context.Background())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want deadline exceeded, got %v", err)
	}
}
