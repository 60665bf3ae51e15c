package chain

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// world is a fixed cast: a sponsor, three trainers, three syncer
// candidates, an outsider and a plugin publisher.
type world struct {
	sponsor, t1, t2, t3, candA, candB, candC, outsider, publisher *did.Key
	task, task2, task3                                            string
	spec, spec2, spec3                                            []byte
	genesis                                                       GenesisState
}

func newWorld(t testing.TB) *world {
	w := &world{
		sponsor: testKey(t, did.KindHuman, 1), t1: testKey(t, did.KindMachine, 2), t2: testKey(t, did.KindMachine, 3), t3: testKey(t, did.KindMachine, 9),
		candA: testKey(t, did.KindMachine, 4), candB: testKey(t, did.KindMachine, 5), candC: testKey(t, did.KindMachine, 7),
		outsider: testKey(t, did.KindHuman, 6), publisher: testKey(t, did.KindHuman, 8),
		task: "run-1", task2: "run-2", task3: "run-3",
	}
	w.spec = testSpec(w.task, w.sponsor.DID.String(), 3, 2, 2, 2, "")
	w.spec2 = testSpec(w.task2, w.sponsor.DID.String(), 1, 1, 1, 1, `,"enroll_window_ms":30000`)
	w.spec3 = testSpec(w.task3, w.sponsor.DID.String(), 1, 1, 1, 1, "")
	acc := func(k *did.Key, v string) GenesisAccount { return GenesisAccount{DID: k.DID.String(), Balance: v} }
	w.genesis = GenesisState{
		Accounts: []GenesisAccount{acc(w.sponsor, "100000000000000"), acc(w.t1, "500"), acc(w.t2, "500"), acc(w.t3, "500"),
			acc(w.candA, "300"), acc(w.candB, "300"), acc(w.candC, "300"), acc(w.publisher, "5000000000")},
		Faucet: true,
		Params: freeParams(60000),
	}
	return w
}

// step is one block of a history: how far the clock moves first and the
// transactions (built from the reference app's state) with their codes.
type step struct {
	advance time.Duration
	txs     func(h *harness) []txCase
}

