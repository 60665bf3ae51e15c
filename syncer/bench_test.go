package syncer_test

import (
	"context"
	"fmt"
	"math/big"
	"runtime"
	"testing"
	"time"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// BenchmarkVerifyReceipt measures receipt verification against receipt
// size, in one run: the version-1 receipt (transcript inline, verified by the
// frozen v1 rules in receipt_v1_test.go), the version-2 compact check
// (CheckReceipt) and the v2 full check with the transcript blob
// (CheckReceiptFull), at 16, 128 and 1024 rounds × 12 fragments × 6 inputs.
// bench/results/receipts.md has the figures.
func BenchmarkVerifyReceipt(b *testing.B) {
	for _, rounds := range []int{16, 128, 1024} {
		s := newSynthRun(b, rounds, 12)
		v1 := v1Receipt(b, s)
		if err := v1Check(v1); err != nil {
			b.Fatal(err)
		}
		run := func(name string, size int, f func() error) {
			b.Run(fmt.Sprintf("%s/rounds=%d", name, rounds), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if err := f(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(size), "bytes")
			})
		}
		run("v1", len(v1), func() error { return v1Check(v1) })
		run("v2", len(s.raw), func() error { return audit.CheckReceipt(s.raw, nil) })
		run("v2full", len(s.raw)+len(s.blob), func() error { return audit.CheckReceiptFull(s.raw, s.blob) })
	}
}

// BenchmarkBuildReceipt is the cost of building a receipt and its
// transcript blob (what the seal, and a chain checking a signReceipt
// transaction, pay once per run).
func BenchmarkBuildReceipt(b *testing.B) {
	for _, rounds := range []int{16, 128, 1024} {
		s := newSynthRun(b, rounds, 12)
		b.Run(fmt.Sprintf("rounds=%d", rounds), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, _, err := audit.BuildReceipt(s.in); err != nil {
					b.Fatal(err)
				}
			}
		})
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
	h := &harness{t: t, ctx: context.Background(), kv: kv, task: "bench33", eng: syncer.NewNativeEngine(), now: time.Unix(1761350400, 0)}
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

// BenchmarkVerifyReceiptWorstCase is the compact check of a receipt near
// the 64 KiB cap: 64 syncers (the limit, each committing a round) and 225
// reward lines.
func BenchmarkVerifyReceiptWorstCase(b *testing.B) {
	t := &testing.T{}
	s := newSynthRun(b, 64, 2)
	var es []election.Entrant
	keys := map[string]*did.Key{}
	for i := 0; i < audit.MaxReceiptSyncers; i++ {
		k := key(t, did.KindMachine, byte(100+i))
		keys[k.DID.String()] = k
		e, err := election.Enter(k.Priv, k.DID.String(), big.NewInt(int64(1000+i)), s.in.Election.Alpha)
		if err != nil {
			b.Fatal(err)
		}
		es = append(es, e)
	}
	el, _ := election.Record(s.in.Election.Alpha, es)
	order, _ := election.Succession(el)
	for r := range s.in.Rounds {
		for f := range s.in.Rounds[r].Fragments {
			s.in.Rounds[r].Fragments[f].Syncer, s.in.Rounds[r].Fragments[f].Ticket = order[r].DID, uint64(r)
		}
	}
	s.in.Election, s.in.SyncerDID = &el, order[63].DID
	var lines []wire.Payout
	for i := 0; i < 225; i++ {
		lines = append(lines, wire.Payout{DID: key(t, did.KindHuman, byte(i)).DID.String(), Reward: "0", Refund: "100000000000000000000", Slashed: "0", WeightSum: "0"})
	}
	sortPayouts(lines)
	s.in.Rewards, s.in.SponsorRefund = lines, "1000000000000000000000"
	rc, _, err := audit.BuildReceipt(s.in)
	if err != nil {
		b.Fatal(err)
	}
	s.rc = rc
	s.sign(b, keys[s.in.SyncerDID])
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := audit.CheckReceipt(s.raw, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(s.raw)), "bytes")
}
