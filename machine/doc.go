// Package machine is Tenzro Train's consensus state machine. Everything here
// is consensus-critical: a change to any of it changes what validators
// accept or the bytes they write, so it changes app hashes and must ship to
// every validator of a network at once.
//
// It owns:
//   - Machine (machine.go, m*.go): the deterministic transitions — post →
//     elect → enrol → submission records → fragment commits → round close →
//     challenge window and finality → seal, plus syncer candidates, plugin
//     records, cancellation, expiry and fees — over a KV and a Block
//     (height, time, hash). No wall clock, no plugin, no payload bytes, no
//     floats; every transition all or nothing on its KV.
//   - The state layout (mstate.go, runstore.go, kv.go, overlay.go): key
//     spaces, keys, the Run record stored by key (a header, and each
//     enrolment, fragment, record reference and attestation under its own
//     key: runstore.go is the only code that knows how) and its read-only
//     view for the node (LoadRun, RunJSON, RoundStart, Run's exported
//     methods), the run log.
//   - The ante (mante.go) every transaction passes first — chain id,
//     signature, nonce, fee — and the one table of who signs each
//     transaction kind and over what (signer.go, txSigners), which the
//     transitions do not restate.
//   - Memo caches of pure functions on the transaction path (caches.go:
//     verified signatures, parsed specs, decoded parameters).
//   - The ledger (ledger.go) and the parameters and limits a posting is
//     checked against (params.go, builtins.go, layout.go: fragment layout
//     from initial weights).
//   - The refusals (errors.go: Kind, Error) every transition returns, and
//     the pre-checks the node calls before it spends work (LoadParams, Fee,
//     Run.PrecheckRecord, Balance): the same code as the transition, so the
//     node never restates a rule.
//
// Receipts' canonical forms and checks live in package audit (a leaf the
// machine uses to build the receipt at seal); the node (package syncer),
// the chain host (package chain) and the CLI import this package, never the
// reverse.
package machine
