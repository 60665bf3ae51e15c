package chain

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// world is a fixed cast and the transactions of a short history: genesis
// allocations, a transfer, two syncer candidates, a posting, election
// proofs, two enrolments (the run starts and elects), submission records
// with one equivocation, and a seal by the elected syncer.
type world struct {
	sponsor, t1, t2, candA, candB, outsider *did.Key
	task                                    string
	spec                                    []byte
	accounts                                []GenesisAccount
}

func newWorld(t testing.TB) *world {
	w := &world{
		sponsor: testKey(t, did.KindHuman, 1), t1: testKey(t, did.KindMachine, 2), t2: testKey(t, did.KindMachine, 3),
		candA: testKey(t, did.KindMachine, 4), candB: testKey(t, did.KindMachine, 5), outsider: testKey(t, did.KindHuman, 6),
		task: "run-1",
	}
	w.spec = testSpec(w.task, w.sponsor.DID.String(), 2, 1, 2)
	w.accounts = []GenesisAccount{
		{DID: w.sponsor.DID.String(), Balance: "10000"}, {DID: w.t1.DID.String(), Balance: "500"},
		{DID: w.t2.DID.String(), Balance: "500"}, {DID: w.candA.DID.String(), Balance: "300"}, {DID: w.candB.DID.String(), Balance: "300"},
	}
	return w
}

// history returns the blocks before the seal, each with its transactions'
// expected result codes.
func (w *world) history(t testing.TB) [][]txCase {
	h1, h2 := wire.ContentHash([]byte("payload-1")), wire.ContentHash([]byte("payload-2"))
	return [][]txCase{
		{
			{"transfer", must(TransferTx(w.sponsor, w.outsider.DID.String(), "100", 1)), CodeOK},
			{"register A", must(RegisterSyncerTx(w.candA, "100", 1)), CodeOK},
			{"register B", must(RegisterSyncerTx(w.candB, "200", 1)), CodeOK},
		},
		{
			{"post", must(PostTaskTx(w.sponsor, w.spec, wire.Hash{}, 2)), CodeOK},
			// Same block as the posting: the proofs see the run.
			{"proof A", must(ElectionProofTx(w.candA, w.task, vrfProof(t, w.candA, w.task, w.spec), 2)), CodeOK},
			{"proof B", must(ElectionProofTx(w.candB, w.task, vrfProof(t, w.candB, w.task, w.spec), 2)), CodeOK},
		},
		{
			{"enrol t1", must(EnrollTx(w.t1, w.task, "100", 1)), CodeOK},
			{"enrol t2", must(EnrollTx(w.t2, w.task, "100", 1)), CodeOK},
		},
		{
			{"submit t1 f0", must(SubmissionTx(w.t1, w.task, 0, 0, h1, 10)), CodeOK},
			{"submit t2 f1", must(SubmissionTx(w.t2, w.task, 0, 1, h1, 10)), CodeOK},
			{"equivocate t1 f0", must(SubmissionTx(w.t1, w.task, 0, 0, h2, 10)), CodeOK},
		},
	}
}

type txCase struct {
	name string
	tx   []byte
	code uint32
}

func (w *world) winner(t testing.TB, h *harness) (*did.Key, *did.Key) {
	t.Helper()
	code, raw := h.query(QueryRun, w.task)
	if code != 0 {
		t.Fatalf("run: %s", raw)
	}
	var r runRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatal(err)
	}
	if r.Election == nil {
		t.Fatal("run has no election")
	}
	if err := election.CheckRecord(*r.Election); err != nil {
		t.Fatalf("stored election does not re-check: %v", err)
	}
	if r.Election.Winner == w.candA.DID.String() {
		return w.candA, w.candB
	}
	return w.candB, w.candA
}

func runBlock(t *testing.T, h *harness, cases []txCase) wire.Hash {
	t.Helper()
	txs := make([][]byte, len(cases))
	for i, c := range cases {
		txs[i] = c.tx
	}
	res, hash := h.block(txs...)
	for i, c := range cases {
		if res[i].Code != c.code {
			t.Fatalf("block %d %s: code %d (%s), want %d", h.height, c.name, res[i].Code, res[i].Log, c.code)
		}
	}
	return hash
}

