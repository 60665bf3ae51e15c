package machine

import (
	"testing"

	"github.com/tenzro/train/wire"
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
