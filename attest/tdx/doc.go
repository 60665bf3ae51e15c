// Package tdx verifies Intel TDX quotes (v4 and v5) with
// github.com/google/go-tdx-guest, split into:
//
//   - parse.go: bounded parsing of the quote (no trust decisions);
//   - collateral.go: the collateral cache — Intel PCS responses (TCB info,
//     QE identity, PCK CRL, root CA CRL) kept on disk or carried in the
//     envelope, served to the library through an injected getter; nothing is
//     fetched from the network, and missing collateral fails closed;
//   - verify.go: quote signature, QE report, PCK chain to the pinned Intel
//     SGX Root CA, collateral signatures and freshness, CRLs, and the TCB
//     status (UpToDate, or an allowlist) at a pinned time;
//   - cache.go: PCK chains and collateral the library accepted, keyed by the
//     pinned root, the chain's bytes and the collateral's content, kept
//     within every certificate's validity and before every next update;
//     collateral and PCK chains parsed once per content;
//   - quote.go: the library's per-quote steps (quote and QE report
//     signatures, QE report data, TD quote body and QE report against the
//     TCB info and QE identity, TCB levels), with its error texts, run on a
//     cached chain and collateral;
//   - validate.go: the policy (MRTD, RTMR0-3, MRSEAM allowlists; the TD
//     DEBUG attribute refused; minimum TEE TCB SVN).
//
// go-tdx-guest writes the chain, collateral and time back into the Options
// it is given: every call builds a fresh Options.
package tdx
