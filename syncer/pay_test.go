package syncer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// Spec members of payRun: every round final at its commit, or
// challengeable for 3 blocks.
const (
	finalAtCommit = `"challenge_window_blocks":0,`
	challengeable = `"challenge_window_blocks":3,"vote_window_blocks":2,"challenge_bond":"100",`
)

// payRun is a one-fragment run of M trainers, quorum k and rounds rounds
// under rule, with the spec members extra (`"name":value,` each), posted
// with initial weights and every trainer enrolled with a stake of 1000.
func payRun(t *testing.T, m, k, rounds int, rule, extra string) *harness {
	t.Helper()
	ctx := context.Background()
	eng, err := plugins.NewEngine(ctx, plugins.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(ctx) })
	kv, _ := store.OpenInMemory()
	h := newHarnessWith(t, kv, eng)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	sp := strings.Replace(string(spec(h.task, h.sponsor.DID.String(), m, k, 1, rounds)), `"aggregation":"Mean"`, extra+`"aggregation":"`+rule+`"`, 1)
	if err := h.post([]byte(sp), initWeights(t, 1, 16)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < m; i++ {
		h.faucet(h.tr[i].DID.String(), "1000")
		if err := h.enroll(i, "1000"); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// tickUntil moves the clock past the grace window and ticks the node until
// done says so of the run, at most n times; it returns the run as left.
func (h *harness) tickUntil(n int, done func(v *wire.RunView) bool) *wire.RunView {
	h.t.Helper()
	v := h.run()
	for k := 0; k < n && !done(v); k++ {
		h.advance(31 * time.Second)
		if err := h.node.Tick(h.ctx); err != nil {
			h.t.Fatal(err)
		}
		v = h.run()
	}
	return v
}

// sealAndTranscript ticks the node until the run seals and returns the
// sealed run and its transcript, which holds rounds rounds.
func sealAndTranscript(h *harness, rounds int) (*wire.RunView, []wire.RoundCommit) {
	h.t.Helper()
	v := h.tickUntil(20, func(v *wire.RunView) bool { return v.Status == wire.StatusSealed })
	if v.Status != wire.StatusSealed {
		h.t.Fatalf("run %s, want sealed", v.Status)
	}
	tr, err := h.node.GetTranscript(h.ctx, h.task)
	if err != nil {
		h.t.Fatal(err)
	}
	if len(tr) != rounds {
		h.t.Fatalf("%d rounds committed, want %d", len(tr), rounds)
	}
	return v, tr
}

// closeRound ticks the node until round closes (or the run stops running).
func (h *harness) closeRound(round int) {
	h.t.Helper()
	h.tickUntil(10, func(v *wire.RunView) bool { return v.Round != uint64(round) || v.Status != wire.StatusRunning })
}

// resend is g's values sent again by trainer i in round: a replay.
func (h *harness) resend(g *wire.OuterGradient, i, round int) *wire.OuterGradient {
	again := *g
	again.Round = uint64(round)
	return h.rebind(&again, i, 1)
}

// rebind is g's payload (values unchanged, or scaled) bound to trainer i
// and signed by it: what a copier sends.
func (h *harness) rebind(g *wire.OuterGradient, i int, scale float32) *wire.OuterGradient {
	ts, _, err := safetensors.Parse(g.GradientPayload, safetensors.DefaultLimits)
	if err != nil {
		h.t.Fatal(err)
	}
	out := make([]safetensors.Tensor, len(ts))
	for k, x := range ts {
		v, _ := safetensors.F32Values(x)
		for j := range v {
			v[j] *= scale
		}
		out[k] = safetensors.FromF32(x.Name, x.Shape, v)
	}
	p, err := safetensors.Encode(out, bound(h.task, h.tr[i].DID.String(), int(g.Round), int(g.FragmentIndex)))
	if err != nil {
		h.t.Fatal(err)
	}
	c := &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: h.task, TrainerDID: h.tr[i].DID.String(), Round: g.Round, FragmentIndex: g.FragmentIndex,
		GradientPayload: p, PayloadHash: wire.ContentHash(p)}
	c.Signature = h.tr[i].Sign(c.Preimage())
	return c
}

// record puts g's payload in the store and returns its submission record
// transaction, as a node would broadcast it (bypassing the node's checks).
func (h *harness) record(g *wire.OuterGradient) []byte {
	if err := (syncer.KVBlobs{KV: h.kv}).Put(h.ctx, g.PayloadHash, g.GradientPayload); err != nil {
		h.t.Fatal(err)
	}
	tx := wire.SubmissionTx{ChainID: g.ChainID, TaskID: g.TaskID, TrainerDID: g.TrainerDID, Round: g.Round, FragmentIndex: g.FragmentIndex, PayloadHash: g.PayloadHash,
		PayloadSize: uint64(len(g.GradientPayload)), Signature: g.Signature, Metrics: g.Metrics}
	raw, err := wire.EncodeTx(wire.TxSubmission, tx)
	if err != nil {
		h.t.Fatal(err)
	}
	return raw
}

func (h *harness) block(txs ...[]byte) {
	h.t.Helper()
	outs, err := h.chain.Block(h.ctx, txs...)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, o := range outs {
		if o.Code != 0 {
			h.t.Fatalf("tx refused: %+v", o)
		}
	}
}

// TestCopiesArePaidNothing: under Krum{f=1} with six honest trainers, a
// byte copy of trainer 0 re-bound to trainer 6 (a later block) and a near
// copy (× 1.0001) raced into the same block as its original (trainers 7
// and 8). The copier of the earlier record is slashed and unpaid; the
// same-block pair is unpaid and not slashed; every honest trainer is paid
// the same, selected by Krum or not.
func TestCopiesArePaidNothing(t *testing.T) {
	h := payRun(t, 9, 5, 1, "Krum{f=1}", finalAtCommit)
	honest := make([]*wire.OuterGradient, 8)
	for i := 0; i < 6; i++ {
		honest[i] = h.gradient(i, 0, 0, 1)
		if err := h.submit(honest[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.submit(h.rebind(honest[0], 6, 1)); err != nil {
		t.Fatalf("a re-bound byte copy is a valid submission (the copy rule judges it at commit): %v", err)
	}
	victim := h.gradient(7, 0, 0, 1)
	h.block(h.record(victim), h.record(h.rebind(victim, 8, 1.0001)))
	v, tr := sealAndTranscript(h, 1)
	fc := tr[0].Fragments[0]
	if fc.Status != wire.FragAggregated {
		t.Fatalf("fragment %s: %s", fc.Status, fc.Reason)
	}
	did := func(i int) string { return h.tr[i].DID.String() }
	wantCopy := map[string]string{did(6): did(0), did(7): did(8), did(8): did(7)}
	selected := 0
	for _, in := range fc.Inputs {
		if in.CopyOf != wantCopy[in.TrainerDID] {
			t.Errorf("%s: copy_of %q, want %q (rejected %q)", in.TrainerDID, in.CopyOf, wantCopy[in.TrainerDID], in.Rejected)
		}
		if in.Selected {
			selected++
		}
	}
	if selected != 1 {
		t.Fatalf("Krum{f=1} selected %d inputs, want 1", selected)
	}
	// The verdicts are part of what a challenge disputes.
	c := fc
	c.Inputs = append([]wire.CommitInput(nil), fc.Inputs...)
	for j := range c.Inputs {
		c.Inputs[j].CopyOf = ""
	}
	if wire.FragmentResultHash(&c) == wire.FragmentResultHash(&fc) {
		t.Fatal("copy verdicts are not in FragmentResultHash")
	}
	slashed := map[string]string{}
	for _, tv := range v.Trainers {
		slashed[tv.DID] = tv.Slashed
	}
	pay := func(i int) string { return v.TrainerMetrics[did(i)].CurrentReward }
	for i := 1; i < 6; i++ {
		if pay(i) != pay(0) || pay(i) == "0" || slashed[did(i)] != "0" {
			t.Fatalf("honest trainer %d: paid %s slashed %s, trainer 0 paid %s", i, pay(i), slashed[did(i)], pay(0))
		}
	}
	for i := 6; i < 9; i++ {
		if pay(i) != "0" {
			t.Fatalf("copier %d paid %s", i, pay(i))
		}
	}
	if slashed[did(6)] != "500" || slashed[did(7)] != "0" || slashed[did(8)] != "0" {
		t.Fatalf("slashed: copier of an earlier record %s (want 500 of 1000), same-block pair %s and %s (want 0)", slashed[did(6)], slashed[did(7)], slashed[did(8)])
	}
	// The receipt verifies offline, and its transcript carries the verdicts.
	h.receiptCarries(`"copy_of":"` + did(0) + `"`)
}
