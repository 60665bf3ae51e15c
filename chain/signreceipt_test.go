package chain

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// readLog is a KV that records every key read through it: each Get's key
// and each Scan's prefix, per key space.
type readLog struct {
	machine.KV
	gets  map[machine.Keyspace][]string
	scans map[machine.Keyspace][]string
}

func newReadLog(kv machine.KV) *readLog {
	return &readLog{KV: kv, gets: map[machine.Keyspace][]string{}, scans: map[machine.Keyspace][]string{}}
}

func (l *readLog) Get(ctx context.Context, ks machine.Keyspace, key []byte) ([]byte, error) {
	l.gets[ks] = append(l.gets[ks], string(key))
	return l.KV.Get(ctx, ks, key)
}

func (l *readLog) Scan(ctx context.Context, ks machine.Keyspace, prefix []byte, fn func(key, value []byte) error) error {
	l.scans[ks] = append(l.scans[ks], string(prefix))
	return l.KV.Scan(ctx, ks, prefix, fn)
}

// reads says whether a write of (ks, key) could change what l read: the
// key was got, or lies under a scanned prefix.
func (l *readLog) reads(ks machine.Keyspace, key []byte) bool {
	for _, k := range l.gets[ks] {
		if k == string(key) {
			return true
		}
	}
	for _, p := range l.scans[ks] {
		if strings.HasPrefix(string(key), p) {
			return true
		}
	}
	return false
}

