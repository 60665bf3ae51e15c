package syncer_test

import (
	"strings"
	"testing"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// TestPayloadBinding: a submission whose payload does not name its signer,
// task, round and fragment is refused and changes nothing — copy by hash
// (signing another trainer's payload hash, bytes from the node's store), a
// byte copy sent as is, an unbound payload, a payload moved to another
// fragment, and a trainer's own round-0 payload replayed in round 1.
func TestPayloadBinding(t *testing.T) {
	h := startedRun(t, 2)
	g0 := h.gradient(0, 0, 0, 1)
	if err := h.submit(g0); err != nil {
		t.Fatal(err)
	}
	sign := func(i int, g *wire.OuterGradient) *wire.OuterGradient {
		g.TrainerDID = h.tr[i].DID.String()
		g.Signature = h.tr[i].Sign(g.Preimage())
		return g
	}
	victim := h.tr[0].DID.String()
	plain, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("layer0.w", []int64{16}, make([]float32, 16))}, nil)
	movedP, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("layer0.w", []int64{16}, make([]float32, 16))}, bound(h.task, h.tr[1].DID.String(), 0, 1))
	moved := &wire.OuterGradient{ChainID: chain.ManualChainID, GradientPayload: movedP, PayloadHash: wire.ContentHash(movedP)} // fragment 0's tensors bound to fragment 1
	for _, tc := range []struct {
		name string
		g    *wire.OuterGradient
		want string
	}{
		{"copy by hash", sign(1, &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: h.task, Round: 0, FragmentIndex: 0, PayloadHash: g0.PayloadHash}),
			"payload binding: safetensors: bad payload binding: the payload names trainer " + victim + ", the submission is signed by " + h.tr[1].DID.String()},
		{"byte copy", sign(1, &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: h.task, GradientPayload: g0.GradientPayload, PayloadHash: g0.PayloadHash}), "names trainer " + victim},
		{"unbound payload", sign(1, &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: h.task, GradientPayload: plain, PayloadHash: wire.ContentHash(plain)}), "does not name its trainer, task, round and fragment"},
		{"moved to another fragment", sign(1, &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: h.task, GradientPayload: moved.GradientPayload, PayloadHash: moved.PayloadHash}), "names fragment 1, the submission is for fragment 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, h)
			err := h.submit(tc.g)
			if machine.KindOf(err) != machine.KindInvalid || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want invalid containing %q", err, tc.want)
			}
			if snapshot(t, h) != before {
				t.Fatal("a refused submission changed state")
			}
		})
	}
	// Round 0 closes; trainer 0 replays its round-0 payload in round 1.
	for f := 0; f < 2; f++ {
		for i := 0; i < 8; i++ {
			if f == 0 && i == 0 {
				continue
			}
			if err := h.submit(h.gradient(i, 0, f, 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if h.tickUntil(5, func(v *wire.RunView) bool { return v.Round != 0 }).Round != 1 {
		t.Fatal("round 0 did not close")
	}
	replay := &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: h.task, Round: 1, FragmentIndex: 0, GradientPayload: g0.GradientPayload, PayloadHash: g0.PayloadHash}
	if err := h.submit(sign(0, replay)); machine.KindOf(err) != machine.KindInvalid || !strings.Contains(err.Error(), "names round 0, the submission is for round 1") {
		t.Fatalf("replayed round-0 payload: %v", err)
	}
}

// TestUnboundRecordIsRejectedBySyncer: a record that reached the chain
// without the receiving node's checks (a node that skips them) is
// re-checked by the syncer: its input is rejected, unpaid.
func TestUnboundRecordIsRejectedBySyncer(t *testing.T) {
	h := payRun(t, 6, 5, 1, "Mean", finalAtCommit)
	for i := 0; i < 5; i++ {
		if err := h.submit(h.gradient(i, 0, 0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	// Trainer 5 signs trainer 0's payload hash; its node broadcasts the
	// record unchecked.
	g0 := h.gradient(0, 0, 0, 1)
	thief := &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: h.task, TrainerDID: h.tr[5].DID.String(), GradientPayload: g0.GradientPayload, PayloadHash: g0.PayloadHash}
	thief.Signature = h.tr[5].Sign(thief.Preimage())
	h.block(h.record(thief))
	_, tr := sealAndTranscript(h, 1)
	for _, in := range tr[0].Fragments[0].Inputs {
		bad := in.TrainerDID == thief.TrainerDID
		if bad != strings.HasPrefix(in.Rejected, "payload binding: ") {
			t.Fatalf("%s: rejected %q", in.TrainerDID, in.Rejected)
		}
	}
	if r := h.run().TrainerMetrics[thief.TrainerDID].CurrentReward; r != "0" {
		t.Fatalf("copy by hash paid %s", r)
	}
}
