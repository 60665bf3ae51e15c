package machine

import (
	"context"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// TestTxSignersCoverEveryKind: the signer table is the one place that says
// who signs each kind, so it names every kind of wire.TxTypes exactly once,
// each either signed by a DID or exempt (never both, never neither), and
// nothing else.
func TestTxSignersCoverEveryKind(t *testing.T) {
	seen := map[string]bool{}
	for _, typ := range wire.TxTypes {
		if seen[typ] {
			t.Fatalf("wire.TxTypes lists %s twice", typ)
		}
		seen[typ] = true
		s, ok := txSigners[typ]
		if !ok {
			t.Errorf("%s has no entry in txSigners", typ)
			continue
		}
		if (s.did == nil) == (s.exempt == nil) {
			t.Errorf("%s: want exactly one of did and exempt set (did %t, exempt %t)", typ, s.did != nil, s.exempt != nil)
		}
	}
	for typ := range txSigners {
		if !seen[typ] {
			t.Errorf("txSigners has %s, which is not in wire.TxTypes", typ)
		}
	}
	for _, typ := range []string{wire.TxFaucet, wire.TxChallengeVote} {
		if txSigners[typ].exempt == nil {
			t.Errorf("%s must be exempt (no DID signs or pays for it)", typ)
		}
	}
}

// TestAnteVerifiesTheTableSigner: for every kind the ante can check without
// state, a transaction signed by the key of the DID the table names passes
// the signature check (whatever refuses it next, it is not unauthorized),
// and the same transaction signed by any other key is refused as a bad
// signature against that DID and writes nothing.
func TestAnteVerifiesTheTableSigner(t *testing.T) {
	owner, err := did.Generate(did.KindHuman, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := did.Generate(did.KindHuman, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := owner.DID.String()
	n := wire.Signed{Nonce: 1}
	// Each builder makes a transaction that names d and signs it with k.
	cases := []struct {
		kind string
		mk   func(k *did.Key) *wire.Tx
	}{
		{wire.TxTransfer, func(k *did.Key) *wire.Tx {
			p := &wire.TransferParams{From: d, To: other.DID.String(), Amount: "1", Signed: n}
			p.Signature = k.Sign(p.Preimage())
			return &wire.Tx{Type: wire.TxTransfer, Transfer: p}
		}},
		{wire.TxRegisterCandidate, func(k *did.Key) *wire.Tx {
			p := &wire.RegisterSyncerParams{DID: d, Stake: "1", Signed: n}
			p.Signature = k.Sign(p.Preimage())
			return &wire.Tx{Type: wire.TxRegisterCandidate, RegisterCandidate: p}
		}},
		{wire.TxUnbond, func(k *did.Key) *wire.Tx {
			p := &wire.UnbondParams{DID: d, Signed: n}
			p.Signature = k.Sign(p.Preimage())
			return &wire.Tx{Type: wire.TxUnbond, Unbond: p}
		}},
		{wire.TxPublishPlugin, func(k *did.Key) *wire.Tx {
			p := &wire.PublishPluginTx{DID: d, Hash: wire.ContentHash([]byte("m")), Size: 1, Signed: n}
			p.Signature = k.Sign(p.Preimage())
			return &wire.Tx{Type: wire.TxPublishPlugin, PublishPlugin: p}
		}},
		{wire.TxElectionProof, func(k *did.Key) *wire.Tx {
			p := &wire.ElectionProofParams{DID: d, TaskID: "t", Signed: n}
			p.Signature = k.Sign(p.Preimage())
			return &wire.Tx{Type: wire.TxElectionProof, ElectionProof: p}
		}},
		{wire.TxEnroll, func(k *did.Key) *wire.Tx {
			p := &wire.EnrollTx{TrainerDID: d, TaskID: "t", Signed: n}
			p.Signature = k.Sign(p.Preimage())
			return &wire.Tx{Type: wire.TxEnroll, Enroll: p}
		}},
		{wire.TxLeave, func(k *did.Key) *wire.Tx {
			p := &wire.LeaveParams{TrainerDID: d, TaskID: "t", Signed: n}
			p.Signature = k.Sign(p.Preimage())
			return &wire.Tx{Type: wire.TxLeave, Leave: p}
		}},
		{wire.TxChallenge, func(k *did.Key) *wire.Tx {
			p := &wire.ChallengeTx{ChallengerDID: d, TaskID: "t", Signed: n}
			p.Signature = k.Sign(p.Preimage())
			return &wire.Tx{Type: wire.TxChallenge, Challenge: p}
		}},
		{wire.TxSubmission, func(k *did.Key) *wire.Tx {
			s := &wire.SubmissionTx{TrainerDID: d, TaskID: "t", PayloadHash: wire.ContentHash([]byte("p")), PayloadSize: 1}
			s.Signature = k.Sign(s.Preimage())
			return &wire.Tx{Type: wire.TxSubmission, Submission: s}
		}},
		{wire.TxCommitFragment, func(k *did.Key) *wire.Tx {
			p := &wire.CommitFragmentTx{TaskID: "t", SyncerDID: d, Signed: n}
			c, err := CommitJCS(&p.Commit)
			if err != nil {
				t.Fatal(err)
			}
			p.Signature = k.Sign(p.Preimage(c))
			return &wire.Tx{Type: wire.TxCommitFragment, CommitFragment: p}
		}},
	}
	m := NewMachine(MachineConfig{})
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			if err := m.Check(ctx, emptyKV{}, c.mk(owner)); KindOf(err) == KindUnauthorized {
				t.Fatalf("signed by %s's own key: %v", d, err)
			}
			state := &countingKV{}
			err := m.Ante(ctx, state, Block{Height: 1}, c.mk(other))
			if KindOf(err) != KindUnauthorized || !strings.Contains(err.Error(), "bad signature: does not verify against "+d) {
				t.Fatalf("signed by another key: got %v, want a bad signature against %s", err, d)
			}
			if state.commits != 0 {
				t.Fatalf("a refused ante wrote %d batches", state.commits)
			}
		})
	}
}

// countingKV is an empty KV that counts the batches written to it.
type countingKV struct {
	emptyKV
	commits int
}

func (c *countingKV) Commit(context.Context, *Batch) error { c.commits++; return nil }
