package syncer_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/cometbft/cometbft/crypto/ed25519"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// BenchmarkReexecuteVsFinalize is the challenge figure: one fragment of
// N=16.7M f32 parameters, K=6 submissions, Mean and Nesterov in the Wasm
// engine (in process). It reports the syncer's original finalize of the
// fragment (computeCommit through Tick: fetch, decode, verify, aggregate,
// outer step, store, commit) once as finalize_s, a validator's first
// re-execution (inputs, weights fetched from the syncer's store by hash) as
// reexec_cold_s, and ns/op is a re-execution with the inputs already local.
// BENCH_N overrides N (e.g. for a quick run).
func BenchmarkReexecuteVsFinalize(b *testing.B) {
	n := int64(16_777_216)
	if s := os.Getenv("BENCH_N"); s != "" {
		fmt.Sscan(s, &n)
	}
	const K = 6
	ctx := context.Background()
	eng, err := plugins.NewEngine(ctx, plugins.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(ctx)
	now := time.Unix(1761350400, 0)
	clock := func() time.Time { return now }
	kv, _ := store.OpenInMemory()
	sk := key(b, did.KindMachine, 250)
	v := valSigner{ed25519.GenPrivKeyFromSecret([]byte("bench-val"))}
	mc, err := chain.NewManual(ctx, kv, chain.ManualOptions{Genesis: devGenesis(sk.DID.String()), Clock: clock, App: chain.AppOptions{Log: quiet},
		Validators: []abci.ValidatorUpdate{chain.ValidatorUpdate(v.priv.PubKey().Bytes(), 10)}})
	if err != nil {
		b.Fatal(err)
	}
	var peers []syncer.Blobs
	mk := func(k *did.Key, val syncer.VoteSigner) (*syncer.Node, syncer.Blobs) {
		local, _ := store.OpenInMemory()
		blobs := syncer.KVBlobs{KV: local}
		node, err := syncer.NewNode(ctx, syncer.Config{Chain: mc, Blobs: blobs, Local: local, Engine: eng, Signer: syncer.KeySigner{Key: k},
			Validator: val, Fetcher: peerFetcher{&peers}, Clock: clock, Logger: quiet, Dev: true})
		if err != nil {
			b.Fatal(err)
		}
		return node, blobs
	}
	sn, sblobs := mk(sk, nil)
	peers = append(peers, sblobs)
	vn, _ := mk(key(b, did.KindMachine, 251), v)
	sponsor := key(b, did.KindHuman, 200)
	if _, err := sn.Faucet(ctx, wire.FaucetParams{DID: sponsor.DID.String(), Amount: "2000000000000000000000"}); err != nil {
		b.Fatal(err)
	}
	raw := []byte(fmt.Sprintf(`{"task_id":"bench","sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":1,"dtype":"f32"},
 "tier":"Open","aggregation":"Mean","trainer_count":%d,"quorum":%d,"inner_steps":24,"max_rounds":2,"grace_window_ms":30000,
 "reward_pool":"1000000000000000000000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab","min_throughput":null,
 "created_at":1761350400,"challenge_window_blocks":1000,"challenge_bond":"100"}`, sponsor.DID, n, K, K))
	w := make([]float32, n)
	for j := range w {
		w[j] = 0.01 * float32(j%5)
	}
	weights, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{n}, w)}, nil)
	_, canon, err := wire.ParseSpec(raw)
	if err != nil {
		b.Fatal(err)
	}
	p := &wire.PostTaskParams{Spec: raw, InitWeights: weights}
	p.Nonce, p.ChainID = 1, chain.ManualChainID
	p.Signature = sponsor.Sign(p.Preimage(sponsor.DID.String(), wire.SpecHash(canon), wire.ContentHash(weights)))
	if _, err := sn.PostTask(ctx, p); err != nil {
		b.Fatal(err)
	}
	if err := sn.Tick(ctx); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < K; i++ {
		tk := key(b, did.KindMachine, byte(i+1))
		if _, err := sn.Faucet(ctx, wire.FaucetParams{DID: tk.DID.String(), Amount: "100"}); err != nil {
			b.Fatal(err)
		}
		e := &wire.EnrollParams{TaskID: "bench", TrainerDID: tk.DID.String(), Stake: "1"}
		e.Nonce, e.ChainID = uint64(10+i), chain.ManualChainID
		e.Signature = tk.Sign(e.Preimage())
		if _, err := sn.Enroll(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < K; i++ {
		tk := key(b, did.KindMachine, byte(i+1))
		for j := range w {
			w[j] = float32((j+i)%13) * 1e-3
		}
		payload, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{n}, w)}, bound("bench", tk.DID.String(), 0, 0))
		g := &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: "bench", TrainerDID: tk.DID.String(), GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
		g.Signature = tk.Sign(g.Preimage())
		if _, err := sn.Submit(ctx, g); err != nil {
			b.Fatal(err)
		}
	}
	t0 := time.Now()
	if err := sn.Tick(ctx); err != nil {
		b.Fatal(err)
	}
	finalize := time.Since(t0)
	re, err := vn.Reexecute(ctx, "bench", 0, 0)
	if err != nil || !re.Agrees() {
		b.Fatalf("re-execution %+v: %v", re, err)
	}
	cold := re.Elapsed
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if re, err = vn.Reexecute(ctx, "bench", 0, 0); err != nil || !re.Agrees() {
			b.Fatalf("re-execution %+v: %v", re, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(finalize.Seconds(), "finalize_s")
	b.ReportMetric(cold.Seconds(), "reexec_cold_s")
}