// TestDeterminism runs the same blocks on two fresh applications and
// compares the app hash after every block, then checks the outcome.
func TestDeterminism(t *testing.T) {
	w := newWorld(t)
	a, b := newHarness(t, ""), newHarness(t, t.TempDir())
	if ga, gb := a.genesis(w.accounts...), b.genesis(w.accounts...); ga != gb {
		t.Fatalf("genesis app hash %s vs %s", ga, gb)
	}
	blocks := w.history(t)
	win, lose := w.winner(t, func() *harness {
		for _, blk := range blocks {
			ha, hb := runBlock(t, a, blk), runBlock(t, b, blk)
			if ha != hb {
				t.Fatalf("height %d: app hash %s vs %s", a.height, ha, hb)
			}
		}
		return a
	}())
	seal := []txCase{
		{"seal by the loser", must(SealTx(testReceipt(t, w.spec, lose))), CodeUnauthorized},
		{"seal by the winner", must(SealTx(testReceipt(t, w.spec, win))), CodeOK},
	}
	if ha, hb := runBlock(t, a, seal), runBlock(t, b, seal); ha != hb {
		t.Fatalf("seal block: app hash %s vs %s", ha, hb)
	}
	// An empty block still moves the app hash (height is in it) identically.
	if _, ha := a.block(); ha != func() wire.Hash { _, x := b.block(); return x }() {
		t.Fatal("empty block: app hashes differ")
	}

	for _, h := range []*harness{a, b} {
		h.conservation()
		for k, want := range map[*did.Key]string{w.sponsor: "9950", w.outsider: "100", w.t1: "450", w.t2: "500"} {
			if got := h.balance(k); got != want {
				t.Errorf("balance of %s: %s, want %s", k.DID, got, want)
			}
		}
		_, raw := h.query(QueryRun, w.task)
		var r runRecord
		_ = json.Unmarshal([]byte(raw), &r)
		if r.Status != wire.StatusSealed || r.RunRoot == nil || r.SyncerDID != win.DID.String() || r.Submissions != 2 || r.Equivocations != 1 {
			t.Fatalf("run after seal: %s", raw)
		}
		if tr := r.trainer(w.t1.DID.String()); tr == nil || tr.Slashed != "50" {
			t.Fatalf("t1 after equivocation: %+v", tr)
		}
		_, logRaw := h.query(QueryRunLog, "")
		var info RunLogInfo
		_ = json.Unmarshal([]byte(logRaw), &info)
		if info.Size != 1 {
			t.Fatalf("run log: %s", logRaw)
		}
	}
}

// TestRefusals sends bad transactions, each alone in a block, to one
// application and empty blocks to its twin: each is refused with its code
// and reason, and the app hashes stay equal (nothing changed, not even a
// nonce).
func TestRefusals(t *testing.T) {
	w := newWorld(t)
	a, b := newHarness(t, ""), newHarness(t, "")
	a.genesis(w.accounts...)
	b.genesis(w.accounts...)
	for _, blk := range w.history(t) {
		runBlock(t, a, blk)
		runBlock(t, b, blk)
	}
	_, lose := w.winner(t, a)
	h1 := wire.ContentHash([]byte("payload-1"))
	forged := func() []byte {
		p := wire.TransferParams{From: w.sponsor.DID.String(), To: w.outsider.DID.String(), Amount: "1", Signed: wire.Signed{Nonce: 99}}
		p.Signature = w.outsider.Sign(p.Preimage())
		return must(EncodeTx(TxTransfer, p))
	}()
	verified := strings.Replace(string(testSpec("run-2", w.sponsor.DID.String(), 2, 1, 2)), `"tier":"Open"`, `"tier":"Verified"`, 1)
	tampered := strings.Replace(string(testReceipt(t, w.spec, lose)), `"sponsor_refund":"1000"`, `"sponsor_refund":"1001"`, 1)
	cases := []struct {
		txCase
		why string
	}{
		{txCase{"not JSON", []byte("\x00\x01garbage"), CodeDecode}, "envelope"},
		{txCase{"unknown type", []byte(`{"type":"tenzro_mint","params":{}}`), CodeDecode}, "unknown type"},
		{txCase{"unknown field", []byte(`{"type":"tenzro_ledger_transfer","params":{"from":"x","to":"y","amount":"1","nonce":1,"signature":"","extra":1}}`), CodeDecode}, "unknown field"},
		{txCase{"forged signature", forged, CodeUnauthorized}, "bad signature"},
		{txCase{"replayed nonce", must(TransferTx(w.sponsor, w.outsider.DID.String(), "1", 1)), CodeNonce}, "not above"},
		{txCase{"no funds", must(TransferTx(w.outsider, w.sponsor.DID.String(), "101", 1)), CodeFunds}, "balance of"},
		{txCase{"leading zero", must(TransferTx(w.sponsor, w.outsider.DID.String(), "01", 3)), CodeInvalid}, "leading zero"},
		{txCase{"duplicate task", must(PostTaskTx(w.sponsor, w.spec, wire.Hash{}, 3)), CodeConflict}, "already exists"},
		{txCase{"tier Verified", must(PostTaskTx(w.sponsor, []byte(verified), wire.Hash{}, 3)), CodeInvalid}, "tier Open only"},
		{txCase{"unknown run", must(EnrollTx(w.outsider, "nope", "1", 2)), CodeNotFound}, "no run"},
		{txCase{"enrol when full", must(EnrollTx(w.outsider, w.task, "1", 2)), CodeConflict}, "is full"},
		{txCase{"proof after start", must(ElectionProofTx(w.candA, w.task, vrfProof(t, w.candA, w.task, w.spec), 3)), CodeConflict}, "election is over"},
		{txCase{"wrong round", must(SubmissionTx(w.t2, w.task, 1, 0, h1, 10)), CodeConflict}, "current round"},
		{txCase{"no such fragment", must(SubmissionTx(w.t2, w.task, 0, 9, h1, 10)), CodeInvalid}, "fragment_index"},
		{txCase{"not a trainer", must(SubmissionTx(w.outsider, w.task, 0, 0, h1, 10)), CodeUnauthorized}, "not an active trainer"},
		{txCase{"duplicate submission", must(SubmissionTx(w.t2, w.task, 0, 1, h1, 10)), CodeConflict}, "already submitted"},
		{txCase{"zero size", must(SubmissionTx(w.t2, w.task, 0, 0, h1, 0)), CodeInvalid}, "payload_size"},
		{txCase{"second equivocation", must(SubmissionTx(w.t1, w.task, 0, 0, wire.ContentHash([]byte("x")), 10)), CodeConflict}, "already recorded"},
		{txCase{"seal by a non-elected key", must(SealTx(testReceipt(t, w.spec, lose))), CodeUnauthorized}, "elected syncer is"},
		{txCase{"tampered receipt", must(SealTx([]byte(tampered))), CodeInvalid}, "signature"},
	}
	for _, c := range cases {
		res, ha := a.block(c.tx)
		_, hb := b.block()
		if res[0].Code != c.code || !strings.Contains(res[0].Log, c.why) {
			t.Errorf("%s: code %d %q, want code %d containing %q", c.name, res[0].Code, res[0].Log, c.code, c.why)
		}
		if ha != hb {
			t.Fatalf("%s: refused transaction changed the state (app hash %s vs %s)", c.name, ha, hb)
		}
		// CheckTx refuses what it can see cheaply with the same code.
		ct, err := a.app.CheckTx(context.Background(), &abci.RequestCheckTx{Tx: c.tx})
		if err != nil {
			t.Fatal(err)
		}
		if cheap := c.code == CodeDecode || c.code == CodeUnauthorized && c.name == "forged signature" || c.code == CodeNonce; cheap && ct.Code != c.code {
			t.Errorf("%s: CheckTx code %d (%s), want %d", c.name, ct.Code, ct.Log, c.code)
		}
	}
	a.conservation()
}

