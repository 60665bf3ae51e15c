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
	vecStateHash   = "cfe0b5c2f800bc60f6bb8bd5f52acf8b9d7df88a3d3aca6bc7e6cdd00d486d96"
	vecGenesisHash = "65a1287172f44857efd26b632d640a68596737138a29252a4db1b0c732cb4fe9"
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
	sh := StateHash(wire.SHA256([]byte("prev")), 7, []write{
		{key: StateKey(machine.KSLedger, []byte("bal/issuer")), value: []byte("-1000")},
		{key: StateKey(machine.KSMeta, []byte("cand/x")), value: nil},
	})
	if sh.String() != vecStateHash {
		t.Errorf("StateHash(SHA-256(\"prev\"), 7, [ledger/bal/issuer=-1000, meta/cand/x deleted]) = %s, want %s", sh, vecStateHash)
	}
	k := testKey(t, did.KindHuman, 1)
	h := newHarness(t, "")
	if g := h.genesis(GenesisState{Accounts: []GenesisAccount{{DID: k.DID.String(), Balance: "1000"}}}); g.String() != vecGenesisHash {
		t.Errorf("genesis app hash %s, want %s (DID %s)", g, vecGenesisHash, k.DID)
	}
}
