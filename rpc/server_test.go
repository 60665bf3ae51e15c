package rpc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/wire"
)

type harness struct {
	svc  *fakeService
	srv  *rpc.Server
	http *httptest.Server
	logs *bytes.Buffer
}

type syncBuf struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

func newHarness(t testing.TB, opts rpc.Options) *harness {
	t.Helper()
	h := &harness{svc: &fakeService{}}
	lb := &syncBuf{}
	h.logs = &lb.Buffer
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(lb, nil))
	}
	srv, err := rpc.New(h.svc, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	h.http = httptest.NewServer(srv)
	t.Cleanup(func() {
		h.http.Close()
		srv.Close()
	})
	return h
}

func fullOptions() rpc.Options {
	return rpc.Options{VerifyReceipt: fakeVerify, Plugins: fakePlugins{}, Attest: fakeAttest{}, Challenges: fakeChallenges{}}
}

func (h *harness) post(t testing.TB, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.http.URL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type rpcResp struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func call(method, params string) string {
	if params == "" {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q}`, method)
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":%s}`, method, params)
}

func TestErrorPaths(t *testing.T) {
	small := fullOptions()
	large := fullOptions()
	large.LargeRequestBytes = 16 // every request takes the large-body path
	for _, o := range []struct {
		name string
		opts rpc.Options
	}{{"bridge path", small}, {"large path", large}} {
		t.Run(o.name, func(t *testing.T) { testErrorPaths(t, o.opts) })
	}
}

