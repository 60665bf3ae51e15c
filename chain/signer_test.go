package chain

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// TestLateReceiptSigner: the elected syncer missed the only round, the
// next ticket committed it and sealed the run, and never signed. One round
// deadline after the seal the receipt is the next ticket's above every
// committer to sign, never the winner's (it committed nothing and ranks
// below a committer): the chain and the offline transcript check
// (CheckReceiptFull) agree on who may sign.
func TestLateReceiptSigner(t *testing.T) {
	w := newWorld(t)
	h := newHarness(t, "")
	h.genesis(w.genesis)
	cands := []*did.Key{w.candA, w.candB, w.candC}
	task := "late"
	spec := testSpec(task, w.sponsor.DID.String(), 2, 2, 2, 1, "")
	var cases []txCase
	for i, c := range cands {
		cases = append(cases, txCase{fmt.Sprintf("register %d", i), must(RegisterSyncerTx(c, fmt.Sprint(100*(i+1)), 1)), CodeOK})
	}
	cases = append(cases, txCase{"post", must(PostTaskTx(w.sponsor, spec, testLayout(2, task), meanRules(t), 1)), CodeOK})
	runBlock(t, h, cases)
	cases = nil
	for i, c := range cands {
		cases = append(cases, txCase{fmt.Sprintf("proof %d", i), must(ElectionProofTx(c, task, vrfProof(t, c, task, spec), 2)), CodeOK})
	}
	for i, tr := range []*did.Key{w.t1, w.t2} {
		cases = append(cases, txCase{fmt.Sprintf("enrol %d", i), must(EnrollTx(tr, task, "100", 1)), CodeOK})
	}
	runBlock(t, h, cases)
	succ := h.run(task).Succession
	if len(succ) != 3 {
		t.Fatalf("succession %v", succ)
	}
	ticket := func(k int) *did.Key { return keyOf(cands, succ[k]) }
	runBlock(t, h, []txCase{
		{"t1 f0", must(SubmissionTx(w.t1, task, 0, 0, wire.ContentHash([]byte("a")), 4)), CodeOK},
		{"t2 f0", must(SubmissionTx(w.t2, task, 0, 0, wire.ContentHash([]byte("b")), 4)), CodeOK},
		{"t1 f1", must(SubmissionTx(w.t1, task, 0, 1, wire.ContentHash([]byte("c")), 4)), CodeOK},
		{"t2 f1", must(SubmissionTx(w.t2, task, 0, 1, wire.ContentHash([]byte("d")), 4)), CodeOK},
	})
	// Ticket 0 misses the round: past one deadline (60 s) ticket 1 commits
	// both fragments and the run seals.
	h.now = time.UnixMilli(h.run(task).RoundMs).Add(60 * time.Second)
	runBlock(t, h, []txCase{
		{"ticket 1 f0", h.commit(task, 0, ticket(1), 1, wire.FragAggregated, "", 10), CodeOK},
		{"ticket 1 f1", h.commit(task, 1, ticket(1), 1, wire.FragAggregated, "", 11), CodeOK},
	})
	r := h.run(task)
	if r.Status != wire.StatusSealed {
		t.Fatalf("run is %s, want sealed", r.Status)
	}
	sealMs := h.now.Add(-h.step).UnixMilli() // the block that sealed it
	// Before a deadline only the committer may sign; ticket 0 never may.
	runBlock(t, h, []txCase{
		{"ticket 2 before the deadline", h.signReceipt(task, ticket(2)), CodeUnauthorized},
		{"ticket 0 (no commit, below a committer)", h.signReceipt(task, ticket(0)), CodeUnauthorized},
	})
	h.now = time.UnixMilli(sealMs).Add(60 * time.Second)
	runBlock(t, h, []txCase{
		{"ticket 0 after a deadline", h.signReceipt(task, ticket(0)), CodeUnauthorized},
		{"ticket 1 after its turn", h.signReceipt(task, ticket(1)), CodeUnauthorized},
		{"ticket 2 after a deadline", h.signReceipt(task, ticket(2)), CodeOK},
	})
	// The stored receipt names the committer and the late signer, and the
	// transcript check accepts it.
	ctx := context.Background()
	var raw, blob []byte
	err := h.app.View(ctx, func(v machine.View) error {
		var err error
		if raw, err = v.KV.Get(ctx, machine.KSReceipts, []byte(task)); err != nil {
			return err
		}
		_, blob, _, err = machine.ChainReceipt(ctx, v.KV, task, ticket(2).DID.String(), json.RawMessage(`{"engine":"test"}`), nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var rc wire.Receipt
	if err := json.Unmarshal(raw, &rc); err != nil {
		t.Fatal(err)
	}
	if len(rc.Syncers) != 2 || rc.Syncers[0].Ticket != 1 || rc.Syncers[1].Ticket != 2 || rc.SyncerDID != succ[2] {
		t.Fatalf("receipt syncers %+v signed by %s", rc.Syncers, rc.SyncerDID)
	}
	if err := audit.CheckReceiptFull(raw, blob); err != nil {
		t.Fatalf("--full refuses the chain's late signer: %v", err)
	}
	// The same receipt signed by ticket 0 (which the chain refused) is
	// refused offline too.
	var rc0 *wire.Receipt
	err = h.app.View(ctx, func(v machine.View) error {
		var err error
		rc0, _, _, err = machine.ChainReceipt(ctx, v.KV, task, ticket(0).DID.String(), json.RawMessage(`{"engine":"test"}`), nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	pre, err := audit.ReceiptPreimage(rc0)
	if err != nil {
		t.Fatal(err)
	}
	rc0.Signature = ticket(0).Sign(pre)
	raw0, _ := json.Marshal(rc0)
	if err := audit.CheckReceiptFull(raw0, blob); err == nil || !strings.Contains(err.Error(), "not above every committer") {
		t.Fatalf("receipt signed by ticket 0: %v", err)
	}
	h.conservation()
}
