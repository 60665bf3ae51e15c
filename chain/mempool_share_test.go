package chain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire/did"
)

// TestMempoolSenderShare (issue 22, per-sender mempool share): one funded
// signer may have at most MempoolSenderLimit transactions admitted by
// CheckTx since the last commit; more are refused with CodeSenderBusy and
// change nothing (the check state keeps no nonce or fee of them), while
// another signer is still admitted. A commit releases what entered the
// block: CometBFT's recheck counts again only what still waits.
func TestMempoolSenderShare(t *testing.T) {
	flooder, honest, bob := testKey(t, did.KindHuman, 1), testKey(t, did.KindHuman, 2), testKey(t, did.KindHuman, 3)
	h := &harness{t: t, now: genesisTime.Add(time.Second), senderLimit: 3}
	h.open()
	h.genesis(GenesisState{Accounts: []GenesisAccount{{DID: flooder.DID.String(), Balance: "100" + tnzo}, {DID: honest.DID.String(), Balance: "100" + tnzo}}})
	tr := func(k *did.Key, nonce uint64) []byte {
		return must(TransferTx(ManualChainID, k, bob.DID.String(), "1", nonce))
	}
	check := func(tx []byte, typ abci.CheckTxType) *abci.ResponseCheckTx {
		t.Helper()
		res, err := h.app.CheckTx(context.Background(), &abci.RequestCheckTx{Tx: tx, Type: typ})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for n := uint64(1); n <= 3; n++ {
		if ct := check(tr(flooder, n), abci.CheckTxType_New); ct.Code != CodeOK {
			t.Fatalf("flooder's transaction %d of 3: code %d %s", n, ct.Code, ct.Log)
		}
	}
	busy := check(tr(flooder, 4), abci.CheckTxType_New)
	if busy.Code != CodeSenderBusy || !strings.Contains(busy.Log, "3 transactions waiting") || !strings.Contains(busy.Log, "--mempool-sender-limit") {
		t.Fatalf("flooder's 4th transaction: code %d %q, want %d naming the share", busy.Code, busy.Log, CodeSenderBusy)
	}
	if err := Refusal(busy.Code, busy.Log); !errors.Is(err, machine.ErrSenderBusy) || machine.KindOf(err) != machine.KindConflict {
		t.Fatalf("Refusal of the busy code: %v (kind %v)", err, machine.KindOf(err))
	}
	if ct := check(tr(honest, 1), abci.CheckTxType_New); ct.Code != CodeOK {
		t.Fatalf("another sender while the flooder is capped: code %d %s", ct.Code, ct.Log)
	}
	// The refusal used nothing: nonce 4 is still free in the check state.
	// A block takes two of the flooder's three; the recheck counts the one
	// left, so two more are admitted and the next is refused again.
	h.block(tr(flooder, 1), tr(flooder, 2), tr(honest, 1))
	if ct := check(tr(flooder, 3), abci.CheckTxType_Recheck); ct.Code != CodeOK {
		t.Fatalf("recheck of the one left: code %d %s", ct.Code, ct.Log)
	}
	for n := uint64(4); n <= 5; n++ {
		if ct := check(tr(flooder, n), abci.CheckTxType_New); ct.Code != CodeOK {
			t.Fatalf("after the block, flooder's nonce %d: code %d %s", n, ct.Code, ct.Log)
		}
	}
	if ct := check(tr(flooder, 6), abci.CheckTxType_New); ct.Code != CodeSenderBusy {
		t.Fatalf("flooder over its share after the block: code %d %s", ct.Code, ct.Log)
	}
	// A limit below zero lifts the cap.
	free := &harness{t: t, now: genesisTime.Add(time.Second), senderLimit: -1}
	free.open()
	free.genesis(GenesisState{Accounts: []GenesisAccount{{DID: flooder.DID.String(), Balance: "100" + tnzo}}})
	for n := uint64(1); n <= 2*DefaultMempoolSenderLimit; n++ {
		res, err := free.app.CheckTx(context.Background(), &abci.RequestCheckTx{Tx: tr(flooder, n), Type: abci.CheckTxType_New})
		if err != nil || res.Code != CodeOK {
			t.Fatalf("no limit, transaction %d: %v code %d %s", n, err, res.Code, res.Log)
		}
	}
}

// TestMempoolSenderShareDefault: a node without the option caps a signer at
// DefaultMempoolSenderLimit.
func TestMempoolSenderShareDefault(t *testing.T) {
	flooder, bob := testKey(t, did.KindHuman, 1), testKey(t, did.KindHuman, 3)
	h := newHarness(t, "")
	h.genesis(GenesisState{Accounts: []GenesisAccount{{DID: flooder.DID.String(), Balance: "100" + tnzo}}})
	for n := uint64(1); n <= DefaultMempoolSenderLimit+1; n++ {
		ct := checkTx(t, h, must(TransferTx(ManualChainID, flooder, bob.DID.String(), "1", n)))
		want := CodeOK
		if n > DefaultMempoolSenderLimit {
			want = CodeSenderBusy
		}
		if ct.Code != want {
			t.Fatalf("transaction %d (default limit %d): code %d %s, want %d", n, DefaultMempoolSenderLimit, ct.Code, ct.Log, want)
		}
	}
}
