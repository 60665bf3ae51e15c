package rpc_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tenzro/train/rpc"
)

// FuzzServeHTTP feeds arbitrary bodies to the server: it must never panic,
// must always answer JSON (or 204 for notifications), and every error code
// must be one the server documents.
func FuzzServeHTTP(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tenzro_node_info"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tenzro_training_getRun","params":{"task_id":"t"}},{"jsonrpc":"2.0","method":"x"}]`,
		`{"jsonrpc":"2.0","id":1,"method":"tenzro_training_submitOuterGradient","params":{"task_id":"t","gradient_payload":"AAAA","round":-1}}`,
		`{"jsonrpc":"2.0","id":{},"method":"tenzro_node_info"}`,
		`[]`, `[1,2]`, `{`, `null`, `"x"`, ``, `{"jsonrpc":"2.0","id":1,"method":"tenzro_training_getRun","params":["a"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"tenzro_training_verifyReceipt","params":{"receipt":[],"root":"0x"}}`,
	} {
		f.Add([]byte(s))
	}
	// Two servers: the bridge path, and one where every body takes the
	// large-request path (large.go).
	var srvs []*rpc.Server
	for _, largeAt := range []int64{0, 16} {
		srv, err := rpc.New(&fakeService{}, rpc.Options{VerifyReceipt: fakeVerify, Plugins: fakePlugins{}, Attest: fakeAttest{},
			MaxRequestBytes: 1 << 16, LargeRequestBytes: largeAt, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			f.Fatal(err)
		}
		defer srv.Close()
		srvs = append(srvs, srv)
	}
	known := map[int]bool{}
	for _, c := range []int{rpc.CodeParseError, rpc.CodeInvalidRequest, rpc.CodeMethodNotFound, rpc.CodeInvalidParams, rpc.CodeInternal,
		rpc.CodeNotFound, rpc.CodeUnauthorized, rpc.CodeConflict, rpc.CodeFunds, rpc.CodeDisabled, rpc.CodeAttestation} {
		known[c] = true
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if strings.Contains(string(body), `"panic"`) {
			return // the fake service panics on purpose for that task id
		}
		for _, srv := range srvs {
			check(t, srv, body, known)
		}
	})
}

func check(t *testing.T, srv *rpc.Server, body []byte, known map[int]bool) {
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if rec.Code == http.StatusNoContent {
		return
	}
	out := rec.Body.Bytes()
	var one struct {
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	var many []json.RawMessage
	if json.Unmarshal(out, &many) == nil {
		for _, m := range many {
			if err := json.Unmarshal(m, &one); err != nil {
				t.Fatalf("batch element is not an object: %s", m)
			}
			if one.Error != nil && !known[one.Error.Code] {
				t.Fatalf("undocumented code %d for %q", one.Error.Code, body)
			}
		}
		return
	}
	if err := json.Unmarshal(out, &one); err != nil {
		t.Fatalf("HTTP %d: response is not JSON: %q", rec.Code, out)
	}
	if one.Error != nil && !known[one.Error.Code] {
		t.Fatalf("undocumented code %d for %q: %s", one.Error.Code, body, out)
	}
}
