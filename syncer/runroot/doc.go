// Package runroot computes a run's root: an RFC 6962-style SHA-256 Merkle
// tree hash over the run's leaves (the spec hash, each round commit hash in
// round order, the final model hash), domain-separated with
// "tenzro/train/run-root/v1", and RFC 6962 inclusion proofs into it.
//
// The tree shape, proof layout and verification are those of RFC 6962 §2.1
// as implemented by github.com/transparency-dev/merkle (its compact and
// proof packages); this package supplies the hasher (Hasher, a
// merkle.LogHasher):
//
//	leaf hash  = SHA-256(0x00 ‖ "tenzro/train/run-root/v1" ‖ leaf)
//	node hash  = SHA-256(0x01 ‖ "tenzro/train/run-root/v1" ‖ left ‖ right)
//	empty root = SHA-256("tenzro/train/run-root/v1")
//
// The normative description with test vectors is docs/protocol/runroot.md.
package runroot