// receiptBytes is the chain receipt of task for signer built on kv: its
// preimage and its transcript blob (the bytes the signature covers and the
// chain stores), with the keys the build read.
func receiptBytes(t *testing.T, kv machine.KV, task, signer string, engine json.RawMessage) (pre, blob []byte, log *readLog) {
	t.Helper()
	log = newReadLog(kv)
	rc, blob, _, err := machine.ChainReceipt(context.Background(), log, task, signer, engine, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pre, err = audit.ReceiptPreimage(rc); err != nil {
		t.Fatal(err)
	}
	return pre, blob, log
}

// TestSignReceiptAnteLeavesReceiptInputs is the proof that lets the ante
// hand the receipt it built to the sign_receipt handler (machine txAuth's
// receipt): on a sealed run whose signer is also one of its trainers (so
// the fee the ante charges moves the balance of a DID the receipt pays),
// the ante's writes (the fee; sign_receipt carries no nonce) touch no key
// the chain receipt is built from, and the receipt built on the state
// after those writes is byte for byte the one built before them. The block
// then takes the transaction, and the stored receipt is that receipt with
// its signature.
func TestSignReceiptAnteLeavesReceiptInputs(t *testing.T) {
	ctx := context.Background()
	h, w, task := signerTrainsRun(t, 1, 1)
	signer := w.t1.DID.String()
	engine := json.RawMessage(`{"engine":"test"}`)
	raw := h.signReceipt(task, w.t1)
	tx, err := wire.DecodeTx(raw)
	if err != nil {
		t.Fatal(err)
	}
	var stored []byte
	err = h.app.View(ctx, func(v machine.View) error {
		pre0, blob0, log := receiptBytes(t, v.KV, task, signer, engine)
		for _, ks := range []machine.Keyspace{machine.KSRuns, machine.KSTranscript} {
			if len(log.gets[ks])+len(log.scans[ks]) == 0 {
				t.Fatalf("the receipt build read nothing in %s: the read log misses the build's inputs", ks)
			}
		}
		// The ante's writes land in o, over the committed state.
		o := machine.NewOverlay(v.KV)
		blk := machine.Block{Height: v.Block.Height + 1, TimeMs: h.now.UnixMilli(), PrevTimeMs: v.Block.TimeMs, Hash: []byte("next")}
		if err := h.app.Machine().Ante(ctx, o, blk, tx); err != nil {
			return fmt.Errorf("ante: %w", err)
		}
		writes := o.Batch().Ops
		if len(writes) == 0 {
			t.Fatal("the ante wrote nothing: the test does not exercise a fee")
		}
		for _, op := range writes {
			if log.reads(op.KS, op.Key) {
				t.Errorf("the ante writes %s/%q, which the chain receipt is built from", op.KS, op.Key)
			}
		}
		before, err := machine.AccountBalance(ctx, v.KV, machine.AcctDID(signer))
		if err != nil {
			return err
		}
		after, err := machine.AccountBalance(ctx, o, machine.AcctDID(signer))
		if err != nil {
			return err
		}
		fee, err := (&machine.Params{TxFeeBase: "3", TxFeeByte: "1"}).TxFee(wire.TxSignReceipt, len(raw))
		if err != nil {
			return err
		}
		if got := new(big.Int).Sub(before, after); got.Cmp(fee) != 0 || fee.Sign() <= 0 {
			t.Fatalf("the ante moved the signer's balance by %s, want the fee %s", got, fee)
		}
		pre1, blob1, _ := receiptBytes(t, o, task, signer, engine)
		if !bytes.Equal(pre0, pre1) || !bytes.Equal(blob0, blob1) {
			t.Fatalf("the receipt built after the ante's writes differs:\n before %s\n after  %s", pre0, pre1)
		}
		stored = pre0
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	runBlock(t, h, []txCase{{"sign", raw, CodeOK}})
	_, got := h.query(QueryReceipt, task)
	var rc wire.Receipt
	if err := json.Unmarshal([]byte(got), &rc); err != nil {
		t.Fatal(err)
	}
	pre, err := audit.ReceiptPreimage(&rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pre, stored) {
		t.Fatalf("stored receipt's preimage differs from the one built before the ante:\n %s\n %s", pre, stored)
	}
	if err := audit.CheckReceipt([]byte(got), h.run(task).Seal.RunRoot[:]); err != nil {
		t.Fatalf("stored receipt: %v", err)
	}
	h.conservation()
}

// signerTrainsRun is a harness with a sealed run of rounds rounds of frags
// fragments (M = K = 2: t1 and t2), elected and committed by t1, which is
// also one of its trainers, on a chain that charges fees (base 3, 1 per
// byte). The receipt is not signed yet.
func signerTrainsRun(tb testing.TB, rounds, frags int) (*harness, *world, string) {
	w := newWorld(tb)
	g := w.genesis
	g.Params = freeParams(60000)
	g.Params.TxFeeBase, g.Params.TxFeeByte = "3", "1"
	acc := func(k *did.Key, v string) GenesisAccount { return GenesisAccount{DID: k.DID.String(), Balance: v} }
	g.Accounts = []GenesisAccount{acc(w.sponsor, "100000000000000"), acc(w.t1, "100000000"), acc(w.t2, "100000000")}
	h := newHarness(tb, "")
	h.genesis(g)
	task := "signer-trains"
	spec := testSpec(task, w.sponsor.DID.String(), 2, 2, frags, rounds, "")
	runBlock(tb, h, []txCase{
		{"t1 registers as a syncer candidate", must(RegisterSyncerTx(ManualChainID, w.t1, "100", 1)), CodeOK},
		{"post", must(PostTaskTx(ManualChainID, w.sponsor, spec, testLayout(frags, task), meanRules(tb), 1)), CodeOK},
	})
	runBlock(tb, h, []txCase{
		{"proof t1", must(ElectionProofTx(ManualChainID, w.t1, task, vrfProof(tb, w.t1, task, spec), 2)), CodeOK},
		{"enrol t1", must(EnrollTx(ManualChainID, w.t1, task, "100", 3)), CodeOK},
		{"enrol t2", must(EnrollTx(ManualChainID, w.t2, task, "100", 1)), CodeOK},
	})
	nonce := uint64(4)
	for round := 0; round < rounds; round++ {
		var subs, commits []txCase
		for f := 0; f < frags; f++ {
			for i, k := range []*did.Key{w.t1, w.t2} {
				p := wire.ContentHash([]byte(fmt.Sprintf("%d-%d-%d", round, f, i)))
				subs = append(subs, txCase{fmt.Sprintf("r%d f%d t%d", round, f, i+1), must(SubmissionTx(ManualChainID, k, task, uint64(round), uint64(f), p, 4)), CodeOK})
			}
		}
		runBlock(tb, h, subs)
		for f := 0; f < frags; f++ {
			commits = append(commits, txCase{fmt.Sprintf("commit r%d f%d", round, f), h.commit(task, f, w.t1, 0, wire.FragAggregated, "", nonce), CodeOK})
			nonce++
		}
		runBlock(tb, h, commits)
	}
	if r := h.run(task); r.Status != wire.StatusSealed || r.Syncer != w.t1.DID.String() {
		tb.Fatalf("run %s, syncer %s: want sealed by t1", r.Status, r.Syncer)
	}
	return h, w, task
}
