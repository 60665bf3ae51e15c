package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// int4Encode is the documented int4-block encoder (compression.md): scale =
// f32(absmax/7), q = clamp(round-half-even(f32(x/scale)), -7, 7).
func int4Encode(x []float32, block int) []safetensors.Tensor {
	n := len(x)
	nb := (n + block - 1) / block
	q := make([]byte, (n+1)/2)
	scale := make([]float32, nb)
	for b := 0; b < nb; b++ {
		var amax float32
		for c := b * block; c < min(n, (b+1)*block); c++ {
			amax = max(amax, float32(math.Abs(float64(x[c]))))
		}
		s := amax / 7
		scale[b] = s
		for c := b * block; c < min(n, (b+1)*block); c++ {
			v := 0.0
			if s > 0 {
				v = math.RoundToEven(float64(x[c] / s))
			}
			v = max(-7, min(7, v))
			q[c/2] |= byte(int8(v)&15) << (4 * (c % 2))
		}
	}
	return []safetensors.Tensor{
		{Name: "q", Dtype: "U8", Shape: []int64{int64(len(q))}, Data: q},
		safetensors.FromF32("scale", []int64{int64(nb)}, scale),
	}
}

type codecRun struct {
	t     *testing.T
	ctx   context.Context
	node  *syncer.Node
	eng   *Engine
	now   time.Time
	nonce uint64
	sp    *did.Key
	tr    []*did.Key
	task  string
}

