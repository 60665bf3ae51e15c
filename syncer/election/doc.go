// Package election chooses a run's syncer among registered candidates by a
// stake-weighted exponential race over RFC 9381 VRF outputs.
//
// Every candidate proves the run's election input Alpha(taskID, specHash)
// with its Ed25519 (DID) key (package syncer/vrf). The first 8 bytes of the
// VRF output beta, read big-endian as v, give u = (v+1)/2^64 in (0,1]; the
// candidate's ticket is −ln(u)/stake and the lowest ticket wins, ties going
// to the bytewise-lowest DID. A candidate with stake s therefore wins with
// probability s/Σs, and nobody can bias the draw: beta is fixed by the key
// and alpha, and anyone can check it.
//
// Tickets are computed with math/big only (no math.Log, whose results differ
// between amd64 assembly, arm64 FMA and pure-Go paths), at fixed precisions
// with a fixed series, so every platform gets bit-identical tickets and
// compares them exactly. The package owns the ticket arithmetic, the
// election itself (Elect), re-checking a stored election (Check,
// CheckRecord) and the stored form (Record → wire.Election). The normative
// description with test vectors is docs/protocol/election.md.
package election
