package syncer

import "context"

// Signer holds the syncer's signing key. In every tier the key is born and
// kept inside the node's enclave (enclave package); Evidence binds its
// public key.
type Signer interface {
	// DID is the signer's did:tenzro identity.
	DID() string
	// Sign signs msg with Ed25519.
	Sign(ctx context.Context, msg []byte) ([]byte, error)
	// Evidence is the attestation evidence binding the key (nil when none).
	Evidence() []byte
	// Prove computes the RFC 9381 ECVRF-EDWARDS25519-SHA512-TAI proof for
	// alpha with the same key (used in the syncer election).
	Prove(ctx context.Context, alpha []byte) ([]byte, error)
}
