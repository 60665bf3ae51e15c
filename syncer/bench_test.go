package syncer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// syntheticReceipt builds a signed receipt of rounds × frags with 6 inputs
// per fragment, the size of the seed's run (1024 rounds × 12 fragments).
func syntheticReceipt(b *testing.B, rounds, frags int) []byte {
	signer := key(&testing.T{}, did.KindMachine, 9)
	spec := spec("bench", key(&testing.T{}, did.KindHuman, 8).DID.String(), 8, 6, frags, rounds)
	_, canon, err := wire.ParseSpec(spec)
	if err != nil {
		b.Fatal(err)
	}
	rc := &wire.Receipt{Version: syncer.ReceiptVersion, TaskID: "bench", TaskSpec: canon, SpecHash: wire.SpecHash(canon), SyncerDID: signer.DID.String(),
		PluginHashes: []wire.Hash{}, AttestationDigests: []wire.Hash{}, Engine: json.RawMessage(`{}`), SponsorRefund: "0"}
	var roots []wire.Hash
	for r := 0; r < rounds; r++ {
		c := wire.RoundCommit{TaskID: "bench", Round: uint64(r), Missed: []string{}, Evicted: []string{}, Joined: []string{}, Left: []string{}, Equivocations: []wire.Hash{}}
		for f := 0; f < frags; f++ {
			fc := wire.FragmentCommit{Fragment: f, Status: wire.FragAggregated, Rule: "Mean", RuleParams: json.RawMessage(`{}`)}
			for i := 0; i < 6; i++ {
				fc.Inputs = append(fc.Inputs, wire.CommitInput{TrainerDID: key(&testing.T{}, did.KindMachine, byte(i+1)).DID.String(), PayloadHash: wire.ContentHash([]byte(fmt.Sprint(r, f, i))), Selected: true})
			}
			c.Fragments = append(c.Fragments, fc)
		}
		c.ModelHash = wire.ContentHash([]byte(fmt.Sprint(r)))
		h, _ := syncer.RoundCommitHash(&c)
		roots = append(roots, h)
		rc.Transcript = append(rc.Transcript, c)
	}
	rc.FinalModelHash = rc.Transcript[rounds-1].ModelHash
	rc.RunRoot = syncer.RunRoot(rc.SpecHash, roots, rc.FinalModelHash)
	pre, _ := syncer.ReceiptPreimage(rc)
	rc.Signature = signer.Sign(pre)
	raw, _ := json.Marshal(rc)
	return raw
}

// BenchmarkVerifyReceipt1024x12 verifies a receipt of the seed's size.
func BenchmarkVerifyReceipt1024x12(b *testing.B) {
	raw := syntheticReceipt(b, 1024, 12)
	if syncer.VerifyReceipt(raw, nil) != 1 {
		b.Fatal(syncer.CheckReceipt(raw, nil))
	}
	b.SetBytes(int64(len(raw)))
	b.ReportMetric(float64(len(raw))/1e6, "receipt_MB")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if syncer.VerifyReceipt(raw, nil) != 1 {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkSubmit33MB ingests 33 MB fragment submissions (8.25M f32) through
// Node.Submit on the Pebble store: hash, signature, strict parse, checks,
// synced write. Reports MB/s and the Go heap growth per submission.
func BenchmarkSubmit33MB(b *testing.B) {
	const n = 33_000_000 / 4
	dir := b.TempDir()
	kv, err := store.Open(context.Background(), dir, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer kv.Close()
	t := &testing.T{}
	h := &harness{t: t, ctx: context.Background(), kv: kv, task: "bench33"}
	h.sponsor = key(t, did.KindHuman, 200)
	for i := 0; i < 64; i++ {
		h.tr = append(h.tr, key(t, did.KindMachine, byte(i+1)))
	}
	h.open()
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	w, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{n}, make([]float32, n))}, nil)
	if err := h.post(spec(h.task, h.sponsor.DID.String(), 64, 64, 1, 1), w); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 64; i++ {
		h.faucet(h.tr[i].DID.String(), "10")
		if err := h.enroll(i, "1"); err != nil {
			b.Fatal(err)
		}
	}
	vals := make([]float32, n)
	for j := range vals {
		vals[j] = float32(j%13) * 1e-3
	}
	subs := make([]*wire.OuterGradient, 0, 63)
	for i := 0; i < 63 && i < b.N+1; i++ {
		payload, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{n}, vals)}, nil)
		payload[len(payload)-1] = byte(i)
		g := &wire.OuterGradient{TaskID: h.task, TrainerDID: h.tr[i].DID.String(), GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
		g.Signature = h.tr[i].Sign(g.Preimage())
		subs = append(subs, g)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.SetBytes(int64(len(subs[0].GradientPayload)))
	b.ResetTimer()
	for i := 0; i < b.N && i < len(subs); i++ {
		if _, err := h.node.Submit(h.ctx, subs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(min(b.N, len(subs)))/float64(len(subs[0].GradientPayload)), "alloc_bytes/payload_byte")
}
