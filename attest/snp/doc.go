// Package snp verifies AMD SEV-SNP attestation reports with
// github.com/google/go-sev-guest, split like that library:
//
//   - parse.go: bounded parsing of the raw report, the GHCB certificate
//     table and loose DER certificates (no trust decisions);
//   - verify.go: the report signature and the VCEK or VLEK chain to a pinned
//     AMD root (ARK → ASK for VCEK, ARK → ASVK for VLEK; Milan, Genoa,
//     Turin) at a pinned time — nothing inside the evidence is a root;
//   - cache.go: VCEK/VLEK chains the library verified, keyed by the exact
//     DER of the endorsement key and of the roots, kept within the validity
//     of every certificate in them, and parsed certificates — the report
//     signature is verified on every call;
//   - validate.go: the policy (measurement and host-data allowlists, guest
//     policy: debug and migration agent off, SMT explicit; VMPL; minimum TCB;
//     provisional firmware only when allowed; guest SVN; signer kind).
package snp
