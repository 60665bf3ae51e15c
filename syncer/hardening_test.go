package syncer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// Regression tests for issue 8's findings 3, 4, 6, 7 and 8: each one
// reproduces the attack and checks the secure behaviour.

// startedRun posts an M=8, K=6, F=2 run and enrols the 8 trainers.
func startedRun(t *testing.T, rounds int) *harness {
	t.Helper()
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	if err := h.post(spec(h.task, h.sponsor.DID.String(), 8, 6, 2, rounds), initWeights(t, 2, 16)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		h.faucet(h.tr[i].DID.String(), "1000")
		if err := h.enroll(i, "1000"); err != nil {
			t.Fatal(err)
		}
	}
	if st := h.run().Status; st != wire.StatusRunning {
		t.Fatalf("status %s", st)
	}
	return h
}

// Finding 3: an unsigned finalizeRound right after the K-th submission
// closed the round; trainers still inside τ were refused, counted missed,
// evicted and slashed.
func TestFinalizeRoundIsSignedAndKeepsTheGraceWindow(t *testing.T) {
	h := startedRun(t, 2)
	for f := 0; f < 2; f++ {
		for i := 0; i < 6; i++ {
			if err := h.submit(h.gradient(i, 0, f, 1+float32(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := snapshot(t, h)
	// Anyone but the elected syncer is refused.
	if _, err := h.finalizeAs(h.tr[0], 0); machine.KindOf(err) != machine.KindUnauthorized || !strings.Contains(err.Error(), "elected syncer") {
		t.Fatalf("finalize by a trainer: %v", err)
	}
	p := &wire.FinalizeParams{TaskID: h.task, SyncerDID: h.syncerKey().DID.String(), Round: 0}
	p.Nonce, p.ChainID = h.nextNonce(), chain.ManualChainID
	p.Signature = h.tr[0].Sign(p.Preimage()) // right DID, wrong key
	if _, err := h.node.FinalizeRound(h.ctx, p); machine.KindOf(err) != machine.KindUnauthorized {
		t.Fatalf("forged syncer signature: %v", err)
	}
	// The syncer itself cannot shorten τ for trainers 6 and 7.
	h.advance(5 * time.Second)
	before = snapshot(t, h)
	if _, err := h.finalize(0); machine.KindOf(err) != machine.KindConflict || !strings.Contains(err.Error(), "grace window closes in") {
		t.Fatalf("finalize inside τ: %v", err)
	}
	if _, err := h.finalize(1); err == nil || !strings.Contains(err.Error(), "wrong round") {
		t.Fatalf("finalize for another round: %v", err)
	}
	if snapshot(t, h) != before {
		t.Fatal("refused finalizeRound changed state")
	}
	// Trainer 6 is still inside the window: accepted.
	h.advance(20 * time.Second)
	for f := 0; f < 2; f++ {
		if err := h.submit(h.gradient(6, 0, f, 7)); err != nil {
			t.Fatalf("trainer 6 inside τ: %v", err)
		}
	}
	h.advance(10 * time.Second) // τ = 30 s after the K-th acceptance
	res, err := h.finalize(0)
	if err != nil || !res.Advanced {
		t.Fatalf("finalize after τ: %+v %v", res, err)
	}
	tr, _ := h.node.GetTranscript(h.ctx, h.task)
	if len(tr) != 1 || len(tr[0].Missed) != 1 || tr[0].Missed[0] != h.tr[7].DID.String() || len(tr[0].Fragments[0].Inputs) != 7 {
		t.Fatalf("round 0 transcript: missed %v, inputs %d", tr[0].Missed, len(tr[0].Fragments[0].Inputs))
	}
}

// Finding 4: "created_at": 9223372036854775807 passed validation, was stored
// as 9223372036854776000 and broke listRuns for every run, for good.
func TestSpecIntegersMustRoundTrip(t *testing.T) {
	h := newHarness(t, func() machine.KV { kv, _ := store.OpenInMemory(); return kv }())
	sp := string(spec(h.task, h.sponsor.DID.String(), 8, 6, 2, 2))
	for _, tc := range []struct{ from, to, want string }{
		{`"created_at":1761350400`, `"created_at":9223372036854775807`, "created_at: integer 9223372036854775807 is outside ±2^53"},
		{`"created_at":1761350400`, `"created_at":-9007199254740993`, "created_at"},
		{`"context_len":32`, `"context_len":18446744073709551616`, "architecture.metadata.context_len"},
		{`"created_at":1761350400`, `"created_at":1e300`, "created_at"},
	} {
		_, _, err := wire.ParseSpec([]byte(strings.Replace(sp, tc.from, tc.to, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.to, err, tc.want)
		}
	}
	if _, _, err := wire.ParseSpec([]byte(strings.Replace(sp, `"created_at":1761350400`, `"created_at":9007199254740992`, 1))); err != nil {
		t.Errorf("2^53 itself is exact: %v", err)
	}
	// A bad record already in the store (written by an older node) does
	// not hide the good runs, and the timers go on.
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	if err := h.post(spec(h.task, h.sponsor.DID.String(), 8, 6, 2, 2), initWeights(t, 2, 16)); err != nil {
		t.Fatal(err)
	}
	bad := []byte(`{"spec":` + strings.Replace(strings.Replace(sp, `"created_at":1761350400`, `"created_at":9223372036854776000`, 1), h.task, "bad-run", 1) + `,"status":"running"}`)
	// Written straight into the chain's state under the key spaces the
	// machine reads (and the bad run into the index of active runs).
	var b machine.Batch
	b.Set(machine.KSLedger, chain.StateKey(machine.KSRuns, []byte("bad-run")), bad)
	b.Set(machine.KSLedger, chain.StateKey(machine.KSMeta, []byte("active/bad-run")), []byte{})
	b.Set(machine.KSLedger, chain.StateKey(machine.KSRuns, []byte("garbage-run")), []byte("{not json"))
	if err := h.kv.Commit(h.ctx, &b); err != nil {
		t.Fatal(err)
	}
	runs, err := h.node.ListRuns(h.ctx, wire.ListRunsParams{})
	if err != nil || len(runs) != 1 || runs[0].TaskID != h.task {
		t.Fatalf("listRuns with a corrupt record: %+v %v", runs, err)
	}
	if err := h.node.Tick(h.ctx); err == nil || !strings.Contains(err.Error(), "bad-run") {
		t.Fatalf("tick should report the bad run and go on: %v", err)
	}
}

// Finding 4, "also after a restart": the same with a Pebble store reopened.
func TestCorruptRunSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(context.Background(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, db)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	if err := h.post(spec(h.task, h.sponsor.DID.String(), 8, 6, 2, 2), initWeights(t, 2, 16)); err != nil {
		t.Fatal(err)
	}
	var b machine.Batch
	b.Set(machine.KSLedger, chain.StateKey(machine.KSRuns, []byte("bad-run")), []byte(`{"spec":{"created_at":9223372036854776000},"status":"awaiting_enrollment"}`))
	if err := db.Commit(h.ctx, &b); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = store.Open(context.Background(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h.kv = db
	h.open()
	runs, err := h.node.ListRuns(h.ctx, wire.ListRunsParams{})
	if err != nil || len(runs) != 1 || runs[0].TaskID != h.task {
		t.Fatalf("listRuns after a restart with a corrupt record: %+v %v", runs, err)
	}
}

// Finding 6 (the node's half): NaN and Inf were accepted by default.
func TestFiniteVerifierIsAlwaysOn(t *testing.T) {
	h := startedRun(t, 1) // the spec lists no verifier
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		g := h.gradient(0, 0, 0, 1)
		ts, _, _ := safetensors.Parse(g.GradientPayload, safetensors.DefaultLimits)
		v, _ := safetensors.F32Values(ts[0])
		v[3] = bad
		p, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32(ts[0].Name, ts[0].Shape, v)}, bound(h.task, g.TrainerDID, 0, 0))
		resign(h, g, p)
		before := snapshot(t, h)
		if err := h.submit(g); machine.KindOf(err) != machine.KindInvalid || !strings.Contains(err.Error(), machine.FiniteVerifier) || !strings.Contains(err.Error(), "contains NaN or infinite values") {
			t.Fatalf("%v submission: %v", bad, err)
		}
		if snapshot(t, h) != before {
			t.Fatal("refused submission changed state")
		}
	}
	// The stored spec is the posted one: its hash did not change.
	v := h.run()
	_, canon, _ := wire.ParseSpec(spec(h.task, h.sponsor.DID.String(), 8, 6, 2, 1))
	if v.SpecHash != wire.SpecHash(canon) {
		t.Fatal("spec hash changed by the implicit verifier")
	}
}

// Finding 7: a re-serialised identical gradient was slashed as equivocation.
func TestEquivocationIsAboutContent(t *testing.T) {
	h := startedRun(t, 1)
	g := h.gradient(0, 0, 0, 1)
	if err := h.submit(g); err != nil {
		t.Fatal(err)
	}
	again := repadded(g.GradientPayload) // other header bytes, same binding and tensors
	g2 := *g
	resign(h, &g2, again)
	if g2.PayloadHash == g.PayloadHash {
		t.Fatal("test needs a different encoding")
	}
	before := snapshot(t, h)
	if err := h.submit(&g2); machine.KindOf(err) != machine.KindConflict || !strings.Contains(err.Error(), "same tensors") {
		t.Fatalf("re-encoded identical gradient: %v", err)
	}
	if snapshot(t, h) != before {
		t.Fatal("a duplicate changed state")
	}
	if s := h.run().Trainers[indexOf(h.run(), h.tr[0].DID.String())].Slashed; s != "0" {
		t.Fatalf("slashed %s for sending the same tensors twice", s)
	}
	// Different values are still equivocation.
	if err := h.submit(h.gradient(0, 0, 0, 2)); err == nil || !strings.Contains(err.Error(), "equivocation") {
		t.Fatalf("different tensors: %v", err)
	}
}

// Finding 8: getRun showed a stake of 1004 after three leave/re-enrol
// cycles while 1 attoTNZO was locked.
func TestStakeShownAfterLeaveAndReenrolCycles(t *testing.T) {
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	if err := h.post(spec(h.task, h.sponsor.DID.String(), 8, 6, 2, 2), initWeights(t, 2, 16)); err != nil {
		t.Fatal(err)
	}
	d := h.tr[0].DID.String()
	h.faucet(d, "5000")
	if err := h.enroll(0, "1001"); err != nil {
		t.Fatal(err)
	}
	for cycle := 0; cycle < 3; cycle++ {
		if err := h.leave(0); err != nil {
			t.Fatal(err)
		}
		if err := h.enroll(0, "1"); err != nil {
			t.Fatal(err)
		}
	}
	bal, _ := h.node.Balance(h.ctx, d)
	locked := new(big.Int).Sub(big.NewInt(5000), bigInt(t, bal.Balance))
	v := h.run()
	if got := v.Trainers[indexOf(v, d)].Stake; got != locked.String() || got != "1" {
		t.Fatalf("getRun stake %s, locked %s", got, locked)
	}
}

func bigInt(t *testing.T, s string) *big.Int {
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		t.Fatalf("not an integer: %q", s)
	}
	return v
}

// Finding 8: reward_pool "0" and stake "0" were accepted; duplicate JSON
// members were accepted (the last one won).
func TestZeroAmountsAndDuplicateMembersRefused(t *testing.T) {
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	sp := string(spec(h.task, h.sponsor.DID.String(), 8, 6, 2, 2))
	before := snapshot(t, h)
	if err := h.post([]byte(strings.Replace(sp, `"reward_pool":"1000000000000000000000"`, `"reward_pool":"0"`, 1)), nil); err == nil || !strings.Contains(err.Error(), `reward_pool is "0"`) {
		t.Fatalf("reward_pool 0: %v", err)
	}
	for _, dup := range []struct{ raw, want string }{
		{strings.Replace(sp, `"quorum":6`, `"quorum":6,"quorum":1`, 1), `duplicate member "quorum" in the top-level object`},
		{strings.Replace(sp, `"horizon":8`, `"horizon":8,"hori\u007aon":9`, 1), `duplicate member "horizon" in object architecture.metadata`},
		{strings.Replace(sp, `"quorum":6`, `"Quorum":6`, 1), `unknown field "Quorum"`},
		{strings.Replace(sp, `"fragment_count":2`, `"Fragment_Count":2`, 1), `unknown field "architecture.Fragment_Count"`},
	} {
		if err := h.post([]byte(dup.raw), nil); err == nil || !strings.Contains(err.Error(), dup.want) {
			t.Fatalf("duplicate member: %v, want %q", err, dup.want)
		}
	}
	if snapshot(t, h) != before {
		t.Fatal("refused posts changed state")
	}
	if err := h.post([]byte(sp), initWeights(t, 2, 16)); err != nil {
		t.Fatal(err)
	}
	h.faucet(h.tr[0].DID.String(), "10")
	if err := h.enroll(0, "0"); machine.KindOf(err) != machine.KindInvalid || !strings.Contains(err.Error(), `stake is "0"`) {
		t.Fatalf("stake 0: %v", err)
	}
	var raw json.RawMessage = []byte(`{"a":1,"b":{"c":[1,{"d":2,"d":3}]}}`)
	if err := wire.CheckStrictJSON(raw, wire.StrictJSONOptions{}); err == nil || !strings.Contains(err.Error(), `duplicate member "d" in object b.c[1]`) {
		t.Fatalf("nested duplicate: %v", err)
	}
}

// Finding 8: a run that never fills kept its escrow (and the stakes of the
// trainers who did enrol) locked forever.
func TestCancelAndExpiryRefundEscrowAndStakes(t *testing.T) {
	for _, how := range []string{"sponsor", "expiry"} {
		t.Run(how, func(t *testing.T) {
			kv, _ := store.OpenInMemory()
			h := newHarness(t, kv)
			sp := h.sponsor.DID.String()
			h.faucet(sp, "2000000000000000000000")
			if err := h.post(spec(h.task, sp, 8, 6, 2, 2), initWeights(t, 2, 16)); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ { // 3 of M=8: the run never starts
				h.faucet(h.tr[i].DID.String(), "1000")
				if err := h.enroll(i, "700"); err != nil {
					t.Fatal(err)
				}
			}
			cancel := func(k int) error {
				p := &wire.CancelRunParams{TaskID: h.task}
				p.Nonce, p.ChainID = h.nextNonce(), chain.ManualChainID
				p.Signature = []*did.Key{h.sponsor, h.tr[0]}[k].Sign(p.Preimage(sp))
				_, err := h.node.CancelRun(h.ctx, p)
				h.conserve("cancel")
				return err
			}
			if err := cancel(1); machine.KindOf(err) != machine.KindUnauthorized {
				t.Fatalf("cancel signed by a trainer: %v", err)
			}
			if how == "sponsor" {
				if err := cancel(0); err != nil {
					t.Fatal(err)
				}
			} else {
				if v := h.run(); v.EnrollDeadlineMs != h.now.UnixMilli()+wire.DefaultEnrollWindowMs {
					t.Fatalf("enroll deadline %d", v.EnrollDeadlineMs)
				}
				h.advance(7*24*time.Hour - time.Second)
				if err := h.node.Tick(h.ctx); err != nil || h.run().Status != wire.StatusAwaiting {
					t.Fatalf("expired early: %v %s", err, h.run().Status)
				}
				h.advance(time.Second)
				h.conserve("expiry")
			}
			v := h.run()
			if v.Status != wire.StatusCancelled || v.CancelReason == "" || v.Escrow != "0" {
				t.Fatalf("after %s: status %s (%s), escrow %s", how, v.Status, v.CancelReason, v.Escrow)
			}
			// Everything comes back but the burned posting fee.
			want := new(big.Int).Sub(bigInt(t, "2000000000000000000000"), h.postingFee())
			if b, _ := h.node.Balance(h.ctx, sp); b.Balance != want.String() {
				t.Fatalf("sponsor balance %s, want %s", b.Balance, want)
			}
			for i := 0; i < 3; i++ {
				if b, _ := h.node.Balance(h.ctx, h.tr[i].DID.String()); b.Balance != "1000" {
					t.Fatalf("trainer %d balance %s", i, b.Balance)
				}
			}
			if err := cancel(0); machine.KindOf(err) != machine.KindConflict {
				t.Fatalf("second cancel: %v", err)
			}
			h.faucet(h.tr[4].DID.String(), "10")
			if err := h.enroll(4, "1"); machine.KindOf(err) != machine.KindConflict {
				t.Fatalf("enrol in a cancelled run: %v", err)
			}
		})
	}
	// A started run cannot be cancelled.
	h := startedRun(t, 1)
	p := &wire.CancelRunParams{TaskID: h.task}
	p.Nonce, p.ChainID = h.nextNonce(), chain.ManualChainID
	p.Signature = h.sponsor.Sign(p.Preimage(h.sponsor.DID.String()))
	if _, err := h.node.CancelRun(h.ctx, p); machine.KindOf(err) != machine.KindConflict {
		t.Fatalf("cancel a running run: %v", err)
	}
}

// Finding 8: there was no way to withdraw syncer stake.
func TestSyncerUnbondingWithDelay(t *testing.T) {
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	remote := key(t, did.KindMachine, 99)
	rd := remote.DID.String()
	h.faucet(rd, "5000")
	rp := &wire.RegisterSyncerParams{DID: rd, Stake: "3000"}
	rp.Nonce, rp.ChainID = h.nextNonce(), chain.ManualChainID
	rp.Signature = remote.Sign(rp.Preimage())
	if _, err := h.node.RegisterSyncer(h.ctx, rp); err != nil {
		t.Fatal(err)
	}
	unbond := func(k *did.Key) (*wire.SyncerCandidate, error) {
		p := &wire.UnbondParams{DID: rd}
		p.Nonce, p.ChainID = h.nextNonce(), chain.ManualChainID
		p.Signature = k.Sign(p.Preimage())
		c, err := h.node.Unbond(h.ctx, p)
		h.conserve("unbond")
		return c, err
	}
	if _, err := unbond(h.tr[0]); machine.KindOf(err) != machine.KindUnauthorized {
		t.Fatalf("unbond signed by another key: %v", err)
	}
	c, err := unbond(remote)
	if err != nil || !c.Unbonding || c.ReleaseMs != h.now.Add(machine.DefaultUnbondingDelay).UnixMilli() {
		t.Fatalf("unbond: %+v %v", c, err)
	}
	if b, _ := h.node.Balance(h.ctx, rd); b.Balance != "2000" {
		t.Fatalf("balance during unbonding %s (the stake must stay locked)", b.Balance)
	}
	if _, err := unbond(remote); machine.KindOf(err) != machine.KindConflict {
		t.Fatalf("second unbond: %v", err)
	}
	// An unbonding candidate with a valid proof is not elected.
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	if err := h.post(spec(h.task, h.sponsor.DID.String(), 2, 1, 1, 1), initWeights(t, 1, 16)); err != nil {
		t.Fatal(err)
	}
	proof, _ := vrf.Prove(remote.Priv, election.Alpha(h.task, h.run().SpecHash))
	pp := &wire.ElectionProofParams{TaskID: h.task, DID: rd, Proof: proof}
	pp.Nonce, pp.ChainID = h.nextNonce(), chain.ManualChainID
	pp.Signature = remote.Sign(pp.Preimage())
	if _, err := h.node.SubmitElectionProof(h.ctx, pp); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		h.faucet(h.tr[i].DID.String(), "10")
		if err := h.enroll(i, "1"); err != nil {
			t.Fatal(err)
		}
	}
	if el := h.run().Election; el == nil || len(el.Candidates) != 1 || el.Winner == rd {
		t.Fatalf("election with an unbonding candidate: %+v", el)
	}
	// The elected syncer of a running run cannot unbond.
	p := &wire.UnbondParams{DID: h.syncerKey().DID.String()}
	p.Nonce, p.ChainID = uint64(time.Now().UnixNano()), chain.ManualChainID // above the node's own (Unix-ns) nonces of this key
	p.Signature = h.syncerKey().Sign(p.Preimage())
	if _, err := h.node.Unbond(h.ctx, p); machine.KindOf(err) != machine.KindConflict || !strings.Contains(err.Error(), "elected syncer") {
		t.Fatalf("unbond while elected: %v", err)
	}
	// Released after the delay, not before.
	h.advance(machine.DefaultUnbondingDelay - time.Millisecond)
	if b, _ := h.node.Balance(h.ctx, rd); b.Balance != "2000" {
		t.Fatalf("released early: %s", b.Balance)
	}
	h.advance(time.Millisecond)
	h.conserve("release")
	if b, _ := h.node.Balance(h.ctx, rd); b.Balance != "5000" {
		t.Fatalf("after the delay: %s", b.Balance)
	}
	if cs, _ := h.node.ListSyncers(h.ctx); len(cs) != 1 || cs[0].DID == rd {
		t.Fatalf("candidates after release: %+v", cs)
	}
}

// Issue 8, finding 2 (cost half): posting and publishing were free, so an
// attacker with no funds could make the node probe plugins at will.
func TestPostingAndPublishingCostAndAreRateLimited(t *testing.T) {
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	sp := h.sponsor.DID.String()
	// No funds: refused before the rule is resolved, nothing stored.
	before := snapshot(t, h)
	if err := h.post(spec(h.task, sp, 8, 6, 2, 2), nil); machine.KindOf(err) != machine.KindFunds || !strings.Contains(err.Error(), "posting fee") {
		t.Fatalf("post without funds: %v", err)
	}
	if snapshot(t, h) != before {
		t.Fatal("refused post changed state")
	}
	h.faucet(sp, "2000000000000000000000")
	if err := h.post(spec(h.task, sp, 8, 6, 2, 2), nil); err != nil {
		t.Fatal(err)
	}
	want := new(big.Int).Sub(bigInt(t, "1000000000000000000000"), h.postingFee())
	if b, _ := h.node.Balance(h.ctx, sp); b.Balance != want.String() {
		t.Fatalf("balance after posting %s, want %s (reward escrowed, fee burned)", b.Balance, want)
	}
	// Rate limit: 10 posts per DID per minute.
	small := func(i int) []byte {
		s := strings.Replace(string(spec(fmt.Sprintf("t-%d", i), sp, 8, 6, 2, 2)), `"reward_pool":"1000000000000000000000"`, `"reward_pool":"1"`, 1)
		return []byte(s)
	}
	for i := 0; i < 9; i++ {
		if err := h.post(small(i), nil); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	if err := h.post(small(9), nil); machine.KindOf(err) != machine.KindConflict || !strings.Contains(err.Error(), "rate limited") {
		t.Fatalf("11th post in a minute: %v", err)
	}
	h.now = h.now.Add(time.Minute) // the node's rate limit reads its wall clock
	if err := h.post(small(9), nil); err != nil {
		t.Fatalf("post after the window: %v", err)
	}
	// Publishing: unfunded DIDs never reach the module check; the fee is
	// burned only when the publication succeeds.
	calls := 0
	module := []byte("\x00asm a module")
	publish := func(ok bool) func(context.Context) (*wire.PluginInfo, error) {
		return func(context.Context) (*wire.PluginInfo, error) {
			calls++
			if !ok {
				return nil, machine.Errf(machine.KindInvalid, "module refused")
			}
			return &wire.PluginInfo{Name: "x", Hash: wire.SHA256(module)}, nil
		}
	}
	poor := h.tr[0].DID.String()
	req := func() *wire.PublishPluginParams {
		p := &wire.PublishPluginParams{DID: poor, Module: module}
		p.Nonce, p.ChainID = h.nextNonce(), chain.ManualChainID
		p.Signature = h.tr[0].Sign(p.Preimage())
		return p
	}
	if _, err := h.node.GatePublish(h.ctx, req(), publish(true)); machine.KindOf(err) != machine.KindFunds || calls != 0 {
		t.Fatalf("unfunded publish: %v (module checked %d times)", err, calls)
	}
	h.faucet(poor, "5000000000")
	if _, err := h.node.GatePublish(h.ctx, req(), publish(false)); err == nil {
		t.Fatal("refused module accepted")
	}
	if b, _ := h.node.Balance(h.ctx, poor); b.Balance != "5000000000" {
		t.Fatalf("a refused publication was charged: %s", b.Balance)
	}
	if _, err := h.node.GatePublish(h.ctx, req(), publish(true)); err != nil {
		t.Fatal(err)
	}
	h.conserve("publish")
	if b, _ := h.node.Balance(h.ctx, poor); b.Balance != new(big.Int).Sub(big.NewInt(5000000000), h.publishFee()).String() {
		t.Fatalf("publication fee not burned: %s", b.Balance)
	}
	for i := 2; i < 10; i++ {
		_, _ = h.node.GatePublish(h.ctx, req(), publish(false))
	}
	if _, err := h.node.GatePublish(h.ctx, req(), publish(true)); !strings.Contains(fmt.Sprint(err), "rate limited") {
		t.Fatalf("11th publication in a minute: %v", err)
	}
}

// A receipt holds one settlement line per trainer the run ever had, so M
// is at most wire.MaxTrainers and, once that many trainers have lines
// (enrolled or left), no new trainer can join; one who left may come back.
func TestSettlementLinesAreBounded(t *testing.T) {
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	if err := h.post(spec(h.task, h.sponsor.DID.String(), wire.MaxTrainers+1, 1, 1, 2), initWeights(t, 1, 16)); err == nil ||
		!strings.Contains(err.Error(), "trainer_count (M)") {
		t.Fatalf("M = %d posted: %v", wire.MaxTrainers+1, err)
	}
	if err := h.post(spec(h.task, h.sponsor.DID.String(), 2, 1, 1, 2), initWeights(t, 1, 16)); err != nil {
		t.Fatal(err)
	}
	h.tr = h.tr[:0]
	for i := 0; i <= wire.MaxTrainers; i++ {
		k, err := did.FromSeed(did.KindMachine, append(bytes.Repeat([]byte{7}, 30), byte(i>>8), byte(i)))
		if err != nil {
			t.Fatal(err)
		}
		h.tr = append(h.tr, k)
		h.faucet(k.DID.String(), "10")
	}
	for i := 0; i < wire.MaxTrainers; i++ {
		if err := h.enroll(i, "1"); err != nil {
			t.Fatalf("trainer %d: %v", i, err)
		}
		if err := h.leave(i); err != nil {
			t.Fatalf("trainer %d leaves: %v", i, err)
		}
	}
	before := h.run()
	err := h.enroll(wire.MaxTrainers, "1")
	if err == nil || !strings.Contains(err.Error(), "settlement lines for 256 trainers") {
		t.Fatalf("trainer %d joined: %v", wire.MaxTrainers+1, err)
	}
	if after := h.run(); len(after.Trainers) != len(before.Trainers) {
		t.Fatalf("a refused enrolment changed the run: %d -> %d trainers", len(before.Trainers), len(after.Trainers))
	}
	if err := h.enroll(0, "1"); err != nil {
		t.Fatalf("a trainer with a line could not come back: %v", err)
	}
}