// TestRestart closes the store between blocks and once between
// FinalizeBlock and Commit (a crash): Info reports the last committed
// height and app hash, and the resumed app matches an uninterrupted twin.
func TestRestart(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	ref := newHarness(t, "")
	ref.genesis(w.accounts...)
	a := newHarness(t, dir)
	a.genesis(w.accounts...)
	blocks := w.history(t)
	var want wire.Hash
	for i, blk := range blocks {
		want = runBlock(t, ref, blk)
		if got := runBlock(t, a, blk); got != want {
			t.Fatalf("block %d: %s vs %s", i+1, got, want)
		}
		if i == 1 {
			// Finalize the next block, then "crash" before Commit.
			a.finalize(blocks[2][0].tx)
			a.db.Close()
			a = newHarness(t, dir)
			info, err := a.app.Info(context.Background(), &abci.RequestInfo{})
			if err != nil {
				t.Fatal(err)
			}
			if info.LastBlockHeight != 2 || wire.Hash(info.LastBlockAppHash) != want {
				t.Fatalf("after crash: Info height %d hash %x, want 2 %s", info.LastBlockHeight, info.LastBlockAppHash, want)
			}
		}
	}
	a.db.Close()
	a = newHarness(t, dir)
	if h, got := a.app.LastCommit(); h != int64(len(blocks)) || got != want {
		t.Fatalf("after restart: height %d hash %s, want %d %s", h, got, len(blocks), want)
	}
	win, _ := w.winner(t, ref)
	seal := []txCase{{"seal", must(SealTx(testReceipt(t, w.spec, win))), CodeOK}}
	if x, y := runBlock(t, ref, seal), runBlock(t, a, seal); x != y {
		t.Fatalf("after restart: %s vs %s", x, y)
	}
	a.conservation()
}

func TestGenesisRefused(t *testing.T) {
	k := testKey(t, did.KindHuman, 1).DID.String()
	for name, st := range map[string]string{
		"unknown field": `{"accounts":[],"faucet":true}`,
		"bad DID":       `{"accounts":[{"did":"did:tenzro:human:zz","balance":"1"}]}`,
		"bad amount":    `{"accounts":[{"did":"` + k + `","balance":"-1"}]}`,
		"twice":         `{"accounts":[{"did":"` + k + `","balance":"1"},{"did":"` + k + `","balance":"2"}]}`,
	} {
		if _, err := ParseGenesisState([]byte(st)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