// history is a whole run of run-1 (post with weights, proofs, enrolment,
// records with an equivocation claim, fragment commits with a verdict, a
// refused early commit, round close, a leave, the seal and the receipt
// signature) around every other transaction type: transfer, faucet,
// candidacy, unbonding and its release, a plugin record, a posting without
// weights and its setInitWeights, a cancellation and an expiry.
func (w *world) history(t testing.TB) []step {
	rules := meanRules(t)
	h1, h2, h3 := wire.ContentHash([]byte("p1")), wire.ContentHash([]byte("p2")), wire.ContentHash([]byte("p3"))
	winner := func(h *harness) (*did.Key, uint64) {
		if h.run(w.task).Syncer == w.candA.DID.String() {
			return w.candA, 0
		}
		return w.candB, 0
	}
	return []step{
		{0, func(*harness) []txCase {
			return []txCase{
				{"transfer", must(TransferTx(ManualChainID, w.sponsor, w.outsider.DID.String(), "100", 1)), CodeOK},
				{"register A", must(RegisterSyncerTx(ManualChainID, w.candA, "100", 1)), CodeOK},
				{"register B", must(RegisterSyncerTx(ManualChainID, w.candB, "200", 1)), CodeOK},
				{"register C", must(RegisterSyncerTx(ManualChainID, w.candC, "50", 1)), CodeOK},
				{"publish", must(PublishPluginTx(ManualChainID, w.publisher, wire.ContentHash([]byte("module")), 10, 1)), CodeOK},
				{"faucet", must(FaucetTx(w.outsider.DID.String(), "7", 1)), CodeOK},
			}
		}},
		{0, func(*harness) []txCase {
			return []txCase{
				{"post run-1", must(PostTaskTx(ManualChainID, w.sponsor, w.spec, testLayout(2, "a"), rules, 2)), CodeOK},
				{"post run-2", must(PostTaskTx(ManualChainID, w.sponsor, w.spec2, nil, rules, 3)), CodeOK},
				{"post run-3", must(PostTaskTx(ManualChainID, w.sponsor, w.spec3, nil, rules, 4)), CodeOK},
			}
		}},
		{0, func(*harness) []txCase {
			return []txCase{
				{"proof A", must(ElectionProofTx(ManualChainID, w.candA, w.task, vrfProof(t, w.candA, w.task, w.spec), 2)), CodeOK},
				{"proof B", must(ElectionProofTx(ManualChainID, w.candB, w.task, vrfProof(t, w.candB, w.task, w.spec), 2)), CodeOK},
				{"cancel run-3", must(CancelRunTx(ManualChainID, w.sponsor, w.task3, 5)), CodeOK},
				{"init run-2", must(SetInitWeightsTx(ManualChainID, w.sponsor, w.task2, *testLayout(1, "b"), 6)), CodeOK},
				{"unbond C", must(UnbondTx(ManualChainID, w.candC, 2)), CodeOK},
			}
		}},
		{0, func(*harness) []txCase {
			return []txCase{
				{"enrol t1", must(EnrollTx(ManualChainID, w.t1, w.task, "100", 1)), CodeOK},
				{"enrol t2", must(EnrollTx(ManualChainID, w.t2, w.task, "100", 1)), CodeOK},
				{"enrol t3", must(EnrollTx(ManualChainID, w.t3, w.task, "100", 1)), CodeOK}, // the M-th: the run starts
			}
		}},
		{0, func(*harness) []txCase {
			return []txCase{
				{"t1 f0", must(SubmissionTx(ManualChainID, w.t1, w.task, 0, 0, h1, 10)), CodeOK},
				{"t2 f0", must(SubmissionTx(ManualChainID, w.t2, w.task, 0, 0, h2, 10)), CodeOK},
				{"t3 f0", must(SubmissionTx(ManualChainID, w.t3, w.task, 0, 0, h3, 10)), CodeOK},
				{"t1 f1", must(SubmissionTx(ManualChainID, w.t1, w.task, 0, 1, h1, 10)), CodeOK},
				{"t2 f1", must(SubmissionTx(ManualChainID, w.t2, w.task, 0, 1, h2, 10)), CodeOK},
				{"t1 f0 again, another payload (claim)", must(SubmissionTx(ManualChainID, w.t1, w.task, 0, 0, h3, 10)), CodeOK},
			}
		}},
		{0, func(h *harness) []txCase {
			k, tk := winner(h)
			return []txCase{
				{"commit f0 with the equivocation verdict", h.commit(w.task, 0, k, tk, wire.FragAggregated, wire.VerdictEquivocation, 10), CodeOK},
				{"commit f1 inside its grace window", h.commit(w.task, 1, k, tk, wire.FragAggregated, "", 11), CodeConflict},
			}
		}},
		{6 * time.Second, func(h *harness) []txCase {
			k, tk := winner(h)
			return []txCase{{"commit f1 after the window", h.commit(w.task, 1, k, tk, wire.FragAggregated, "", 12), CodeOK}}
		}},
		{0, func(*harness) []txCase {
			return []txCase{
				{"t3 leaves", must(LeaveTx(ManualChainID, w.t3, w.task, 2)), CodeOK},
				{"t1 f0 r1", must(SubmissionTx(ManualChainID, w.t1, w.task, 1, 0, h1, 10)), CodeOK},
				{"t2 f0 r1", must(SubmissionTx(ManualChainID, w.t2, w.task, 1, 0, h2, 10)), CodeOK},
				{"t1 f1 r1", must(SubmissionTx(ManualChainID, w.t1, w.task, 1, 1, h1, 10)), CodeOK},
				{"t2 f1 r1", must(SubmissionTx(ManualChainID, w.t2, w.task, 1, 1, h2, 10)), CodeOK},
			}
		}},
		{0, func(h *harness) []txCase {
			k, tk := winner(h)
			return []txCase{
				{"commit f0 r1", h.commit(w.task, 0, k, tk, wire.FragAggregated, "", 13), CodeOK},
				{"commit f1 r1 (seals)", h.commit(w.task, 1, k, tk, wire.FragRuleFailed, "", 14), CodeOK},
			}
		}},
		{0, func(h *harness) []txCase {
			k, _ := winner(h)
			other := w.candA
			if k == w.candA {
				other = w.candB
			}
			return []txCase{
				{"receipt signed by the other candidate", h.signReceipt(w.task, other), CodeUnauthorized},
				{"receipt signed by the last syncer", h.signReceipt(w.task, k), CodeOK},
			}
		}},
		// Past the 30 s enrolment window of run-2 and the 60 s unbonding delay.
		{61 * time.Second, func(*harness) []txCase { return nil }},
	}
}

