package gossip

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/tenzro/train/wire"
)

// TestNonceRequest: a node without a Nonce handler (a light node) asks its
// peers; the one serving NonceProtocol answers, and its refusals arrive with
// their kind and message.
func TestNonceRequest(t *testing.T) {
	ctx := testCtx(t)
	var mu sync.Mutex
	var got []wire.NonceParams
	syncerNode := newNode(t, ctx, Config{}, Handlers{Nonce: func(_ context.Context, p wire.NonceParams) (*wire.NonceResult, error) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
		if p.TaskID == "unknown" {
			return nil, &Refusal{Kind: 2, Message: `task "unknown" not found`}
		}
		return &wire.NonceResult{Nonce: []byte("0123456789abcdef"), Shard: 3, Round: 1, ModelHash: wire.ContentHash([]byte("m"))}, nil
	}})
	other := newNode(t, ctx, Config{}, Handlers{}) // serves no nonces: skipped
	light := newNode(t, ctx, Config{BootNodes: []string{other.Addrs()[0]}}, Handlers{})

	if _, err := light.RequestNonce(ctx, wire.NonceParams{TaskID: "t", DID: "d"}); !errors.Is(err, ErrNoNoncePeer) {
		t.Fatalf("without the syncer's node: err %v, want ErrNoNoncePeer", err)
	}
	connect(t, ctx, light, syncerNode)
	res, err := light.RequestNonce(ctx, wire.NonceParams{TaskID: "t", DID: "d"})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Nonce) != "0123456789abcdef" || res.Shard != 3 || res.Round != 1 || res.ModelHash != wire.ContentHash([]byte("m")) {
		t.Fatalf("nonce result %+v", res)
	}
	_, err = light.RequestNonce(ctx, wire.NonceParams{TaskID: "unknown", DID: "d"})
	var r *Refusal
	if !errors.As(err, &r) || r.Kind != 2 || r.Message != `task "unknown" not found` {
		t.Fatalf("refusal: %v (%#v)", err, r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != (wire.NonceParams{TaskID: "t", DID: "d"}) {
		t.Fatalf("syncer saw %+v", got)
	}
}

// TestNonceServeStrict: the serving side resets malformed, oversize or
// unknown-member requests without calling the handler.
func TestNonceServeStrict(t *testing.T) {
	ctx := testCtx(t)
	var called atomic.Int32
	srv := newNode(t, ctx, Config{}, Handlers{Nonce: func(context.Context, wire.NonceParams) (*wire.NonceResult, error) {
		called.Add(1)
		return &wire.NonceResult{}, nil
	}})
	cli := newNode(t, ctx, Config{}, Handlers{})
	connect(t, ctx, cli, srv)
	for _, req := range []string{
		`{"task_id":"t","did":"d","extra":1}`,
		`{"task_id":"t","did":"d"} {}`,
		`not json`,
		`{"task_id":"` + strings.Repeat("x", MaxNonceMessage) + `"}`,
	} {
		s, err := cli.h.NewStream(ctx, srv.h.ID(), protocol.ID(NonceProtocol))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = s.Write([]byte(req))
		_ = s.CloseWrite()
		b, _ := io.ReadAll(s)
		_ = s.Close()
		if len(b) != 0 {
			t.Errorf("request %.40q answered %q, want a reset", req, b)
		}
	}
	if called.Load() != 0 {
		t.Fatalf("handler called %d times for malformed requests", called.Load())
	}
	// A well-formed one is answered.
	s, err := cli.h.NewStream(ctx, srv.h.ID(), protocol.ID(NonceProtocol))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Write([]byte(`{"task_id":"t","did":"d"}`))
	_ = s.CloseWrite()
	var resp nonceResponse
	if err := readStrict(s, &resp); err != nil || resp.Result == nil || resp.Error != nil {
		b, _ := json.Marshal(resp)
		t.Fatalf("answer %s, err %v", b, err)
	}
	_ = s.Close()
	if called.Load() != 1 {
		t.Fatalf("handler called %d times", called.Load())
	}
}
