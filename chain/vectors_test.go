package chain

import (
	"testing"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// The vectors of docs/protocol/chain.md. A second implementation must
// produce these bytes.
const (
	vecAppHash     = "1c857cf1378c047ac1760615f3f559442e1273c9a0cf4f512e0090a598c3a320"
	vecRunLogLeaf  = "544cccf517b33433d84f6e720ace50e055725c8e6b8b542263ae980eb05a6451"
	vecGenesisHash = "d4ba96d69279f5f80204cc3feeefaabf41d571f379736e2fe788c0e1635228d0"
	vecStateLeaf   = "e5d63deb2abbd0484b6ed1273a4f8e5ce576348759653beceffe7ab2218b0805"
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
	sl := wire.SHA256(stateLeaf("acct/issuer", []byte("-1000")))
	if sl.String() != vecStateLeaf {
		t.Errorf("SHA-256(stateLeaf(acct/issuer, -1000)) = %s, want %s", sl, vecStateLeaf)
	}
	k := testKey(t, did.KindHuman, 1)
	h := newHarness(t, "")
	if g := h.genesis(GenesisAccount{DID: k.DID.String(), Balance: "1000"}); g.String() != vecGenesisHash {
		t.Errorf("genesis app hash %s, want %s (DID %s)", g, vecGenesisHash, k.DID)
	}
}
