package syncer_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// TestSubmitByReference runs a round whose initial weights and payloads
// were uploaded to a file blob store first and are named by hash only (the
// PUT-then-submit path), beside an inline (base64) submission.
func TestSubmitByReference(t *testing.T) {
	kv, _ := store.OpenInMemory()
	bs, err := store.OpenBlobs(t.TempDir(), store.BlobOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	h := newHarness(t, kv)
	h.blobs = bs
	h.open()
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")

	// Initial weights by reference: refused until uploaded.
	raw := spec(h.task, h.sponsor.DID.String(), 3, 3, 2, 1)
	weights := initWeights(t, 2, 16)
	wh := wire.ContentHash(weights)
	canon, _ := jcsOf(raw)
	post := func() error {
		p := &wire.PostTaskParams{Spec: raw, InitWeightsHash: wh}
		p.Nonce = h.nextNonce()
		p.Signature = h.sponsor.Sign(p.Preimage(h.sponsor.DID.String(), wire.SpecHash(canon), wh))
		_, err := h.node.PostTask(h.ctx, p)
		return err
	}
	if err := post(); syncer.KindOf(err) != syncer.KindNotFound || !strings.Contains(err.Error(), "PUT /blobs/"+wh.String()) {
		t.Fatalf("postTask naming weights that were never uploaded: %v", err)
	}
	if err := bs.Put(h.ctx, wh, weights); err != nil {
		t.Fatal(err)
	}
	if err := post(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		h.faucet(h.tr[i].DID.String(), "1000")
		if err := h.enroll(i, "1000"); err != nil {
			t.Fatal(err)
		}
	}

	for f := 0; f < 2; f++ {
		for i := 0; i < 3; i++ {
			g := h.gradient(i, 0, f, 1+float32(i))
			payload := g.GradientPayload
			if i == 2 { // the seed's inline form, beside the others
				if err := h.submit(g); err != nil {
					t.Fatal(err)
				}
				if got, err := bs.Get(h.ctx, g.PayloadHash); err != nil || !bytes.Equal(got, payload) {
					t.Fatalf("inline payload not in the blob store: %v", err)
				}
				continue
			}
			g.GradientPayload = nil
			if err := h.submit(g); syncer.KindOf(err) != syncer.KindNotFound || !strings.Contains(err.Error(), "PUT /blobs/") {
				t.Fatalf("submission naming a payload that was never uploaded: %v", err)
			}
			if _, err := bs.PutStream(h.ctx, g.PayloadHash, bytes.NewReader(payload), 0); err != nil {
				t.Fatal(err)
			}
			if err := h.submit(g); err != nil {
				t.Fatalf("trainer %d fragment %d by reference: %v", i, f, err)
			}
			if err := h.submit(g); syncer.KindOf(err) != syncer.KindConflict {
				t.Fatalf("the same submission again: %v", err)
			}
		}
	}
	g := h.gradient(0, 0, 0, 1)
	g.GradientPayload, g.PayloadHash = nil, wire.Hash{}
	if err := h.submit(g); syncer.KindOf(err) != syncer.KindInvalid {
		t.Fatalf("no payload and no hash: %v", err)
	}
	// Every active trainer is in: a tick commits the round.
	if err := h.node.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	v := h.run()
	if v.Status != wire.StatusSealed {
		t.Fatalf("run is %s after its only round", v.Status)
	}
	// The receipt replays from the blob store.
	rc, err := h.node.GetReceipt(h.ctx, h.task)
	if err != nil {
		t.Fatal(err)
	}
	raw2, _ := json.Marshal(rc)
	rep, err := syncer.Replay(h.ctx, raw2, h.transcript(), h.node, syncer.NewNativeEngine(), nil)
	if err != nil || !rep.Match {
		t.Fatalf("replay from the file blob store: %+v, %v", rep, err)
	}
}