func testErrorPaths(t *testing.T, opts rpc.Options) {
	h := newHarness(t, opts)
	hash := wire.ContentHash([]byte("x")).String()
	cases := []struct {
		name     string
		body     string
		status   int
		code     int    // 0: success
		contains string // in message (error) or result (success)
	}{
		{"malformed JSON", `{"jsonrpc":"2.0","id":1,"method":`, 200, -32700, "unexpected end of JSON input"},
		{"trailing garbage", `{"jsonrpc":"2.0","id":1,"method":"tenzro_node_info"} xyz`, 200, -32700, "after top-level value"},
		{"not an object", `"hello"`, 200, -32600, "not a JSON object"},
		{"empty batch", `[]`, 200, -32600, "empty batch"},
		{"wrong version", `{"jsonrpc":"1.0","id":1,"method":"tenzro_node_info"}`, 200, -32600, "version"},
		{"unknown method", call("tenzro_nope", `{}`), 200, -32601, `"tenzro_nope" not found`},
		{"unknown field", call(wire.MethodGetRun, `{"task_id":"t1","extra":1}`), 200, -32602, `unknown field "extra"`},
		{"duplicate envelope member", `{"jsonrpc":"2.0","id":1,"method":"tenzro_node_info","method":"tenzro_training_getRun"}`, 200, -32600, `duplicate member "method" in the top-level object`},
		{"duplicate member in a batch element", `[{"jsonrpc":"2.0","id":1,"id":2,"method":"tenzro_node_info"}]`, 200, -32600, `duplicate member "id"`},
		{"duplicate member", call(wire.MethodGetRun, `{"task_id":"t1","task_id":"t2"}`), 200, -32602, `duplicate member "task_id" in the top-level object`},
		{"duplicate nested member", call(wire.MethodPostTask, `{"spec":{"a":1,"a":2},"nonce":1,"signature":"00"}`), 200, -32602, `duplicate member "a" in object spec`},
		{"wrong type", call(wire.MethodGetWeights, `{"task_id":"t1","fragment_index":"one"}`), 200, -32602, "fragment_index"},
		{"positional params", call(wire.MethodGetRun, `["t1"]`), 200, -32602, "by-position"},
		{"missing params", call(wire.MethodGetRun, ""), 200, -32602, "missing params"},
		{"missing field", call(wire.MethodGetRun, `{}`), 200, -32602, `missing required param "task_id"`},
		{"bad hash", call(wire.MethodGetPayload, `{"hash":"abc"}`), 200, -32602, "want 64 hex digits"},
		{"bad base64", call(wire.MethodSubmitGradient, `{"task_id":"t","trainer_did":"d","round":0,"fragment_index":0,"gradient_payload":"!!","payload_hash":"`+hash+`","signature":"00"}`), 200, -32602, "illegal base64"},
		{"params on no-param method", call(wire.MethodNodeInfo, `{"x":1}`), 200, -32602, "takes no params"},
		{"not found", call(wire.MethodGetRun, `{"task_id":"missing"}`), 200, rpc.CodeNotFound, `run "missing" not found`},
		{"conflict", call(wire.MethodFinalizeRound, `{"task_id":"taken","syncer_did":"d","round":3,"nonce":1,"signature":"00"}`), 200, rpc.CodeConflict, "round 3 is closed"},
		{"funds", call(wire.MethodEnrollTrainer, `{"task_id":"t","trainer_did":"d","stake":"999999","nonce":2,"signature":"00"}`), 200, rpc.CodeFunds, "above balance"},
		{"unauthorized", call(wire.MethodRegisterSyncer, `{"did":"d","stake":"1","nonce":1,"signature":"00"}`), 200, rpc.CodeUnauthorized, "nonce"},
		{"disabled", call(wire.MethodFaucet, `{"did":"d","amount":"0"}`), 200, rpc.CodeDisabled, "--dev"},
		{"attestation", call(wire.MethodSubmitEvidence, `{}`), 200, rpc.CodeAttestation, "debug attribute"},
		{"internal hidden", call(wire.MethodGetRun, `{"task_id":"boom"}`), 200, -32603, "internal error (node log ref"},
		{"panic hidden", call(wire.MethodGetRun, `{"task_id":"panic"}`), 200, -32603, "internal error"},
		{"signature missing", call(wire.MethodLeaveRun, `{"task_id":"t","trainer_did":"d","nonce":3}`), 200, -32602, `"signature"`},
		{"bad root", call(wire.MethodVerifyReceipt, `{"receipt":{},"root":"zz"}`), 200, -32602, "root"},
		{"forged param ref", call(wire.MethodGetRun, `{"\u0000tenzro_params_ref":"00"}`), 200, -32602, "unknown field"},
		{"case-folded field", call(wire.MethodGetRun, `{"Task_ID":"t1"}`), 200, -32602, `unknown field "Task_ID"`},
		{"extra envelope field", `{"jsonrpc":"2.0","id":1,"method":"tenzro_node_info","extra":1}`, 200, -32600, "extra"},
		{"ok get run", call(wire.MethodGetRun, `{"task_id":"t1"}`), 200, 0, `"trainer_metrics"`},
		{"ok list runs no params", call(wire.MethodListRuns, ""), 200, 0, `"t1"`},
		{"ok empty list is []", call(wire.MethodListSyncers, ""), 200, 0, `[]`},
		{"ok node info with {}", call(wire.MethodNodeInfo, `{}`), 200, 0, `"did:tenzro:machine:zNode"`},
		{"ok attest raw", call(wire.MethodGetPolicy, `{"a":1}`), 200, 0, `{"params":{"a":1}}`},
		{"ok attest nonce", call(wire.MethodRequestNonce, `{"task_id":"t","did":"d"}`), 200, 0, `"nonce":"AQID"`},
		{"ok verify", call(wire.MethodVerifyReceipt, `{"receipt":{"run_root":"`+hash+`"},"root":"0x`+hash+`"}`), 200, 0, `"valid":1`},
		{"ok plugin get", call(wire.MethodGetPlugin, `{"hash":"`+hash+`"}`), 200, 0, `"module":"AGFzbQ=="`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := h.post(t, c.body)
			if status != c.status {
				t.Fatalf("HTTP %d, want %d: %s", status, c.status, body)
			}
			var r rpcResp
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatalf("response is not JSON: %v: %s", err, body)
			}
			if c.code == 0 {
				if r.Error != nil {
					t.Fatalf("error %d %s", r.Error.Code, r.Error.Message)
				}
				if !strings.Contains(string(r.Result), c.contains) {
					t.Fatalf("result %s lacks %s", r.Result, c.contains)
				}
				return
			}
			if r.Error == nil {
				t.Fatalf("no error in %s", body)
			}
			if r.Error.Code != c.code || !strings.Contains(r.Error.Message, c.contains) {
				t.Fatalf("got %d %q, want %d containing %q", r.Error.Code, r.Error.Message, c.code, c.contains)
			}
		})
	}
	if strings.Contains(h.logs.String(), "disk on fire") == false {
		t.Error("internal error was not logged")
	}
}

func TestInternalErrorsDoNotLeak(t *testing.T) {
	h := newHarness(t, rpc.Options{})
	_, body := h.post(t, call(wire.MethodGetRun, `{"task_id":"boom"}`))
	if bytes.Contains(body, []byte("secret")) || bytes.Contains(body, []byte("pebble")) {
		t.Fatalf("internal detail leaked: %s", body)
	}
}

