package main

import (
	"bytes"
	"context"
	"log/slog"
	"math/big"
	"os"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// policyChain is the chain state the policy reads: balances, one run and
// its transcript.
type policyChain struct {
	syncer.Service
	balances map[string]string
	run      *wire.RunView
	tr       []wire.RoundCommit
}

func (c *policyChain) Balance(_ context.Context, d string) (*wire.Balance, error) {
	b, ok := c.balances[d]
	if !ok {
		return nil, machine.Errf(machine.KindNotFound, "no account %s", d)
	}
	return &wire.Balance{DID: d, Balance: b}, nil
}

func (c *policyChain) GetRun(_ context.Context, task string) (*wire.RunView, error) {
	if c.run == nil || task != c.run.TaskID {
		return nil, machine.Errf(machine.KindNotFound, "no run %s", task)
	}
	return c.run, nil
}

func (c *policyChain) ListRuns(context.Context, wire.ListRunsParams) ([]wire.RunSummary, error) {
	if c.run == nil {
		return nil, nil
	}
	return []wire.RunSummary{{TaskID: c.run.TaskID, Status: c.run.Status}}, nil
}

func (c *policyChain) GetTranscript(context.Context, string) ([]wire.RoundCommit, error) {
	return c.tr, nil
}

// The node's upload policy: funding by balance (price per byte, capped by
// the per-DID quota) or by enrolment in the named active run; the ledger
// survives a restart; the collector keeps what a record references, deletes
// expired unreferenced uploads and the payloads of final rounds.
func TestBlobPolicyFundingAndCollection(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	blobs, err := store.OpenBlobs(dir, store.BlobOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	const (
		rich    = "did:tenzro:machine:zRich"
		poor    = "did:tenzro:machine:zPoor"
		trainer = "did:tenzro:machine:zTrainer"
	)
	chain := &policyChain{balances: map[string]string{rich: "5000000000000", poor: "999999999"}, // 5000 bytes, 0 bytes at 10^9/byte
		run: &wire.RunView{TaskID: "run-1", Status: wire.StatusRunning, Trainers: []wire.TrainerView{{DID: trainer}}, TaskSpec: []byte(`{"sponsor_did":"x"}`)}}
	log := slog.New(slog.DiscardHandler)
	price := big.NewInt(1_000_000_000)
	p, err := newBlobPolicy(ctx, chain, blobs, func(context.Context) string { return "c" }, price, 8000, time.Hour, log)
	if err != nil {
		t.Fatal(err)
	}
	upload := func(d, task string, b []byte) error {
		h := wire.ContentHash(b)
		done, err := p.Reserve(ctx, d, task, h, int64(len(b)))
		if err != nil {
			return err
		}
		_, err = blobs.PutStream(ctx, h, bytes.NewReader(b), int64(len(b)))
		done(err == nil)
		return err
	}
	blob := func(i byte, n int) []byte { return bytes.Repeat([]byte{i}, n) }
	if err := upload(poor, "", blob(1, 10)); machine.KindOf(err) != machine.KindFunds {
		t.Fatalf("balance below the price of one byte: %v", err)
	}
	if err := upload(rich, "", blob(2, 3000)); err != nil {
		t.Fatal(err)
	}
	if err := upload(rich, "", blob(3, 3000)); machine.KindOf(err) != machine.KindFunds {
		t.Fatalf("past the balance's 5000 bytes: %v", err)
	}
	if err := upload(trainer, "run-1", blob(4, 8000)); err != nil {
		t.Fatalf("enrolled trainer, up to the quota: %v", err)
	}
	if err := upload(trainer, "run-1", blob(5, 1)); machine.KindOf(err) != machine.KindFunds {
		t.Fatalf("enrolled trainer past the quota: %v", err)
	}
	if err := upload(trainer, "", blob(5, 1)); machine.KindOf(err) != machine.KindFunds {
		t.Fatalf("trainer without a run and without balance: %v", err)
	}
	if got := p.pendingBytes(); got != 11000 {
		t.Fatalf("pending %d, want 11000", got)
	}
	// A restart rebuilds the quotas from the ledger.
	p2, err := newBlobPolicy(ctx, chain, blobs, func(context.Context) string { return "c" }, price, 8000, time.Hour, log)
	if err != nil || p2.pendingBytes() != 11000 {
		t.Fatalf("after restart: pending %d, %v", p2.pendingBytes(), err)
	}
	// Round 0 commits naming blob 4 as a payload; a fetched payload of a
	// final round (blob 6) and blob 2, never referenced.
	h2, h4, h6 := wire.ContentHash(blob(2, 3000)), wire.ContentHash(blob(4, 8000)), wire.ContentHash(blob(6, 50))
	if err := blobs.Put(ctx, h6, blob(6, 50)); err != nil {
		t.Fatal(err)
	}
	chain.tr = []wire.RoundCommit{{Round: 0, Fragments: []wire.FragmentCommit{{Inputs: []wire.CommitInput{{PayloadHash: h4}}}}},
		{Round: 1, Fragments: []wire.FragmentCommit{{Inputs: []wire.CommitInput{{PayloadHash: h6}}}}}}
	chain.run.ChallengeWindowBlocks, chain.run.FinalRounds = 10, 0 // nothing final yet
	st, err := p2.collect(ctx, time.Now())
	if err != nil || st.Adopted != 1 || st.Expired != 0 || st.FinalPayloads != 0 {
		t.Fatalf("first collection %+v, %v", st, err)
	}
	if p2.pendingBytes() != 3000 {
		t.Fatalf("pending %d after the trainer's payload was taken up", p2.pendingBytes())
	}
	// Two hours later, rounds 0 and 1 final while the run goes on: blob 2
	// expired; blobs 4 and 6 are kept — rounds 2 and 3, not committed yet,
	// compare their inputs with them (the stale rule, copies.md §6).
	chain.run.FinalRounds = 2
	st, err = p2.collect(ctx, time.Now().Add(2*time.Hour))
	if err != nil || st.Expired != 1 || st.FinalPayloads != 0 {
		t.Fatalf("second collection %+v, %v", st, err)
	}
	// The run is over (sealed, every round final): both are final payloads.
	chain.run.Status = wire.StatusSealed
	st, err = p2.collect(ctx, time.Now().Add(2*time.Hour))
	if err != nil || st.FinalPayloads != 2 {
		t.Fatalf("collection after the seal %+v, %v", st, err)
	}
	for _, h := range []wire.Hash{h2, h4, h6} {
		if _, err := os.Stat(blobs.Path(h)); !os.IsNotExist(err) {
			t.Errorf("blob %s still stored: %v", h, err)
		}
	}
	if u := blobs.Usage(); u.Bytes != 0 || p2.pendingBytes() != 0 {
		t.Fatalf("usage %+v, pending %d after collection", u, p2.pendingBytes())
	}
}

// TestBlobCollectorKeepsWhatReplayNeeds: long after a run's rounds are
// final, the collector keeps its initial weights file (even when it came as
// an upload) and the weights before and after every committed round, and
// deletes the final rounds' payloads, except on an archive node
// (--archive), which keeps every blob a run references so `tenzro receipt
// replay` of an old run can read them there.
func TestBlobCollectorKeepsWhatReplayNeeds(t *testing.T) {
	for _, archive := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "archive"}[archive], func(t *testing.T) {
			ctx := context.Background()
			blobs, err := store.OpenBlobs(t.TempDir(), store.BlobOptions{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			const sponsor = "did:tenzro:human:zSponsor"
			blob := func(i byte, n int) []byte { return bytes.Repeat([]byte{i}, n) }
			init, w0, w1, payload := blob(1, 100), blob(2, 40), blob(3, 40), blob(4, 60)
			chain := &policyChain{balances: map[string]string{sponsor: "1000000000000"},
				run: &wire.RunView{TaskID: "old", Status: wire.StatusSealed, TaskSpec: []byte(`{"sponsor_did":"x"}`), InitWeightsHash: wire.ContentHash(init),
					Fragments: []wire.FragmentView{{WeightsHash: wire.ContentHash(w1)}}, ChallengeWindowBlocks: 10, FinalRounds: 1}}
			chain.tr = []wire.RoundCommit{{Round: 0, Fragments: []wire.FragmentCommit{{WeightsBefore: wire.ContentHash(w0), WeightsAfter: wire.ContentHash(w1),
				Inputs: []wire.CommitInput{{PayloadHash: wire.ContentHash(payload)}}}}}}
			p, err := newBlobPolicy(ctx, chain, blobs, func(context.Context) string { return "c" }, big.NewInt(1_000_000_000), 8000, time.Hour, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			p.archive = archive
			h := wire.ContentHash(init)
			done, err := p.Reserve(ctx, sponsor, "", h, int64(len(init)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := blobs.PutStream(ctx, h, bytes.NewReader(init), int64(len(init))); err != nil {
				t.Fatal(err)
			}
			done(true)
			for _, b := range [][]byte{w0, w1, payload} {
				if err := blobs.Put(ctx, wire.ContentHash(b), b); err != nil {
					t.Fatal(err)
				}
			}
			st, err := p.collect(ctx, time.Now().Add(48*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			has := func(b []byte) bool { _, err := os.Stat(blobs.Path(wire.ContentHash(b))); return err == nil }
			for name, b := range map[string][]byte{"initial weights": init, "weights before": w0, "weights after": w1} {
				if !has(b) {
					t.Errorf("%s deleted (%+v)", name, st)
				}
			}
			if has(payload) != archive {
				t.Errorf("final payload kept = %v on archive = %v (%+v)", has(payload), archive, st)
			}
			if st.Expired != 0 || st.Adopted != 1 {
				t.Errorf("collection %+v: want the initial weights upload adopted, nothing expired", st)
			}
		})
	}
}
