// Package nvidia verifies NVIDIA Confidential Computing GPU attestation
// reports (Hopper and later in CC mode), split like the other vendors:
//
//   - parse.go: strict, size-limited parsing of the report — the SPDM 1.1
//     GET_MEASUREMENTS request (37 bytes, with its 32-byte nonce) followed by
//     the response (measurement blocks, nonce, opaque data naming the driver
//     and VBIOS versions, chip, FWID, and a 96-byte ECDSA P-384 signature) —
//     and of the PEM device certificate chain (no trust decisions);
//   - verify.go: the device chain to NVIDIA's pinned device identity root
//     (ECDSA P-384) at a pinned time, the leaf's FWID against the report's,
//     and the report signature over the SPDM transcript (request ‖ response
//     without the signature), SHA-384;
//   - rim.go: NVIDIA's reference integrity manifests (SWID tags with an
//     enveloped XML signature, verified with goxmldsig after the signing
//     chain is verified to the pinned RIM root);
//   - collateral.go: RIMs and OCSP responses as cached, expiry-aware
//     collateral read from a directory (nothing is fetched from the network);
//   - validate.go: the nonce, the measurements against the RIMs' golden
//     values, and the nvidia_cc policy (architecture, CC mode, minimum
//     driver and VBIOS versions, accepted measurements).
//
// Signatures and the chain are checked first; collateral that is missing is
// reported as "measurements/revocation unknown" after they held, and the
// policy decides whether that is acceptable.
package nvidia
