package syncer_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// harness drives a Node as the RPC layer would, over a real chain.App
// sequenced by chain.Manual (every write is a block at the harness's clock),
// with deterministic keys, and checks ledger conservation after every call.
type harness struct {
	t       *testing.T
	ctx     context.Context
	kv      machine.KV // the chain's store; the node's blobs share it
	chain   *chain.Manual
	node    *syncer.Node
	eng     syncer.Engine
	now     time.Time
	nonce   uint64
	sponsor *did.Key
	tr      []*did.Key
	task    string
	// stateDir keeps the chain's state tree across open() (a restart).
	stateDir string
	// configure, when set, adjusts the node's Config at each open().
	configure func(*syncer.Config)
}

func key(t testing.TB, kind string, i byte) *did.Key {
	k, err := did.FromSeed(kind, bytes.Repeat([]byte{i}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newHarness(t *testing.T, kv machine.KV) *harness {
	return newHarnessWith(t, kv, syncer.NewNativeEngine())
}

func newHarnessWith(t *testing.T, kv machine.KV, eng syncer.Engine) *harness {
	h := &harness{t: t, ctx: context.Background(), kv: kv, eng: eng, now: time.Unix(1761350400, 0), task: "train-test"}
	h.sponsor = key(t, did.KindHuman, 200)
	for i := 0; i < 10; i++ {
		h.tr = append(h.tr, key(t, did.KindMachine, byte(i+1)))
	}
	h.open()
	return h
}

// freeParams are chain parameters without transaction fees or economic
// floors: the tests of run, settlement and receipt rules keep their small
// exact amounts; fees and floors have their own tests (ante_test.go) on the
// default parameters.
func freeParams() *machine.GenesisParams {
	return &machine.GenesisParams{TxFeeBase: "0", TxFeeByte: "0", MinRewardPool: "0", MinStake: "0", MinChallengeBond: "0", ReexecBondByte: "0"}
}

// devGenesis is what a --dev node's chain starts from: the faucet, and the
// node's key registered as the only syncer candidate.
func devGenesis(syncerDID string) *chain.GenesisState {
	return &chain.GenesisState{Accounts: []chain.GenesisAccount{}, Faucet: true, Params: freeParams(),
		Candidates: []chain.GenesisAccount{{DID: syncerDID, Balance: "1000000000000000000"}}}
}

// open (re)starts the chain and the node over h.kv.
func (h *harness) open() {
	h.t.Helper()
	if h.stateDir == "" {
		h.stateDir = h.t.TempDir()
	}
	if h.chain != nil {
		_ = h.chain.App().Close() // the state tree's directory is opened again below
	} else {
		h.t.Cleanup(func() { _ = h.chain.App().Close() })
	}
	mc, err := chain.NewManual(h.ctx, h.kv, chain.ManualOptions{Genesis: devGenesis(h.syncerKey().DID.String()),
		Clock: func() time.Time { return h.now }, App: chain.AppOptions{Log: quiet, StateDir: h.stateDir}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.chain = mc
	cfg := syncer.Config{Chain: mc, Blobs: syncer.KVBlobs{KV: h.kv}, Local: h.kv, Engine: h.eng,
		Signer: syncer.KeySigner{Key: h.syncerKey()}, Dev: true, Clock: func() time.Time { return h.now }, Logger: quiet}
	if h.configure != nil {
		h.configure(&cfg)
	}
	n, err := syncer.NewNode(h.ctx, cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.node = n
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// advance moves the clock and makes an empty block (the chain's timers run).
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.now = h.now.Add(d)
	if _, err := h.chain.Block(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.conserve("block")
}

// tick makes an empty block at the clock and runs the node's worker once.
func (h *harness) tick() error {
	h.advance(0)
	return h.node.Tick(h.ctx)
}

func (h *harness) conserve(op string) {
	h.t.Helper()
	var total *big.Int
	err := h.chain.View(h.ctx, func(v machine.View) error {
		var err error
		total, _, err = machine.LedgerTotal(h.ctx, v.KV)
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if total.Sign() != 0 {
		h.t.Fatalf("after %s: ledger total is %s, want 0", op, total)
	}
}

func (h *harness) postingFee() *big.Int {
	f, err := h.node.PostingFee(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return f
}

func (h *harness) publishFee() *big.Int {
	f, err := h.node.PublishFee(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return f
}

func (h *harness) nextNonce() uint64 { h.nonce++; return h.nonce }

// spec is an f32 run of m trainers, quorum k, f fragments of 16 values
// (initWeights' F32 tensors) and rounds rounds.
func spec(task, sponsor string, m, k, f, rounds int) []byte {
	return specDtype("f32", task, sponsor, m, k, f, rounds)
}

// specDtype is spec with architecture.dtype dtype (f32 or bf16).
func specDtype(dtype, task, sponsor string, m, k, f, rounds int) []byte {
	s := fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":%d,
 "dtype":%q,"metadata":{"context_len":32,"horizon":8}},"tier":"Open","aggregation":"Mean",
 "trainer_count":%d,"quorum":%d,"inner_steps":24,"max_rounds":%d,"grace_window_ms":30000,
 "reward_pool":"1000000000000000000000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab",
 "min_throughput":null,"created_at":1761350400}`, task, sponsor, f*16, f, dtype, m, k, rounds)
	return []byte(s)
}

func initWeights(t *testing.T, f, n int) []byte {
	var ts []safetensors.Tensor
	for i := 0; i < f; i++ {
		v := make([]float32, n)
		for j := range v {
			v[j] = 0.01 * float32(i+1)
		}
		ts = append(ts, safetensors.FromF32(fmt.Sprintf("layer%d.w", i), []int64{int64(n)}, v))
	}
	b, err := safetensors.Encode(ts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (h *harness) post(raw, weights []byte) error {
	canon, err := jcsOf(raw)
	if err != nil {
		return err
	}
	p := &wire.PostTaskParams{Spec: raw, InitWeights: weights}
	p.Nonce, p.ChainID = h.nextNonce(), chain.ManualChainID
	var wh wire.Hash
	if len(weights) > 0 {
		wh = wire.ContentHash(weights)
	}
	p.Signature = h.sponsor.Sign(p.Preimage(h.sponsor.DID.String(), wire.SpecHash(canon), wh))
	_, err = h.node.PostTask(h.ctx, p)
	h.conserve("post")
	if err == nil {
		// The node's candidate daemon enters the run's election.
		if terr := h.node.Tick(h.ctx); terr != nil {
			h.t.Fatal(terr)
		}
	}
	return err
}

func jcsOf(raw []byte) ([]byte, error) {
	_, canon, err := wire.ParseSpec(raw)
	return canon, err
}

func (h *harness) faucet(d string, amt string) {
	if _, err := h.node.Faucet(h.ctx, wire.FaucetParams{DID: d, Amount: amt}); err != nil {
		h.t.Fatal(err)
	}
	h.conserve("faucet")
}

func (h *harness) enroll(i int, stake string) error {
	p := &wire.EnrollParams{TaskID: h.task, TrainerDID: h.tr[i].DID.String(), Stake: stake}
	p.Nonce, p.ChainID = h.nextNonce(), chain.ManualChainID
	p.Signature = h.tr[i].Sign(p.Preimage())
	_, err := h.node.Enroll(h.ctx, p)
	h.conserve("enroll")
	return err
}

func (h *harness) leave(i int) error {
	p := &wire.LeaveParams{TaskID: h.task, TrainerDID: h.tr[i].DID.String()}
	p.Nonce, p.ChainID = h.nextNonce(), chain.ManualChainID
	p.Signature = h.tr[i].Sign(p.Preimage())
	_, err := h.node.Leave(h.ctx, p)
	h.conserve("leave")
	return err
}

// syncerKey is the key of the node's own (dev) candidacy, the elected syncer.
func (h *harness) syncerKey() *did.Key { return key(h.t, did.KindMachine, 250) }

// finalize sends finalizeRound signed by the elected syncer.
func (h *harness) finalize(round int) (*wire.FinalizeResult, error) {
	return h.finalizeAs(h.syncerKey(), round)
}

func (h *harness) finalizeAs(k *did.Key, round int) (*wire.FinalizeResult, error) {
	p := &wire.FinalizeParams{TaskID: h.task, SyncerDID: k.DID.String(), Round: uint64(round)}
	p.Nonce, p.ChainID = h.nextNonce(), chain.ManualChainID
	p.Signature = k.Sign(p.Preimage())
	res, err := h.node.FinalizeRound(h.ctx, p)
	h.conserve("finalize")
	return res, err
}

func (h *harness) weights(f int) []safetensors.Tensor {
	w, err := h.node.GetWeights(h.ctx, wire.GetWeightsParams{TaskID: h.task, FragmentIndex: uint64(f)})
	if err != nil {
		h.t.Fatal(err)
	}
	if wire.ContentHash(w.Payload) != w.WeightsHash {
		h.t.Fatalf("getWeights payload does not hash to weights_hash")
	}
	ts, _, err := safetensors.Parse(w.Payload, safetensors.DefaultLimits)
	if err != nil {
		h.t.Fatal(err)
	}
	return ts
}

func (h *harness) gradient(i, round, f int, scale float32) *wire.OuterGradient {
	var out []safetensors.Tensor
	for _, t := range h.weights(f) {
		v, _ := safetensors.F32Values(t)
		for j := range v {
			v[j] = scale * 0.001 * pattern(i, round, f, j)
		}
		out = append(out, safetensors.FromF32(t.Name, t.Shape, v))
	}
	payload, _ := safetensors.Encode(out, bound(h.task, h.tr[i].DID.String(), round, f))
	g := &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: h.task, TrainerDID: h.tr[i].DID.String(), Round: uint64(round), FragmentIndex: uint64(f),
		GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
	g.Signature = h.tr[i].Sign(g.Preimage())
	return g
}

func (h *harness) submit(g *wire.OuterGradient) error {
	_, err := h.node.Submit(h.ctx, g)
	h.conserve("submit")
	return err
}

func (h *harness) run() *wire.RunView {
	v, err := h.node.GetRun(h.ctx, h.task)
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

// fullRun posts, enrols 8, runs `rounds` rounds with K..M submissions,
// one trainer leaving in round 1 and one joining late, and seals.
func fullRun(t *testing.T, kv machine.KV, crashAt func(h *harness, round int)) (*harness, []byte) {
	const M, K, F, R = 8, 6, 4, 4
	h := newHarness(t, kv)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	if err := h.post(spec(h.task, h.sponsor.DID.String(), M, K, F, R), initWeights(t, F, 16)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 9; i++ {
		h.faucet(h.tr[i].DID.String(), "200000000000000000000")
	}
	for i := 0; i < M; i++ {
		if err := h.enroll(i, "100000000000000000000"); err != nil {
			t.Fatal(err)
		}
	}
	if st := h.run().Status; st != wire.StatusRunning {
		t.Fatalf("status %s after M enrolments", st)
	}
	for round := 0; round < R; round++ {
		if crashAt != nil {
			crashAt(h, round)
		}
		if round == 1 {
			if err := h.leave(7); err != nil {
				t.Fatal(err)
			}
			if err := h.enroll(8, "100000000000000000000"); err != nil { // joins, active from round 2
				t.Fatal(err)
			}
		}
		for f := 0; f < F; f++ {
			subs := []int{0, 1, 2, 3, 4, 5}
			if round >= 2 {
				subs = append(subs, 8)
			}
			for _, i := range subs {
				if err := h.submit(h.gradient(i, round, f, 1+float32(i))); err != nil {
					t.Fatalf("round %d fragment %d trainer %d: %v", round, f, i, err)
				}
			}
		}
		// Trainers 6 and 7 are active and have not submitted: the syncer
		// can finalize only once their grace window has passed.
		h.advance(31 * time.Second)
		if _, err := h.finalize(round); err != nil && round < R-1 {
			t.Fatalf("finalize round %d: %v", round, err)
		}
	}
	if st := h.run().Status; st != wire.StatusSealed {
		t.Fatalf("status %s after %d rounds", st, R)
	}
	rc, err := h.node.GetReceipt(h.ctx, h.task)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(rc)
	return h, raw
}

func TestFullRunSealsToVerifiedReceipt(t *testing.T) {
	kv, _ := store.OpenInMemory()
	h, raw := fullRun(t, kv, nil)
	if v := audit.VerifyReceipt(raw, nil); v != 1 {
		t.Fatalf("receipt invalid: %v", audit.CheckReceipt(raw, nil))
	}
	// Flip one byte of the run root: invalid.
	var rc wire.Receipt
	_ = json.Unmarshal(raw, &rc)
	bad := bytes.Replace(raw, []byte(rc.RunRoot.String()), []byte(flip(rc.RunRoot.String())), 1)
	if audit.VerifyReceipt(bad, nil) != 0 {
		t.Fatal("tampered receipt verified")
	}
	if audit.VerifyReceipt(raw, rc.RunRoot[:]) != 1 || audit.VerifyReceipt(raw, make([]byte, 32)) != 0 {
		t.Fatal("claimed-root check wrong")
	}
	// The transcript blob checks in full, and every round commit is
	// provably in the root.
	blob := h.transcript()
	if err := audit.CheckReceiptFull(raw, blob); err != nil {
		t.Fatal(err)
	}
	for r := uint64(0); r < 4; r++ {
		if _, _, _, _, err := audit.InclusionProof(raw, blob, r); err != nil {
			t.Fatal(err)
		}
	}
	// Metrics and payout: the leaver has 4 accepted in round 0 only... trainer 7 never submitted.
	v := h.run()
	m := v.TrainerMetrics[h.tr[0].DID.String()]
	if m.Accepted != 16 || m.CurrentReward == "0" {
		t.Fatalf("trainer 0 metrics %+v", m)
	}
	tr, _ := h.node.GetTranscript(h.ctx, h.task)
	if rc.Rounds != 4 || len(tr) != 4 || tr[1].Left[0] != h.tr[7].DID.String() || tr[2].Joined[0] != h.tr[8].DID.String() {
		t.Fatalf("membership not recorded: %+v", tr)
	}
	if len(tr[0].Missed) != 2 { // trainers 6 and 7 submitted nothing in round 0
		t.Fatalf("missed %v", tr[0].Missed)
	}
	for _, c := range tr {
		for _, fc := range c.Fragments {
			if fc.Syncer != h.syncerKey().DID.String() || fc.Ticket != 0 {
				t.Fatalf("round %d fragment %d committed by %q ticket %d", c.Round, fc.Fragment, fc.Syncer, fc.Ticket)
			}
		}
	}
}

// transcript is the run's transcript blob, built from getTranscript as an
// auditor does.
func (h *harness) transcript() []byte {
	h.t.Helper()
	tr, err := h.node.GetTranscript(h.ctx, h.task)
	if err != nil {
		h.t.Fatal(err)
	}
	blob, _, err := audit.TranscriptBlob(tr)
	if err != nil {
		h.t.Fatal(err)
	}
	return blob
}

// receiptCarries checks the sealed run's receipt as an auditor does
// (offline verify, then against the transcript blob) and that the
// transcript carries want (a verdict's JSON field).
func (h *harness) receiptCarries(want string) {
	h.t.Helper()
	rc, err := h.node.GetReceipt(h.ctx, h.task)
	if err != nil {
		h.t.Fatal(err)
	}
	raw, _ := json.Marshal(rc)
	if audit.VerifyReceipt(raw, nil) != 1 {
		h.t.Fatalf("receipt: %v", audit.CheckReceipt(raw, nil))
	}
	blob := h.transcript()
	if err := audit.CheckReceiptFull(raw, blob); err != nil {
		h.t.Fatal(err)
	}
	if !strings.Contains(string(blob), want) {
		h.t.Fatalf("the transcript blob does not carry %s", want)
	}
}

func flip(s string) string {
	last := s[len(s)-1]
	if last == '0' {
		return s[:len(s)-1] + "1"
	}
	return s[:len(s)-1] + "0"
}

func TestDeterministicReceipt(t *testing.T) {
	kv1, _ := store.OpenInMemory()
	kv2, _ := store.OpenInMemory()
	_, a := fullRun(t, kv1, nil)
	_, b := fullRun(t, kv2, func(h *harness, round int) { h.open() }) // a restart before every round
	if !bytes.Equal(a, b) {
		t.Fatal("receipts differ between identical runs")
	}
}

func TestRefusalsChangeNothing(t *testing.T) {
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	bad := spec(h.task, h.sponsor.DID.String(), 8, 9, 4, 3)
	if err := h.post(bad, initWeights(t, 4, 16)); err == nil || !strings.Contains(err.Error(), "K=9 exceeds") {
		t.Fatalf("K > M: %v", err)
	}
	if err := h.post(spec(h.task, h.sponsor.DID.String(), 8, 6, 4, 3), initWeights(t, 4, 16)); err != nil {
		t.Fatal(err)
	}
	h.faucet(h.tr[0].DID.String(), "100")
	if err := h.enroll(0, "1000"); machine.KindOf(err) != machine.KindFunds {
		t.Fatalf("stake above balance: %v", err)
	}
	for i := 0; i < 8; i++ {
		h.faucet(h.tr[i].DID.String(), "1000")
		if err := h.enroll(i, "1000"); err != nil {
			t.Fatal(err)
		}
	}
	h.faucet(h.tr[8].DID.String(), "1000")
	if err := h.enroll(8, "1000"); err == nil || !strings.Contains(err.Error(), "full") {
		t.Fatalf("enrolment past M: %v", err)
	}
	before := snapshot(t, h)
	g := h.gradient(0, 0, 0, 1)
	cases := []struct {
		name string
		mut  func(g *wire.OuterGradient)
		want string
	}{
		{"bad signature", func(g *wire.OuterGradient) { g.Signature = append([]byte{}, g.Signature...); g.Signature[0] ^= 1 }, "signature"},
		{"unknown DID", func(g *wire.OuterGradient) { g.TrainerDID = h.tr[9].DID.String() }, "not enrolled"},
		{"wrong round", func(g *wire.OuterGradient) { g.Round = 5 }, "wrong round"},
		{"wrong fragment", func(g *wire.OuterGradient) { g.FragmentIndex = 9 }, "wrong fragment"},
		{"payload hash mismatch", func(g *wire.OuterGradient) { g.PayloadHash[0] ^= 1 }, "payload_hash mismatch"},
		{"truncated safetensors", func(g *wire.OuterGradient) { resign(h, g, g.GradientPayload[:len(g.GradientPayload)-4]) }, "gradient_payload"},
		{"wrong shape", func(g *wire.OuterGradient) {
			p, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("layer0.w", []int64{4, 4}, make([]float32, 16))}, bound(h.task, g.TrainerDID, 0, 0))
			resign(h, g, p)
		}, "shape"},
		{"wrong dtype", func(g *wire.OuterGradient) {
			p, _ := safetensors.Encode([]safetensors.Tensor{{Name: "layer0.w", Dtype: "BF16", Shape: []int64{16}, Data: make([]byte, 32)}}, bound(h.task, g.TrainerDID, 0, 0))
			resign(h, g, p)
		}, "dtype"},
	}
	for _, tc := range cases {
		c := *g
		tc.mut(&c)
		err := h.submit(&c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want error containing %q", tc.name, err, tc.want)
		}
		if after := snapshot(t, h); after != before {
			t.Errorf("%s: state changed", tc.name)
		}
	}
	if err := h.submit(g); err != nil {
		t.Fatal(err)
	}
	if err := h.submit(g); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("duplicate: %v", err)
	}
	// Equivocation: different payload, same round and fragment: refused,
	// the claim recorded; the round's syncer slashes when it commits the
	// fragment (below).
	g2 := h.gradient(0, 0, 0, 3)
	if err := h.submit(g2); err == nil || !strings.Contains(err.Error(), "equivocation") {
		t.Fatalf("equivocation: %v", err)
	}
	// Grace window: K submissions, then τ passes: late submission refused.
	for i := 1; i < 6; i++ {
		if err := h.submit(h.gradient(i, 0, 0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	h.advance(31 * time.Second)
	if err := h.submit(h.gradient(6, 0, 0, 1)); err == nil || !strings.Contains(err.Error(), "grace window") {
		t.Fatalf("after grace window: %v", err)
	}
	if err := h.tick(); err != nil {
		t.Fatal(err)
	}
	if !h.run().Fragments[0].Committed {
		t.Fatal("fragment 0 not committed after τ")
	}
	// The verdict's slash waits for the round to be final: with no
	// challenge window, at the round's close (below), never at the
	// fragment's commit.
	if v := h.run(); v.Trainers[indexOf(v, h.tr[0].DID.String())].Slashed != "0" {
		t.Fatalf("equivocation slash before the round closed: %+v", v.Trainers)
	}
	// Round deadline: the other fragments never reach K: no-quorum, weights kept.
	w1 := h.run().Fragments[1].WeightsHash
	h.advance(11 * time.Minute)
	if err := h.tick(); err != nil {
		t.Fatal(err)
	}
	tr, _ := h.node.GetTranscript(h.ctx, h.task)
	if len(tr) != 1 || tr[0].Fragments[1].Status != wire.FragNoQuorum || tr[0].Fragments[1].WeightsAfter != w1 || tr[0].Fragments[0].Status != wire.FragAggregated {
		t.Fatalf("deadline transcript %+v", tr)
	}
	if v := h.run(); v.Trainers[indexOf(v, h.tr[0].DID.String())].Slashed != "500" {
		t.Fatalf("equivocation slash when the round is final: %+v", v.Trainers)
	}
}

func indexOf(v *wire.RunView, d string) int {
	for i, t := range v.Trainers {
		if t.DID == d {
			return i
		}
	}
	return -1
}

// pattern is a deterministic pseudo-random value in [−1, 1) per trainer,
// round, fragment and element: every trainer's gradient points its own way,
// so the copy rule (copies.go) never mistakes two test trainers for copies.
func pattern(i, round, f, j int) float32 {
	x := uint64(i)<<48 ^ uint64(round)<<32 ^ uint64(f)<<24 ^ uint64(j)
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float32(int64(x>>40)%1000) / 1000
}

// bound is the __metadata__ that binds a test payload to its trainer, task,
// round and fragment (safetensors.md §6).
func bound(task, trainer string, round, f int) map[string]string {
	return safetensors.Binding{Trainer: trainer, Task: task, Round: uint64(round), Fragment: uint64(f)}.Metadata()
}

// bindTo returns payload bound to (task, trainer, round, f).
func bindTo(t testing.TB, payload []byte, task, trainer string, round, f uint64) []byte {
	t.Helper()
	b, err := safetensors.Bind(payload, safetensors.Binding{Trainer: trainer, Task: task, Round: round, Fragment: f}, safetensors.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// repadded is payload with 8 more spaces of header padding: another
// encoding of the same header (parsers accept any padding).
func repadded(payload []byte) []byte {
	n := binary.LittleEndian.Uint64(payload)
	out := make([]byte, 0, len(payload)+8)
	out = binary.LittleEndian.AppendUint64(out, n+8)
	out = append(out, payload[8:8+n]...)
	out = append(out, "        "...)
	return append(out, payload[8+n:]...)
}

func resign(h *harness, g *wire.OuterGradient, payload []byte) {
	g.GradientPayload = payload
	g.PayloadHash = wire.ContentHash(payload)
	for _, k := range h.tr {
		if k.DID.String() == g.TrainerDID {
			g.Signature = k.Sign(g.Preimage())
		}
	}
}

// snapshot digests every key space the node writes.
func snapshot(t *testing.T, h *harness) wire.Hash {
	c := wire.NewCanon("snapshot")
	for _, ks := range machine.AllKeyspaces {
		_ = h.kv.Scan(h.ctx, ks, nil, func(k, v []byte) error { c.Bytes(k).Bytes(v); return nil })
	}
	return c.Sum()
}

var _ = rand.N[int]

// tamperedSource serves one payload with a byte changed.
type tamperedSource struct {
	syncer.PayloadSource
	target wire.Hash
}

func (s tamperedSource) GetPayload(ctx context.Context, h wire.Hash) ([]byte, error) {
	b, err := s.PayloadSource.GetPayload(ctx, h)
	if err == nil && h == s.target {
		b = append([]byte{}, b...)
		b[len(b)-1] ^= 1
	}
	return b, err
}

func TestReplay(t *testing.T) {
	kv, _ := store.OpenInMemory()
	h, raw := fullRun(t, kv, nil)
	blob := h.transcript()
	rep, err := syncer.Replay(h.ctx, raw, blob, h.node, syncer.NewNativeEngine(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Match || rep.Rounds != 4 || rep.Aggregations != 16 {
		t.Fatalf("replay %+v", rep)
	}
	tr, _ := h.node.GetTranscript(h.ctx, h.task)
	target := tr[2].Fragments[3].Inputs[1].PayloadHash
	rep, err = syncer.Replay(h.ctx, raw, blob, tamperedSource{h.node, target}, syncer.NewNativeEngine(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Match || rep.Divergence == nil || rep.Divergence.Round != 2 || rep.Divergence.Fragment != 3 {
		t.Fatalf("tampered payload not caught at round 2 fragment 3: %+v", rep.Divergence)
	}
}

// TestElectionWithRemoteCandidate: a second registered candidate enters by
// sending its VRF proof; the stored election re-checks; bad or late proofs
// are refused.
func TestElectionWithRemoteCandidate(t *testing.T) {
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	remote := key(t, did.KindMachine, 99)
	h.faucet(remote.DID.String(), "5000000000000000000")
	rp := &wire.RegisterSyncerParams{DID: remote.DID.String(), Stake: "3000000000000000000"}
	rp.Nonce, rp.ChainID = h.nextNonce(), chain.ManualChainID
	rp.Signature = remote.Sign(rp.Preimage())
	if _, err := h.node.RegisterSyncer(h.ctx, rp); err != nil {
		t.Fatal(err)
	}
	h.conserve("register")
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	if err := h.post(spec(h.task, h.sponsor.DID.String(), 2, 1, 1, 1), initWeights(t, 1, 16)); err != nil {
		t.Fatal(err)
	}
	run := h.run()
	send := func(proof []byte) error {
		p := &wire.ElectionProofParams{TaskID: h.task, DID: remote.DID.String(), Proof: proof}
		p.Nonce, p.ChainID = h.nextNonce(), chain.ManualChainID
		p.Signature = remote.Sign(p.Preimage())
		_, err := h.node.SubmitElectionProof(h.ctx, p)
		return err
	}
	wrong, _ := vrf.Prove(remote.Priv, election.Alpha("another-task", run.SpecHash))
	if err := send(wrong); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("proof over the wrong alpha: %v", err)
	}
	good, _ := vrf.Prove(remote.Priv, election.Alpha(h.task, run.SpecHash))
	if err := send(good); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		h.faucet(h.tr[i].DID.String(), "10")
		if err := h.enroll(i, "1"); err != nil {
			t.Fatal(err)
		}
	}
	run = h.run()
	if run.Status != wire.StatusRunning || run.Election == nil || len(run.Election.Candidates) != 2 {
		t.Fatalf("election: %+v", run.Election)
	}
	if err := election.CheckRecord(*run.Election); err != nil {
		t.Fatalf("stored election does not re-check: %v", err)
	}
	if err := send(good); err == nil || !strings.Contains(err.Error(), "election is over") {
		t.Fatalf("proof after the start: %v", err)
	}
}
