// Package attest verifies TEE attestation evidence — Intel TDX quotes, AMD
// SEV-SNP reports and AWS Nitro attestation documents — against a policy,
// and defines the report-data binding of the Verified tier.
//
// Per-vendor parse/verify/validate live in attest/tdx, attest/snp and
// attest/nitro; this package holds the vendor-tagged evidence envelope
// (EVIDENCE.md), the policy format, the binding (ReportData, KeyReportData),
// single-use round nonces (NonceStore) and the Checker that implements
// syncer.Attestor, and the Service the RPC layer serves (nonces, evidence by
// digest on a syncer.KV, policy templates). A Checker keeps bounded, expiry-aware
// caches of the chains and collateral it verified (Options.CacheEntries;
// docs/RATIONALE.md): every check particular to a piece of evidence still
// runs on every call, and a cached verification returns the same Result
// as an uncached one. Nothing inside evidence is trusted as a root: roots are
// pinned in code, and the simulated test roots exist only in builds without
// the `production` tag and only for policies with "allow_simulated": true.
package attest
