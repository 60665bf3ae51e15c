package syncer

import (
	"context"

	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire/did"
)

// KeySigner is a Signer over a key held in process memory. Nodes use the
// enclave package's key custody instead; KeySigner serves tests and nodes
// explicitly started without an enclave.
type KeySigner struct{ Key *did.Key }

// DID implements Signer.
func (s KeySigner) DID() string { return s.Key.DID.String() }

// Sign implements Signer.
func (s KeySigner) Sign(_ context.Context, msg []byte) ([]byte, error) { return s.Key.Sign(msg), nil }

// Evidence implements Signer: no enclave, no evidence.
func (s KeySigner) Evidence() []byte { return nil }

// Prove implements Signer.
func (s KeySigner) Prove(_ context.Context, alpha []byte) ([]byte, error) {
	return vrf.Prove(s.Key.Priv, alpha)
}
