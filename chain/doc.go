// Package chain is the replicated state of a Tenzro Train network (DESIGN
// §12): a CometBFT ABCI 2.0 application and the tooling that writes a
// testnet's genesis and validator homes and starts a validator with
// CometBFT embedded in-process.
//
// It owns the chain's state transitions: accounts and the double-entry
// ledger (genesis allocations, transfers, escrow, stakes), syncer candidates
// and their stake, runs (spec, status, enrolment, the election among the
// candidates' VRF proofs), one record per submission (hashes and sizes, never
// payload bytes) and sealed runs' roots, which also enter an RFC 6962 log
// whose root is part of the app hash. Transactions are today's signed
// requests, with the same preimages and per-DID nonces (docs/PROTOCOL.md §3,
// docs/protocol/chain.md).
//
// It must not run Wasm, touch payload bytes or read a wall clock: every
// deadline is block time, state transitions iterate in key order, and no
// float enters state. State lives in a store.DB (Pebble) of its own.
package chain
