// Package nitro verifies AWS Nitro Enclaves attestation documents
// (COSE_Sign1, ES384) with github.com/hf/nitrite, split into:
//
//   - parse.go: bounded CBOR parsing of the COSE_Sign1 envelope and the
//     attestation document (no trust decisions);
//   - verify.go: the signature and the certificate chain to the pinned AWS
//     Nitro root (its SHA-256 fingerprint is asserted) at a pinned time;
//     nitrite returns a result together with an error on an expired or
//     untrusted chain — the error is always checked;
//   - validate.go: the policy (PCR0-2 and PCR8 allowlists, all-zero PCR0 =
//     debug refused, timestamp skew, nonce and user_data checks).
package nitro