func seedKey(t *testing.T, kind string, i byte) *did.Key {
	k, err := did.FromSeed(kind, bytes.Repeat([]byte{i}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// runCompressed posts an int4-block run (M=4, K=3, F=2, 3 rounds), submits
// int4 payloads through the node's Submit, seals and returns the receipt.
func runCompressed(t *testing.T, compression string, hook func(h *codecRun, round int)) (*codecRun, []byte) {
	ctx := context.Background()
	kv, err := store.OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	h := &codecRun{t: t, ctx: ctx, eng: testEngine(t), now: time.Unix(1761350400, 0), task: "codec-test", sp: seedKey(t, did.KindHuman, 200)}
	for i := 0; i < 4; i++ {
		h.tr = append(h.tr, seedKey(t, did.KindMachine, byte(i+1)))
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sk := seedKey(t, did.KindMachine, 250)
	mc, err := chain.NewManual(ctx, kv, chain.ManualOptions{Clock: func() time.Time { return h.now }, App: chain.AppOptions{Log: quiet},
		Genesis: &chain.GenesisState{Accounts: []chain.GenesisAccount{{DID: sk.DID.String(), Balance: chain.DefaultCandidateFunds}}, Faucet: true, Candidates: []chain.GenesisAccount{{DID: sk.DID.String(), Balance: "1000000000000000000"}}}})
	if err != nil {
		t.Fatal(err)
	}
	h.node, err = syncer.NewNode(ctx, syncer.Config{Chain: mc, Blobs: syncer.KVBlobs{KV: kv}, Local: kv, Engine: h.eng, Signer: syncer.KeySigner{Key: sk},
		Dev: true, Clock: func() time.Time { return h.now }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	const M, K, F, R, N = 4, 3, 2, 3, 150
	raw := []byte(fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":%d,"dtype":"f32"},
 "tier":"Open","aggregation":"Mean","trainer_count":%d,"quorum":%d,"inner_steps":24,"max_rounds":%d,"grace_window_ms":30000,
 "reward_pool":"1000000000000000000000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab","min_throughput":null,
 "created_at":1761350400,"verification":["Finite"],"compression":%s}`, h.task, h.sp.DID, F*N, F, M, K, R, compression))
	var init []safetensors.Tensor
	for i := 0; i < F; i++ {
		v := make([]float32, N)
		for j := range v {
			v[j] = 0.01 * float32(i+j%5)
		}
		init = append(init, safetensors.FromF32(fmt.Sprintf("layer%d.w", i), []int64{N}, v))
	}
	weights, _ := safetensors.Encode(init, nil)
	if _, err := h.node.Faucet(ctx, wire.FaucetParams{DID: h.sp.DID.String(), Amount: "2000000000000000000000"}); err != nil {
		t.Fatal(err)
	}
	_, canon, err := wire.ParseSpec(raw)
	if err != nil {
		return h, []byte("parse: " + err.Error())
	}
	p := &wire.PostTaskParams{Spec: raw, InitWeights: weights, Signed: wire.Signed{ChainID: chain.ManualChainID}}
	h.nonce++
	p.Nonce = h.nonce
	p.Signature = h.sp.Sign(p.Preimage(h.sp.DID.String(), wire.SpecHash(canon), wire.ContentHash(weights)))
	if _, err := h.node.PostTask(ctx, p); err != nil {
		return h, []byte("post: " + err.Error())
	}
	if err := h.node.Tick(ctx); err != nil { // the node's candidate daemon enters the election
		t.Fatal(err)
	}
	for i := 0; i < M; i++ {
		if _, err := h.node.Faucet(ctx, wire.FaucetParams{DID: h.tr[i].DID.String(), Amount: "200000000000000000000"}); err != nil {
			t.Fatal(err)
		}
		e := &wire.EnrollParams{Signed: wire.Signed{ChainID: chain.ManualChainID}, TaskID: h.task, TrainerDID: h.tr[i].DID.String(), Stake: "100000000000000000000"}
		h.nonce++
		e.Nonce = h.nonce
		e.Signature = h.tr[i].Sign(e.Preimage())
		if _, err := h.node.Enroll(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < R; round++ {
		if hook != nil {
			hook(h, round)
		}
		for f := 0; f < F; f++ {
			for i := 0; i < M; i++ {
				x := make([]float32, N)
				for j := range x {
					x[j] = 0.001 * float32((j*(i+1)+round*7+f)%23-11)
				}
				if err := h.submit(i, round, f, int4Encode(x, 64)); err != nil {
					t.Fatalf("round %d fragment %d trainer %d: %v", round, f, i, err)
				}
			}
		}
		// Every trainer is in: commit the round now (the node's own ticks
		// would do it; the test does not wait for them).
		if st, _ := h.node.GetRun(ctx, h.task); st.Status == wire.StatusRunning && int(st.Round) == round {
			sk := seedKey(t, did.KindMachine, 250) // the elected (dev) syncer signs
			fp := &wire.FinalizeParams{TaskID: h.task, SyncerDID: sk.DID.String(), Round: uint64(round)}
			h.nonce++
			fp.Nonce = h.nonce
			fp.Signature = sk.Sign(fp.Preimage())
			if _, err := h.node.FinalizeRound(ctx, fp); err != nil {
				t.Fatalf("finalize round %d: %v", round, err)
			}
		}
	}
	if v, _ := h.node.GetRun(ctx, h.task); v.Status != wire.StatusSealed {
		t.Fatalf("status %s after %d rounds", v.Status, R)
	}
	rc, err := h.node.GetReceipt(ctx, h.task)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(rc)
	return h, out
}

func (h *codecRun) submit(i, round, f int, ts []safetensors.Tensor) error {
	payload, err := safetensors.Encode(ts, safetensors.Binding{Trainer: h.tr[i].DID.String(), Task: h.task, Round: uint64(round), Fragment: uint64(f)}.Metadata())
	if err != nil {
		return err
	}
	g := &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: h.task, TrainerDID: h.tr[i].DID.String(), Round: uint64(round), FragmentIndex: uint64(f),
		GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
	g.Signature = h.tr[i].Sign(g.Preimage())
	_, err = h.node.Submit(h.ctx, g)
	return err
}

// TestCompressedRunSealsVerifiesReplays: an int4-block run seals, its
// receipt verifies, every commit records the codec, the receipt is the same
// bytes twice, and a replay with a fresh engine reproduces the final model.
func TestCompressedRunSealsVerifiesReplays(t *testing.T) {
	h, raw := runCompressed(t, `{"codec":"int4-block","block":64}`, nil)
	if err := audit.CheckReceipt(raw, nil); err != nil {
		t.Fatalf("receipt invalid: %v", err)
	}
	var rc wire.Receipt
	if err := json.Unmarshal(raw, &rc); err != nil {
		t.Fatal(err)
	}
	codec, err := h.eng.ResolveCodec(h.ctx, "int4-block", json.RawMessage(`{"block":64}`))
	if err != nil {
		t.Fatal(err)
	}
	inPlugins := false
	for _, p := range rc.PluginHashes {
		inPlugins = inPlugins || p == codec.Hash
	}
	if !inPlugins {
		t.Fatal("the receipt's plugin hashes lack the codec")
	}
	transcript, err := h.node.GetTranscript(h.ctx, rc.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	blob, _, err := audit.TranscriptBlob(transcript)
	if err != nil {
		t.Fatal(err)
	}
	for _, round := range transcript {
		for _, fc := range round.Fragments {
			if fc.Codec == nil || fc.Codec.Hash != codec.Hash || string(fc.Codec.Params) != `{"block":64}` || fc.Status != wire.FragAggregated {
				t.Fatalf("round %d fragment %d: codec %+v status %s", round.Round, fc.Fragment, fc.Codec, fc.Status)
			}
		}
	}
	_, again := runCompressed(t, `{"codec":"int4-block","block":64}`, nil)
	if !bytes.Equal(raw, again) {
		t.Fatal("two identical compressed runs gave different receipts")
	}
	fresh, err := NewEngine(h.ctx, Config{Interpreter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close(h.ctx)
	var pretty bytes.Buffer // a re-indented receipt replays the same
	if err := json.Indent(&pretty, raw, "", "  "); err != nil {
		t.Fatal(err)
	}
	rep, err := syncer.Replay(h.ctx, pretty.Bytes(), blob, h.node, fresh, nil)
	if err != nil || !rep.Match {
		t.Fatalf("replay: %+v %v", rep, err)
	}
	if rep.Aggregations != 6 {
		t.Fatalf("replay ran %d aggregations, want 6", rep.Aggregations)
	}
}

// TestCompressedSubmissionRefusals: malformed encodings and uncompressed
// payloads are refused with the codec's precise reason and change nothing;
// specs naming an unknown codec or bad parameters are refused at posting.
func TestCompressedSubmissionRefusals(t *testing.T) {
	nan := float32(math.NaN())
	good := func() []safetensors.Tensor { return int4Encode(make([]float32, 150), 64) }
	cases := []struct {
		name string
		ts   func() []safetensors.Tensor
		err  string
	}{
		{"wrong length", func() []safetensors.Tensor {
			ts := good()
			ts[0] = safetensors.Tensor{Name: "q", Dtype: "U8", Shape: []int64{74}, Data: make([]byte, 74)}
			return ts
		}, "q has 74 bytes, want 75 for N=150"},
		{"NaN scale", func() []safetensors.Tensor {
			ts := good()
			ts[1] = safetensors.FromF32("scale", []int64{3}, []float32{1, nan, 1})
			return ts
		}, "scale of block 1 is NaN, infinite or negative"},
		{"uncompressed payload", func() []safetensors.Tensor {
			return []safetensors.Tensor{safetensors.FromF32("layer0.w", []int64{150}, make([]float32, 150))}
		}, `tensor "layer0.w" is not part of the encoding`},
	}
	checked := false
	runCompressed(t, `{"codec":"int4-block","block":64}`, func(h *codecRun, round int) {
		if round != 1 {
			return
		}
		before, _ := h.node.GetRun(h.ctx, h.task)
		for _, tc := range cases {
			err := h.submit(0, 1, 0, tc.ts())
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.err)
			}
		}
		// A compressed payload carries its binding like any other: one
		// bound to trainer 1, signed by trainer 0, is refused.
		p, _ := safetensors.Encode(good(), safetensors.Binding{Trainer: h.tr[1].DID.String(), Task: h.task, Round: 1}.Metadata())
		g := &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: h.task, TrainerDID: h.tr[0].DID.String(), Round: 1, GradientPayload: p, PayloadHash: wire.ContentHash(p)}
		g.Signature = h.tr[0].Sign(g.Preimage())
		if _, err := h.node.Submit(h.ctx, g); err == nil || !strings.Contains(err.Error(), "the payload names trainer "+h.tr[1].DID.String()) {
			t.Errorf("compressed payload bound to another trainer: %v", err)
		}
		after, _ := h.node.GetRun(h.ctx, h.task)
		a, _ := json.Marshal(before)
		b, _ := json.Marshal(after)
		if !bytes.Equal(a, b) {
			t.Error("a refused submission changed the run")
		}
		checked = true
	})
	if !checked {
		t.Fatal("the refusals were not exercised")
	}
	for _, bad := range []struct{ compression, err string }{
		{`{"codec":"int3-block"}`, `unknown codec "int3-block"`},
		{`{"codec":"int4-block","block":0}`, "param block: 0 outside"},
		{`{"codec":"topk","k":0.01,"k":0.02}`, `duplicate member "k" in object compression`}, // refused by the spec parser (wire.CheckStrictJSON) before the codec sees it
		{`{"codec":"topk","k":"1%"}`, "parameter k: want a number"},
		{`{"block":64}`, `"codec" is required`},
	} {
		if _, raw := runCompressed(t, bad.compression, nil); !strings.Contains(string(raw), bad.err) {
			t.Errorf("post with %s: %s, want %q", bad.compression, raw, bad.err)
		}
	}
}
