package chain

import (
	"context"
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Issue 22: every resource a transaction uses is priced. These tests run on
// the default parameters (fees and floors on) and reproduce each attack of
// the adversarial pass, now refused.

const tnzo = "000000000000000000" // × 10^18

// feeOf is the default fee of tx.
func feeOf(t *testing.T, tx []byte) *big.Int {
	t.Helper()
	d, err := wire.DecodeTx(tx)
	if err != nil {
		t.Fatal(err)
	}
	p := machine.DefaultParams()
	f, err := p.TxFee(d.Type, len(tx))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func checkTx(t *testing.T, h *harness, tx []byte) *abci.ResponseCheckTx {
	t.Helper()
	res, err := h.app.CheckTx(context.Background(), &abci.RequestCheckTx{Tx: tx, Type: abci.CheckTxType_New})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func bal(t *testing.T, h *harness, k *did.Key) *big.Int {
	t.Helper()
	v, ok := new(big.Int).SetString(h.balance(k), 10)
	if !ok {
		t.Fatalf("balance of %s: %q", k.DID, h.balance(k))
	}
	return v
}

// TestCrossChainReplayRefused (finding 1): a transfer signed for one chain
// commits there and is refused, changing nothing, on a chain with another
// id holding the same genesis.
func TestCrossChainReplayRefused(t *testing.T) {
	alice, bob := testKey(t, did.KindHuman, 1), testKey(t, did.KindHuman, 2)
	g := GenesisState{Accounts: []GenesisAccount{{DID: alice.DID.String(), Balance: "10" + tnzo}}}
	a, b := newHarness(t, ""), newHarness(t, "")
	a.genesis(g)
	st, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.app.InitChain(context.Background(), &abci.RequestInitChain{ChainId: "tenzro-other", InitialHeight: 1, Time: genesisTime, AppStateBytes: st}); err != nil {
		t.Fatal(err)
	}
	tx := must(TransferTx(ManualChainID, alice, bob.DID.String(), "1"+tnzo, 1))
	if res, _ := a.block(tx); res[0].Code != CodeOK {
		t.Fatalf("on its own chain: code %d %s", res[0].Code, res[0].Log)
	}
	if ct := checkTx(t, b, tx); ct.Code != CodeUnauthorized || !strings.Contains(ct.Log, "wrong chain") {
		t.Fatalf("CheckTx on another chain: code %d %q, want %d \"wrong chain\"", ct.Code, ct.Log, CodeUnauthorized)
	}
	_, empty := newTwin(t, st).block()
	res, hb := b.block(tx) // a proposer that includes it anyway
	if res[0].Code != CodeUnauthorized || !strings.Contains(res[0].Log, `signed for chain "tenzro-manual", this chain is "tenzro-other"`) {
		t.Fatalf("in a block on another chain: code %d %q", res[0].Code, res[0].Log)
	}
	if hb != empty {
		t.Fatal("a transaction for another chain changed the state")
	}
	if got := b.balance(bob); got != "0" {
		t.Fatalf("bob has %s on the other chain", got)
	}
}

// newTwin is a chain "tenzro-other" with app state st, for comparing app
// hashes with b in TestCrossChainReplayRefused.
func newTwin(t *testing.T, st []byte) *harness {
	h := newHarness(t, "")
	if _, err := h.app.InitChain(context.Background(), &abci.RequestInitChain{ChainId: "tenzro-other", InitialHeight: 1, Time: genesisTime, AppStateBytes: st}); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestRefusedTransactionUsesItsNonce (finding 2): an unaffordable transfer
// in a block is refused, pays its fee and uses up its nonce, so the same
// bytes rebroadcast after the sender is funded are refused.
func TestRefusedTransactionUsesItsNonce(t *testing.T) {
	alice, bob, sponsor := testKey(t, did.KindHuman, 1), testKey(t, did.KindHuman, 2), testKey(t, did.KindHuman, 3)
	h := newHarness(t, "")
	h.genesis(GenesisState{Accounts: []GenesisAccount{{DID: alice.DID.String(), Balance: "1" + tnzo}, {DID: sponsor.DID.String(), Balance: "100" + tnzo}}})
	big5 := must(TransferTx(ManualChainID, alice, bob.DID.String(), "5"+tnzo, 7))
	before, _ := new(big.Int).SetString("1"+tnzo, 10)
	res, _ := h.block(big5)
	if res[0].Code != CodeFunds {
		t.Fatalf("unaffordable transfer: code %d %s", res[0].Code, res[0].Log)
	}
	fee := feeOf(t, big5)
	if got, want := bal(t, h, alice), new(big.Int).Sub(before, fee); got.Cmp(want) != 0 {
		t.Fatalf("after the refusal alice has %s, want %s (the fee %s paid)", got, want, fee)
	}
	if code, n := h.query(QueryNonce, alice.DID.String()); code != CodeOK || n != "7" {
		t.Fatalf("nonce after the refusal: %d %q, want 7", code, n)
	}
	h.block(must(TransferTx(ManualChainID, sponsor, alice.DID.String(), "10"+tnzo, 1)))
	if ct := checkTx(t, h, big5); ct.Code != CodeNonce {
		t.Fatalf("replay after funding, CheckTx: code %d %s", ct.Code, ct.Log)
	}
	res, _ = h.block(big5)
	if res[0].Code != CodeNonce {
		t.Fatalf("replay after funding in a block: code %d %s, want the nonce refusal", res[0].Code, res[0].Log)
	}
	if got := h.balance(bob); got != "0" {
		t.Fatalf("the replayed transfer paid bob %s", got)
	}
	h.conservation()
}

// TestBlockSpaceIsPaid (finding 3): an unfunded key's transactions are
// refused at CheckTx (and in a block, changing nothing); a funded one
// cannot queue more than its balance pays for; oversized fields are refused
// before any state is read.
func TestBlockSpaceIsPaid(t *testing.T) {
	rich, poor, bob := testKey(t, did.KindHuman, 1), testKey(t, did.KindHuman, 2), testKey(t, did.KindHuman, 3)
	h := newHarness(t, "")
	h.genesis(GenesisState{Accounts: []GenesisAccount{{DID: rich.DID.String(), Balance: "100" + tnzo}}})
	free := must(TransferTx(ManualChainID, poor, bob.DID.String(), "1", 1))
	if ct := checkTx(t, h, free); ct.Code != CodeFunds || !strings.Contains(ct.Log, "cannot pay the transaction fee") {
		t.Fatalf("unfunded sender at CheckTx: code %d %q", ct.Code, ct.Log)
	}
	twin := newHarness(t, "")
	twin.genesis(GenesisState{Accounts: []GenesisAccount{{DID: rich.DID.String(), Balance: "100" + tnzo}}})
	res, ha := h.block(free)
	_, hb := twin.block()
	if res[0].Code != CodeFunds || ha != hb {
		t.Fatalf("unfunded sender in a block: code %d %s, state changed %v", res[0].Code, res[0].Log, ha != hb)
	}

	// Give poor exactly one transfer's fee: the first is admitted to the
	// mempool, the second (the next nonce) is not, though each alone could
	// pay against the committed state.
	tr := func(nonce uint64) []byte { return must(TransferTx(ManualChainID, poor, bob.DID.String(), "1", nonce)) }
	fund := new(big.Int).Add(feeOf(t, tr(2)), big.NewInt(1))
	h.block(must(TransferTx(ManualChainID, rich, poor.DID.String(), fund.String(), 1)))
	if ct := checkTx(t, h, tr(2)); ct.Code != CodeOK {
		t.Fatalf("first transaction: code %d %s", ct.Code, ct.Log)
	}
	if ct := checkTx(t, h, tr(3)); ct.Code != CodeFunds {
		t.Fatalf("second queued transaction beyond the balance: code %d %s, want %d", ct.Code, ct.Log, CodeFunds)
	}

	pad := strings.Repeat("x", 700<<10)
	// A 700 KB task_id in a challenge (it landed in blocks) is refused by
	// the field caps, at decoding.
	ch := wire.ChallengeTx{TaskID: pad, ChallengerDID: rich.DID.String(), Bond: "1", Signed: wire.Signed{ChainID: ManualChainID, Nonce: 9}}
	ch.Signature = rich.Sign(ch.Preimage())
	raw := must(wire.EncodeTx(wire.TxChallenge, ch))
	if ct := checkTx(t, h, raw); ct.Code != CodeDecode || !strings.Contains(ct.Log, "task_id is 716800 long, limit 128") {
		t.Fatalf("700 KB task_id: code %d %q", ct.Code, ct.Log)
	}
	h.conservation()
}

// TestEconomicFloors (finding 9): a reward pool, stake or challenge bond of
// 1 atto is refused, and a bond must cover re-executing K inputs of the
// largest fragment.
func TestEconomicFloors(t *testing.T) {
	sponsor, tr := testKey(t, did.KindHuman, 1), testKey(t, did.KindMachine, 2)
	h := newHarness(t, "")
	h.genesis(GenesisState{Accounts: []GenesisAccount{{DID: sponsor.DID.String(), Balance: "100" + tnzo}, {DID: tr.DID.String(), Balance: "10" + tnzo}}})
	rules := meanRules(t)
	spec := func(task, reward, extra string) []byte {
		return []byte(strings.Replace(string(testSpec(task, sponsor.DID.String(), 2, 1, 1, 1, extra)), `"reward_pool":"1000"`, `"reward_pool":"`+reward+`"`, 1))
	}
	ok := "1" + tnzo
	cases := []struct {
		name string
		tx   []byte
		want string
	}{
		{"reward pool of 1 atto", must(PostTaskTx(ManualChainID, sponsor, spec("r1", "1", ""), nil, rules, 1)), "reward_pool 1 is below this chain's min_reward_pool"},
		{"bond of 1 atto", must(PostTaskTx(ManualChainID, sponsor, spec("r2", ok, `,"challenge_bond":"1"`), nil, rules, 2)), "challenge_bond 1 is below this chain's min_challenge_bond"},
		{"min_stake of 1 atto is fine (the chain's floor applies)", nil, ""},
	}
	for _, c := range cases {
		if c.tx == nil {
			continue
		}
		res, _ := h.block(c.tx)
		if res[0].Code != CodeInvalid || !strings.Contains(res[0].Log, c.want) {
			t.Errorf("%s: code %d %q, want %q", c.name, res[0].Code, res[0].Log, c.want)
		}
	}
	// A run whose bond is above the floor but below re-executing its
	// fragment: 1 fragment of 10^9 F32 values, K=1 → 4 GB × 1e10.
	l := testLayout(1, "big")
	l.Fragments[0].N = 1_000_000_000
	res, _ := h.block(must(PostTaskTx(ManualChainID, sponsor, spec("r3", ok, ""), l, rules, 3)))
	need := machine.ReexecBond(machine.DefaultReexecBondByte, 1, 1_000_000_000, "F32")
	if res[0].Code != CodeInvalid || !strings.Contains(res[0].Log, "does not cover re-executing a fragment") || !strings.Contains(res[0].Log, need.String()) {
		t.Fatalf("bond below re-execution: code %d %q (need %s)", res[0].Code, res[0].Log, need)
	}
	// A good posting, then an enrolment staking 1 atto.
	if res, _ := h.block(must(PostTaskTx(ManualChainID, sponsor, spec("r4", ok, ""), testLayout(1, "ok"), rules, 4))); res[0].Code != CodeOK {
		t.Fatalf("posting above the floors: code %d %s", res[0].Code, res[0].Log)
	}
	res, _ = h.block(must(EnrollTx(ManualChainID, tr, "r4", "1", 1)))
	if res[0].Code != CodeInvalid || !strings.Contains(res[0].Log, "below this chain's min_stake") {
		t.Fatalf("stake of 1 atto: code %d %q", res[0].Code, res[0].Log)
	}
	if res, _ := h.block(must(EnrollTx(ManualChainID, tr, "r4", machine.DefaultMinStake.String(), 2))); res[0].Code != CodeOK {
		t.Fatalf("stake at the floor: code %d %s", res[0].Code, res[0].Log)
	}
	h.conservation()
}
