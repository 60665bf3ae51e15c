// Package vrf implements the verifiable random function
// ECVRF-EDWARDS25519-SHA512-TAI of RFC 9381 (suite_string 0x03) on
// filippo.io/edwards25519.
//
// It owns exactly three operations: Prove (secret key + input alpha → 80-byte
// proof pi), Verify (public key + pi + alpha → 64-byte output beta, with the
// full validation of RFC 9381 §5.3: strict RFC 8032 point decoding, the
// public-key small-order check of §5.4.5 and the s < q check of §5.4.4) and
// ProofToHash (pi → beta without verification, for display only).
//
// Keys are ordinary crypto/ed25519 keys: the secret scalar and the nonce key
// are derived from the 32-byte Ed25519 seed exactly as RFC 8032 §5.1.5 and
// RFC 9381 §5.4.2.2 prescribe, so a node's DID key is also its VRF key.
//
// The syncer election (package syncer/election) is the only user. The
// normative description with test vectors is docs/protocol/vrf.md.
package vrf