func (w *world) play(t *testing.T, hs ...*harness) {
	t.Helper()
	for i, s := range w.history(t) {
		var cases []txCase
		for j, h := range hs {
			h.now = h.now.Add(s.advance)
			if j == 0 {
				cases = s.txs(h)
			}
		}
		var first wire.Hash
		for j, h := range hs {
			got := runBlock(t, h, cases)
			h.conservation()
			if j == 0 {
				first = got
			} else if got != first {
				t.Fatalf("step %d (height %d): app hash %s vs %s", i, h.height, got, first)
			}
		}
	}
}

// TestDeterminism runs the same blocks on two fresh applications (one in
// memory, one on disk) and compares the app hash after every block, then
// checks the outcome.
func TestDeterminism(t *testing.T) {
	w := newWorld(t)
	a, b := newHarness(t, ""), newHarness(t, t.TempDir())
	if ga, gb := a.genesis(w.genesis), b.genesis(w.genesis); ga != gb {
		t.Fatalf("genesis app hash %s vs %s", ga, gb)
	}
	w.play(t, a, b)
	// An empty block still moves the app hash (height is in it) identically.
	if _, ha := a.block(); ha != func() wire.Hash { _, x := b.block(); return x }() {
		t.Fatal("empty block: app hashes differ")
	}
	for _, h := range []*harness{a, b} {
		r := h.run(w.task)
		if r.Status != wire.StatusSealed || r.Seal == nil || !r.Seal.Signed || len(r.Roots) != 2 {
			t.Fatalf("run-1: %+v", r)
		}
		for _, tr := range r.Trainers {
			switch tr.DID {
			case w.t1.DID.String():
				if tr.Slashed != "50" || tr.Accepted != 4 {
					t.Fatalf("t1 after the equivocation verdict: %+v", tr)
				}
			case w.t3.DID.String():
				if tr.Status != wire.TrainerLeft || tr.Accepted != 1 {
					t.Fatalf("t3: %+v", tr)
				}
			}
		}
		if r2 := h.run(w.task2); r2.Status != wire.StatusCancelled || !strings.Contains(r2.Cancel, "expired") {
			t.Fatalf("run-2 did not expire: %+v", r2)
		}
		if r3 := h.run(w.task3); r3.Status != wire.StatusCancelled || r3.Cancel != machine.CancelBySponsor {
			t.Fatalf("run-3: %+v", r3)
		}
		if got := h.balance(w.candC); got != "300" {
			t.Fatalf("candidate C after unbonding: %s", got)
		}
		if code, _ := h.query(QueryCandidate, w.candC.DID.String()); code != CodeNotFound {
			t.Fatalf("candidate C still registered (%d)", code)
		}
		_, raw := h.query(QueryReceipt, w.task)
		if err := audit.CheckReceipt([]byte(raw), r.Seal.RunRoot[:]); err != nil {
			t.Fatalf("receipt on chain: %v", err)
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
	a.genesis(w.genesis)
	b.genesis(w.genesis)
	steps := w.history(t)
	for _, s := range steps[:5] { // up to the first round's records
		cases := s.txs(a)
		runBlock(t, a, cases)
		runBlock(t, b, cases)
	}
	// Each refusal in its own block, a millisecond apart: every window
	// stays as the history left it.
	a.step, b.step = time.Millisecond, time.Millisecond
	r := a.run(w.task)
	win, lose := w.candA, w.candB
	if r.Syncer == w.candB.DID.String() {
		win, lose = w.candB, w.candA
	}
	rules := meanRules(t)
	h1 := wire.ContentHash([]byte("p1"))
	forged := func() []byte {
		p := wire.TransferParams{From: w.sponsor.DID.String(), To: w.outsider.DID.String(), Amount: "1", Signed: wire.Signed{ChainID: ManualChainID, Nonce: 99}}
		p.Signature = w.outsider.Sign(p.Preimage())
		return must(wire.EncodeTx(wire.TxTransfer, p))
	}()
	badRules := rules
	badRules.Rule.Hash = wire.ContentHash([]byte("not a module"))
	noFinite := rules
	noFinite.Verifiers = []wire.RuleRef{}
	badLayout := testLayout(2, "c")
	badLayout.Model = wire.ContentHash([]byte("x"))
	commitNonce := uint64(50) // each refused commit uses up its nonce
	commitBy := func(k *did.Key, status string, mut func(c *wire.CommitFragmentTx)) []byte {
		commitNonce++
		raw := a.commit(w.task, 0, k, 0, status, wire.VerdictDuplicate, commitNonce)
		tx, _ := wire.DecodeTx(raw)
		p := *tx.CommitFragment
		if mut != nil {
			mut(&p)
		}
		return must(CommitFragmentTx(ManualChainID, k, p))
	}
	cases := []struct {
		txCase
		why string
	}{
		{txCase{"not JSON", []byte("\x00\x01garbage"), CodeDecode}, "envelope"},
		{txCase{"unknown type", []byte(`{"type":"tenzro_mint","params":{}}`), CodeDecode}, "unknown type"},
		{txCase{"unknown field", []byte(`{"type":"tenzro_ledger_transfer","params":{"from":"x","to":"y","amount":"1","nonce":1,"signature":"","extra":1}}`), CodeDecode}, "unknown field"},
		{txCase{"duplicate member", []byte(`{"type":"tenzro_ledger_faucet","params":{"did":"x","did":"y","amount":"1","salt":1}}`), CodeDecode}, "duplicate"},
		{txCase{"forged signature", forged, CodeUnauthorized}, "bad signature"},
		{txCase{"replayed nonce", must(TransferTx(ManualChainID, w.sponsor, w.outsider.DID.String(), "1", 1)), CodeNonce}, "not above"},
		{txCase{"no funds", must(TransferTx(ManualChainID, w.outsider, w.sponsor.DID.String(), "1000", 1)), CodeFunds}, "balance of"},
		{txCase{"leading zero", must(TransferTx(ManualChainID, w.sponsor, w.outsider.DID.String(), "01", 30)), CodeInvalid}, "leading zero"},
		{txCase{"duplicate task", must(PostTaskTx(ManualChainID, w.sponsor, w.spec, nil, rules, 31)), CodeConflict}, "already exists"},
		{txCase{"unknown rule module", must(PostTaskTx(ManualChainID, w.sponsor, testSpec("r9", w.sponsor.DID.String(), 1, 1, 1, 1, ""), nil, badRules, 32)), CodeInvalid}, "neither a built-in"},
		{txCase{"no Finite verifier", must(PostTaskTx(ManualChainID, w.sponsor, testSpec("r9", w.sponsor.DID.String(), 1, 1, 1, 1, ""), nil, noFinite, 33)), CodeInvalid}, "Finite"},
		{txCase{"layout with a wrong model hash", must(PostTaskTx(ManualChainID, w.sponsor, testSpec("r9", w.sponsor.DID.String(), 1, 1, 2, 1, ""), badLayout, rules, 34)), CodeInvalid}, "model hash"},
		{txCase{"unknown run", must(EnrollTx(ManualChainID, w.outsider, "nope", "1", 2)), CodeNotFound}, "no run"},
		{txCase{"enrol when full", must(EnrollTx(ManualChainID, w.outsider, w.task, "1", 3)), CodeConflict}, "is full"},
		{txCase{"proof after start", must(ElectionProofTx(ManualChainID, w.candA, w.task, vrfProof(t, w.candA, w.task, w.spec), 30)), CodeConflict}, "election is over"},
		{txCase{"wrong round", must(SubmissionTx(ManualChainID, w.t2, w.task, 1, 0, h1, 10)), CodeConflict}, "wrong round"},
		{txCase{"no such fragment", must(SubmissionTx(ManualChainID, w.t2, w.task, 0, 9, h1, 10)), CodeInvalid}, "wrong fragment"},
		{txCase{"not a trainer", must(SubmissionTx(ManualChainID, w.outsider, w.task, 0, 0, h1, 10)), CodeNotFound}, "not enrolled"},
		{txCase{"duplicate record", must(SubmissionTx(ManualChainID, w.t2, w.task, 0, 0, wire.ContentHash([]byte("p2")), 10)), CodeConflict}, "duplicate submission"},
		{txCase{"zero size", must(SubmissionTx(ManualChainID, w.t2, w.task, 0, 1, h1, 0)), CodeInvalid}, "payload_size"},
		{txCase{"second claim", must(SubmissionTx(ManualChainID, w.t1, w.task, 0, 0, wire.ContentHash([]byte("p9")), 10)), CodeConflict}, "already claimed"},
		{txCase{"commit by the non-elected candidate", commitBy(lose, wire.FragAggregated, nil), CodeUnauthorized}, "may be committed only by"},
		{txCase{"commit with an input left out", commitBy(win, wire.FragAggregated, func(c *wire.CommitFragmentTx) { c.Commit.Inputs = c.Commit.Inputs[1:] }), CodeInvalid}, "inputs"},
		{txCase{"commit with a wrong weights_before", commitBy(win, wire.FragAggregated, func(c *wire.CommitFragmentTx) { c.Commit.WeightsBefore[0] ^= 1 }), CodeInvalid}, "weights_before"},
		{txCase{"commit without the verdict", commitBy(win, wire.FragAggregated, func(c *wire.CommitFragmentTx) { c.Verdicts = nil }), CodeInvalid}, "verdicts"},
		{txCase{"commit naming ticket 1", commitBy(win, wire.FragAggregated, func(c *wire.CommitFragmentTx) { c.Commit.Ticket = 1 }), CodeInvalid}, "ticket"},
		{txCase{"no_quorum with K inputs", commitBy(win, wire.FragNoQuorum, nil), CodeInvalid}, "no_quorum"},
		{txCase{"commit of a fragment not due", a.commit(w.task, 1, win, 0, wire.FragAggregated, "", 70), CodeConflict}, "not due"},
		{txCase{"receipt of a running run", a.signReceiptUnchecked(w.task, win), CodeConflict}, "only a sealed run"},
		{txCase{"cancel a running run", must(CancelRunTx(ManualChainID, w.sponsor, w.task, 40)), CodeConflict}, "awaiting enrolment"},
		{txCase{"unbond the elected syncer", must(UnbondTx(ManualChainID, win, 80)), CodeConflict}, "elected syncer"},
		{txCase{"publish a zero-size module", must(PublishPluginTx(ManualChainID, w.publisher, wire.ContentHash([]byte("m2")), 0, 9)), CodeInvalid}, "size"},
	}
	for _, c := range cases {
		// A transaction refused by the ante (decoding, signature, nonce)
		// changes nothing: a twin given an empty block agrees. One refused
		// by its own rules after the ante has used its nonce (and paid its
		// fee, zero here): the twin is given the same transaction.
		ante := c.code == CodeDecode || c.name == "forged signature" || c.code == CodeNonce
		res, ha := a.block(c.tx)
		var hb wire.Hash
		if ante {
			_, hb = b.block()
		} else {
			_, hb = b.block(c.tx)
		}
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
		if ante && ct.Code != c.code {
			t.Errorf("%s: CheckTx code %d (%s), want %d", c.name, ct.Code, ct.Log, c.code)
		}
	}
	if len(cases) < 20 {
		t.Fatalf("only %d bad transactions", len(cases))
	}
	a.conservation()
}

// signReceiptUnchecked signs a receipt-shaped preimage for a run that is
// not sealed (the chain must refuse it before looking at the signature).
func (h *harness) signReceiptUnchecked(task string, key *did.Key) []byte {
	rc := &wire.Receipt{Version: audit.ReceiptVersion, TaskID: task, SyncerDID: key.DID.String(), Engine: json.RawMessage(`{}`)}
	return must(SignReceiptTx(key, rc, nil))
}

// TestRestart closes the store between blocks and once between
// FinalizeBlock and Commit (a crash): Info reports the last committed
// height and app hash, and the resumed app matches an uninterrupted twin.
func TestRestart(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	ref := newHarness(t, "")
	ref.genesis(w.genesis)
	a := newHarness(t, dir)
	a.genesis(w.genesis)
	var want wire.Hash
	for i, s := range w.history(t) {
		ref.now = ref.now.Add(s.advance)
		a.now = a.now.Add(s.advance)
		cases := s.txs(ref)
		if i == 4 {
			// Finalize the block, then "crash" before Commit.
			txs := make([][]byte, len(cases))
			for j, c := range cases {
				txs[j] = c.tx
			}
			a.finalize(txs...)
			a.close()
			now := a.now
			a = &harness{t: t, dir: dir, now: now}
			a.open()
			info, err := a.app.Info(context.Background(), &abci.RequestInfo{})
			if err != nil {
				t.Fatal(err)
			}
			if info.LastBlockHeight != int64(i) || wire.Hash(info.LastBlockAppHash) != want {
				t.Fatalf("after crash: Info height %d hash %x, want %d %s", info.LastBlockHeight, info.LastBlockAppHash, i, want)
			}
		}
		want = runBlock(t, ref, cases)
		if got := runBlock(t, a, cases); got != want {
			t.Fatalf("block %d: %s vs %s", i+1, got, want)
		}
		if i == 6 {
			a.close()
			now := a.now
			a = &harness{t: t, dir: dir, now: now}
			a.open()
			if h, got := a.app.LastCommit(); h != int64(i+1) || got != want {
				t.Fatalf("after restart: height %d hash %s, want %d %s", h, got, i+1, want)
			}
		}
	}
	a.conservation()
}

// TestGenesisBeforeFirstCommit: a crash after InitChain and before the
// first block's Commit leaves nothing behind; InitChain runs again.
func TestGenesisBeforeFirstCommit(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	a := newHarness(t, dir)
	g := a.genesis(w.genesis)
	a.finalize()
	a.close()
	a.open()
	if h, _ := a.app.LastCommit(); h != 0 {
		t.Fatalf("height %d after a crash before the first commit", h)
	}
	if g2 := a.genesis(w.genesis); g2 != g {
		t.Fatalf("genesis hash %s, then %s", g, g2)
	}
	a.block()
	a.conservation()
	if a.balance(w.t1) != "500" {
		t.Fatal("genesis allocation lost")
	}
}

func TestGenesisRefused(t *testing.T) {
	k := testKey(t, did.KindHuman, 1).DID.String()
	for name, st := range map[string]string{
		"unknown field":      `{"accounts":[],"mint":true}`,
		"duplicate member":   `{"accounts":[],"faucet":true,"faucet":false}`,
		"bad DID":            `{"accounts":[{"did":"did:tenzro:human:zz","balance":"1"}]}`,
		"bad amount":         `{"accounts":[{"did":"` + k + `","balance":"-1"}]}`,
		"twice":              `{"accounts":[{"did":"` + k + `","balance":"1"},{"did":"` + k + `","balance":"2"}]}`,
		"zero candidate":     `{"accounts":[],"candidates":[{"did":"` + k + `","balance":"0"}]}`,
		"negative unbonding": `{"accounts":[],"params":{"unbonding_delay_ms":-1}}`,
	} {
		if _, err := ParseGenesisState([]byte(st)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestNoFaucetWithoutGenesis: a chain whose genesis does not enable the
// faucet refuses it, at CheckTx and in a block.
func TestNoFaucetWithoutGenesis(t *testing.T) {
	w := newWorld(t)
	h := newHarness(t, "")
	g := w.genesis
	g.Faucet = false
	h.genesis(g)
	tx := must(FaucetTx(w.outsider.DID.String(), "5", 1))
	ct, _ := h.app.CheckTx(context.Background(), &abci.RequestCheckTx{Tx: tx})
	res, _ := h.block(tx)
	if ct.Code != CodeDisabled || res[0].Code != CodeDisabled || !strings.Contains(res[0].Log, "no faucet") {
		t.Fatalf("faucet without genesis: check %d %q, block %d %q", ct.Code, ct.Log, res[0].Code, res[0].Log)
	}
}

// runOf starts a one-fragment run with M trainers (all enrolled) and the
// given candidates' proofs; it returns the succession.
func startRun(t *testing.T, h *harness, w *world, task string, m, k int, trainers []*did.Key, cands []*did.Key) []string {
	t.Helper()
	return startRunRounds(t, h, w, task, m, k, 3, trainers, cands)
}

// startRunRounds is startRun with max_rounds rounds.
func startRunRounds(t *testing.T, h *harness, w *world, task string, m, k, rounds int, trainers []*did.Key, cands []*did.Key) []string {
	t.Helper()
	spec := testSpec(task, w.sponsor.DID.String(), m, k, 2, rounds, "")
	var cases []txCase
	for i, c := range cands {
		cases = append(cases, txCase{fmt.Sprintf("register %d", i), must(RegisterSyncerTx(ManualChainID, c, fmt.Sprint(100*(i+1)), 1)), CodeOK})
	}
	cases = append(cases, txCase{"post", must(PostTaskTx(ManualChainID, w.sponsor, spec, testLayout(2, task), meanRules(t), 1)), CodeOK})
	runBlock(t, h, cases)
	cases = nil
	for i, c := range cands {
		cases = append(cases, txCase{fmt.Sprintf("proof %d", i), must(ElectionProofTx(ManualChainID, c, task, vrfProof(t, c, task, spec), 2)), CodeOK})
	}
	for i, tr := range trainers {
		cases = append(cases, txCase{fmt.Sprintf("enrol %d", i), must(EnrollTx(ManualChainID, tr, task, "100", 1)), CodeOK})
	}
	runBlock(t, h, cases)
	r := h.run(task)
	if r.Status != wire.StatusRunning || len(r.Succession) != len(cands) {
		t.Fatalf("run did not start: %+v", r)
	}
	return r.Succession
}

func keyOf(ks []*did.Key, d string) *did.Key {
	for _, k := range ks {
		if k.DID.String() == d {
			return k
		}
	}
	return nil
}

// TestFailover: a syncer that misses the round deadline loses the round to
// the next ticket, which continues from the last committed weights; the
// commit names both who made it and its ticket.
func TestFailover(t *testing.T) {
	w := newWorld(t)
	h := newHarness(t, "")
	h.genesis(w.genesis)
	cands := []*did.Key{w.candA, w.candB}
	succ := startRun(t, h, w, "fo", 2, 2, []*did.Key{w.t1, w.t2}, cands)
	first, second := keyOf(cands, succ[0]), keyOf(cands, succ[1])
	runBlock(t, h, []txCase{
		{"t1 f0", must(SubmissionTx(ManualChainID, w.t1, "fo", 0, 0, wire.ContentHash([]byte("a")), 4)), CodeOK},
		{"t2 f0", must(SubmissionTx(ManualChainID, w.t2, "fo", 0, 0, wire.ContentHash([]byte("b")), 4)), CodeOK},
		{"t1 f1", must(SubmissionTx(ManualChainID, w.t1, "fo", 0, 1, wire.ContentHash([]byte("c")), 4)), CodeOK},
		{"t2 f1", must(SubmissionTx(ManualChainID, w.t2, "fo", 0, 1, wire.ContentHash([]byte("d")), 4)), CodeOK},
	})
	before := h.run("fo").Fragments[0].WeightsHash
	runBlock(t, h, []txCase{
		{"ticket 1 before the deadline", h.commit("fo", 0, second, 1, wire.FragAggregated, "", 10), CodeUnauthorized},
		{"ticket 0 commits fragment 0", h.commit("fo", 0, first, 0, wire.FragAggregated, "", 10), CodeOK},
	})
	// The elected syncer never commits fragment 1: past one deadline (60 s)
	// the round is the second ticket's.
	h.now = time.UnixMilli(h.run("fo").RoundMs).Add(60 * time.Second)
	runBlock(t, h, []txCase{
		{"ticket 0 after its deadline", h.commit("fo", 1, first, 0, wire.FragAggregated, "", 11), CodeUnauthorized},
		{"ticket 1 takes over", h.commit("fo", 1, second, 1, wire.FragAggregated, "", 11), CodeOK},
	})
	r := h.run("fo")
	if r.Round != 1 || len(r.Roots) != 1 {
		t.Fatalf("round did not close: %+v", r)
	}
	var rc wire.RoundCommit
	err := h.app.View(context.Background(), func(v machine.View) error {
		raw, err := v.KV.Get(context.Background(), machine.KSTranscript, append([]byte("c/fo/"), make([]byte, 8)...))
		if err == nil {
			err = json.Unmarshal(raw, &rc)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Fragments[0].Syncer != first.DID.String() || rc.Fragments[0].Ticket != 0 || rc.Fragments[1].Syncer != second.DID.String() || rc.Fragments[1].Ticket != 1 {
		t.Fatalf("commits do not name their syncers: %+v", rc.Fragments)
	}
	if rc.Fragments[0].WeightsBefore != before || r.Fragments[0].WeightsHash != rc.Fragments[0].WeightsAfter {
		t.Fatalf("weights did not continue from the last commit")
	}
	// The next round starts at ticket 0 again.
	if r.Succession[0] != first.DID.String() {
		t.Fatal("succession changed")
	}
	h.conservation()
}

// TestNoQuorumAtDeadline: at the round deadline the chain closes every
// fragment with fewer than K records itself (weights kept), the round
// closes and the trainers with no accepted input miss it.
func TestNoQuorumAtDeadline(t *testing.T) {
	w := newWorld(t)
	h := newHarness(t, "")
	h.genesis(w.genesis)
	startRun(t, h, w, "nq", 2, 2, []*did.Key{w.t1, w.t2}, []*did.Key{w.candA})
	runBlock(t, h, []txCase{{"t1 f0", must(SubmissionTx(ManualChainID, w.t1, "nq", 0, 0, wire.ContentHash([]byte("a")), 4)), CodeOK}})
	w0 := h.run("nq").Fragments[0].WeightsHash
	h.now = time.UnixMilli(h.run("nq").RoundMs).Add(60*time.Second - time.Millisecond)
	h.block()
	if h.run("nq").Round != 0 {
		t.Fatal("closed before the deadline")
	}
	h.now = h.now.Add(time.Millisecond)
	h.block()
	r := h.run("nq")
	if r.Round != 1 || len(r.Roots) != 1 || r.Fragments[0].WeightsHash != w0 {
		t.Fatalf("after the deadline: %+v", r)
	}
	for _, tr := range r.Trainers {
		want := uint64(0)
		if tr.DID == w.t2.DID.String() {
			want = 1 // t1's record counts as accepted input of the no-quorum fragment
		}
		if tr.Missed != want {
			t.Fatalf("%s missed %d rounds, want %d", tr.DID, tr.Missed, want)
		}
	}
	h.conservation()
}

// TestEquivocationDuplicateVerdict: a claim judged a duplicate (the same
// values in another encoding) slashes nothing.
func TestEquivocationDuplicateVerdict(t *testing.T) {
	w := newWorld(t)
	h := newHarness(t, "")
	h.genesis(w.genesis)
	succ := startRun(t, h, w, "eq", 1, 1, []*did.Key{w.t1}, []*did.Key{w.candA})
	runBlock(t, h, []txCase{
		{"t1 f0", must(SubmissionTx(ManualChainID, w.t1, "eq", 0, 0, wire.ContentHash([]byte("a")), 4)), CodeOK},
		{"t1 f0 re-encoded", must(SubmissionTx(ManualChainID, w.t1, "eq", 0, 0, wire.ContentHash([]byte("a2")), 4)), CodeOK},
	})
	runBlock(t, h, []txCase{{"commit with a duplicate verdict", h.commit("eq", 0, keyOf([]*did.Key{w.candA}, succ[0]), 0, wire.FragAggregated, wire.VerdictDuplicate, 5), CodeOK}})
	if s := h.run("eq").Trainers[0].Slashed; s != "0" {
		t.Fatalf("slashed %s for a duplicate", s)
	}
}
