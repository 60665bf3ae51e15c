package syncer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// TestMain lets this test binary serve as a plugin worker
// (TestReceiptSameInWorkers re-executes it).
func TestMain(m *testing.M) {
	plugins.ServeWorkerIfChild()
	os.Exit(m.Run())
}

// receiptWith runs a two-round run (M=3, K=3, two fragments, a robust rule
// and the Nesterov outer step, all Wasm plugins) on eng and returns its
// receipt's bytes.
func receiptWith(t *testing.T, eng syncer.Engine) []byte {
	t.Helper()
	kv, err := store.OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, kv, eng)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	raw := strings.Replace(string(spec(h.task, h.sponsor.DID.String(), 3, 3, 2, 2)), `"aggregation":"Mean"`, `"aggregation":"CoordinateMedian"`, 1)
	if err := h.post([]byte(raw), initWeights(t, 2, 16)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		h.faucet(h.tr[i].DID.String(), "200000000000000000000")
		if err := h.enroll(i, "100000000000000000000"); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 2; round++ {
		for f := 0; f < 2; f++ {
			for i := 0; i < 3; i++ {
				if err := h.submit(h.gradient(i, round, f, 1+float32(i))); err != nil {
					t.Fatalf("round %d fragment %d trainer %d: %v", round, f, i, err)
				}
			}
		}
		if err := h.node.Tick(h.ctx); err != nil { // every trainer is in: the timer commits
			t.Fatal(err)
		}
	}
	if st := h.run().Status; st != wire.StatusSealed {
		t.Fatalf("status %s", st)
	}
	rc, err := h.node.GetReceipt(h.ctx, h.task)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rc)
	return b
}

// TestReceiptSameInWorkers: a run whose plugins execute in worker
// processes seals to the same receipt bytes as one whose plugins run in
// process.
func TestReceiptSameInWorkers(t *testing.T) {
	ctx := context.Background()
	local, err := plugins.NewEngine(ctx, plugins.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close(ctx)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	remote, err := plugins.NewEngine(ctx, plugins.Config{Workers: 1, WorkerCommand: []string{exe}})
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close(ctx)
	a, b := receiptWith(t, local), receiptWith(t, remote)
	if !bytes.Equal(a, b) {
		t.Fatalf("receipts differ:\n%s\n%s", a, b)
	}
}