func TestOversizedBody(t *testing.T) {
	h := newHarness(t, rpc.Options{MaxRequestBytes: 1024, LargeRequestBytes: 512})
	big := call(wire.MethodGetRun, `{"task_id":"`+strings.Repeat("a", 2000)+`"}`)
	status, body := h.post(t, big)
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("HTTP %d: %s", status, body)
	}
	var r rpcResp
	if err := json.Unmarshal(body, &r); err != nil || r.Error == nil || r.Error.Code != -32600 || !strings.Contains(r.Error.Message, "limit of 1024 bytes") {
		t.Fatalf("bad error: %s", body)
	}

	// Without Content-Length (chunked) the limit holds while reading.
	pr, pw := io.Pipe()
	go func() { pw.Write([]byte(big)); pw.Close() }()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL, pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !bytes.Contains(b, []byte("limit of 1024 bytes")) {
		t.Fatalf("chunked: HTTP %d %s", resp.StatusCode, b)
	}
}

func TestHTTPLevelRefusals(t *testing.T) {
	h := newHarness(t, rpc.Options{})
	resp, err := http.Get(h.http.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: HTTP %d", resp.StatusCode)
	}
	status, _ := h.post(t, call(wire.MethodNodeInfo, ""), "Content-Type", "text/plain")
	if status != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: HTTP %d", status)
	}
}

func TestBatch(t *testing.T) {
	h := newHarness(t, rpc.Options{MaxBatch: 4})
	body := `[` + strings.Join([]string{
		`{"jsonrpc":"2.0","id":"a","method":"tenzro_node_info"}`,
		`{"jsonrpc":"2.0","id":"b","method":"tenzro_training_getRun","params":{"task_id":"missing"}}`,
		`{"jsonrpc":"2.0","method":"tenzro_node_info"}`,
		`1`,
	}, ",") + `]`
	status, b := h.post(t, body)
	if status != 200 {
		t.Fatalf("HTTP %d %s", status, b)
	}
	var rs []rpcResp
	if err := json.Unmarshal(b, &rs); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if len(rs) != 3 {
		t.Fatalf("want 3 responses (no reply to the notification), got %d: %s", len(rs), b)
	}
	byID := map[string]rpcResp{}
	for _, r := range rs {
		byID[string(r.ID)] = r
	}
	if r := byID[`"a"`]; r.Error != nil || !bytes.Contains(r.Result, []byte("zNode")) {
		t.Errorf("a: %+v", r)
	}
	if r := byID[`"b"`]; r.Error == nil || r.Error.Code != rpc.CodeNotFound {
		t.Errorf("b: %+v", r)
	}
	if r := byID[`null`]; r.Error == nil || r.Error.Code != -32600 {
		t.Errorf("invalid element: %s", b)
	}

	status, b = h.post(t, `[`+strings.Repeat(`{"jsonrpc":"2.0","id":1,"method":"tenzro_node_info"},`, 5)+`1]`)
	if status != 200 || !bytes.Contains(b, []byte("exceeds the limit of 4")) {
		t.Fatalf("oversized batch: %d %s", status, b)
	}

	// A notification alone gets 204 and no body.
	status, b = h.post(t, `{"jsonrpc":"2.0","method":"tenzro_node_info"}`)
	if status != http.StatusNoContent || len(b) != 0 {
		t.Fatalf("notification: %d %q", status, b)
	}
}

func TestLargeRequestsAreBounded(t *testing.T) {
	// One slot; a second large request waits for it and gets CodeBusy when
	// LargeWait passes. The first is held inside the service.
	block := make(chan struct{})
	entered := make(chan struct{})
	svc := &blockingService{fakeService: &fakeService{}, entered: entered, block: block}
	srv, err := rpc.New(svc, rpc.Options{LargeRequestBytes: 64, MaxLargeInFlight: 1, LargeWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	large := call(wire.MethodGetRun, `{"task_id":"`+strings.Repeat("a", 100)+`"}`)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Post(ts.URL, "application/json", strings.NewReader(large))
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	resp, err := http.Post(ts.URL, "application/json", strings.NewReader(large))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !bytes.Contains(b, []byte(fmt.Sprint(rpc.CodeBusy))) {
		t.Fatalf("second large request: %d %s", resp.StatusCode, b)
	}
	// Small requests are not gated.
	resp, err = http.Post(ts.URL, "application/json", strings.NewReader(call(wire.MethodNodeInfo, "")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("small request while a large one runs: %d", resp.StatusCode)
	}
	close(block)
	<-done
}

type blockingService struct {
	*fakeService
	entered chan struct{}
	block   chan struct{}
}

func (b *blockingService) GetRun(ctx context.Context, task string) (*wire.RunView, error) {
	close(b.entered)
	<-b.block
	return &wire.RunView{TaskID: task}, nil
}
