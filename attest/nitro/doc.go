// Package nitro verifies AWS Nitro Enclaves attestation documents
// (COSE_Sign1, ES384), split into:
//
//   - parse.go: bounded CBOR parsing of the COSE_Sign1 envelope and the
//     attestation document into github.com/hf/nitrite's Document (no trust
//     decisions);
//   - verify.go: nitrite.Verify's checks in its order and with its errors
//     (ES384 protected header, mandatory fields and their sizes, the COSE
//     signature under the document's certificate), then the certificate
//     chain to the pinned AWS Nitro root (its SHA-256 fingerprint is
//     asserted) at a pinned time, built once with crypto/x509 — nitrite.Verify
//     itself is not called, since it builds the chain on every call and a
//     second build was needed to assert the root; nitro_test.go checks the
//     two agree;
//   - cache.go: verified chains (leaf ‖ cabundle ‖ root, by their exact
//     DER) kept within the validity of their certificates, and parsed
//     certificates — the COSE signature is verified on every call;
//   - validate.go: the policy (PCR0-2 and PCR8 allowlists, all-zero PCR0 =
//     debug refused, timestamp skew, nonce and user_data checks).
package nitro
