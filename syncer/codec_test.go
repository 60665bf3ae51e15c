package syncer_test

import (
	"strings"
	"testing"

	"github.com/tenzro/train/store"
)

// TestCompressionNeedsADecoder: an engine without codec plugins (the native
// one) refuses a compressed spec at posting, precisely, and posts nothing.
func TestCompressionNeedsADecoder(t *testing.T) {
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	raw := spec(h.task, h.sponsor.DID.String(), 8, 6, 4, 4)
	raw = []byte(strings.Replace(string(raw), `"min_throughput":null`, `"min_throughput":null,"compression":{"codec":"int4-block","block":64}`, 1))
	err := h.post(raw, initWeights(t, 4, 16))
	if err == nil || !strings.Contains(err.Error(), "does not run codec plugins") {
		t.Fatalf("err = %v", err)
	}
	if _, err := h.node.GetRun(h.ctx, h.task); err == nil {
		t.Fatal("a refused posting created the run")
	}
	// A malformed compression field is refused by the spec's own validation.
	raw = []byte(strings.Replace(string(raw), `"block":64`, `"block":"64"`, 1))
	if err := h.post(raw, initWeights(t, 4, 16)); err == nil || !strings.Contains(err.Error(), "compression: parameter block: want a number") {
		t.Fatalf("err = %v", err)
	}
}
