package chain

import (
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// The vectors of docs/protocol/chain.md. A second implementation must
// produce these bytes.
const (
	vecAppHash     = "1c857cf1378c047ac1760615f3f559442e1273c9a0cf4f512e0090a598c3a320"
	vecRunLogLeaf  = "544cccf517b33433d84f6e720ace50e055725c8e6b8b542263ae980eb05a6451"
	vecStateRoot   = "064b9203d341585b35081c8ec42c3ee1436023879f77acf3606bccf9ebed6b54"
	vecGenesisHash = "df33d8b91a46c0da7ad05d3ae10a812c38e1129152c056353a733712aedc2643"
)

func TestVectors(t *testing.T) {
	got := AppHash(5, wire.SHA256([]byte("state")), 2, wire.SHA256([]byte("log")))
	if got.String() != vecAppHash {
		t.Errorf("AppHash(5, SHA-256(\"state\"), 2, SHA-256(\"log\")) = %s, want %s", got, vecAppHash)
	}
	leaf := wire.SHA256(RunLogLeaf("run-1", wire.SHA256([]byte("root"))))
	if leaf.String() != vecRunLogLeaf {
		t.Errorf("SHA-256(RunLogLeaf(run-1, SHA-256(\"root\"))) = %s, want %s", leaf, vecRunLogLeaf)
	}
	// The state tree at version 7 after [ledger/bal/issuer = "-1000",
	// meta/cand/x = "y"] saved at version 6, then meta/cand/x deleted and
	// ledger/bal/did:a = "5" set at version 7.
	tr, err := openStateTree("")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.close()
	tr.begin(6)
	if err := tr.apply([]write{{key: StateKey(machine.KSLedger, []byte("bal/issuer")), value: []byte("-1000")}, {key: StateKey(machine.KSMeta, []byte("cand/x")), value: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.save(6); err != nil {
		t.Fatal(err)
	}
	tr.begin(7)
	if err := tr.apply([]write{{key: StateKey(machine.KSLedger, []byte("bal/did:a")), value: []byte("5")}, {key: StateKey(machine.KSMeta, []byte("cand/x"))}}); err != nil {
		t.Fatal(err)
	}
	if sr, _ := tr.save(7); sr.String() != vecStateRoot {
		t.Errorf("state root = %s, want %s", sr, vecStateRoot)
	}
	k := testKey(t, did.KindHuman, 1)
	h := newHarness(t, "")
	if g := h.genesis(GenesisState{Accounts: []GenesisAccount{{DID: k.DID.String(), Balance: "1000"}}}); g.String() != vecGenesisHash {
		t.Errorf("genesis app hash %s, want %s (DID %s)", g, vecGenesisHash, k.DID)
	}
}
