package gossip

import (
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// TestProviderHint: a node that never met the provider fetches a blob from
// it with the addresses its hint carries; a bare peer id, its own id and
// garbage parts resolve as they should.
func TestProviderHint(t *testing.T) {
	ctx := testCtx(t)
	blob := []byte("payload bytes")
	h := wire.ContentHash(blob)
	provider := newNode(t, ctx, Config{}, Handlers{Blob: func(x wire.Hash) ([]byte, bool) { return blob, x == h }})
	syncerNode := newNode(t, ctx, Config{}, Handlers{})
	hint := provider.ProviderHint()
	if !strings.Contains(hint, "/p2p/"+provider.PeerID()) || len(hint) > MaxProviderHint {
		t.Fatalf("hint %q", hint)
	}
	ids := syncerNode.ResolveProvider(hint + ",garbage,/ip4/x," + syncerNode.PeerID())
	if len(ids) != 1 || ids[0] != provider.PeerID() {
		t.Fatalf("resolved %v", ids)
	}
	got, err := syncerNode.FetchBlob(ctx, ids[0], h)
	if err != nil || string(got) != string(blob) {
		t.Fatalf("fetch from the hinted provider: %v %q", err, got)
	}
	if ids := syncerNode.ResolveProvider(provider.PeerID()); len(ids) != 1 || ids[0] != provider.PeerID() {
		t.Fatalf("bare peer id resolved to %v", ids)
	}
}
