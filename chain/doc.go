// Package chain is the replicated state of a Tenzro Train network (DESIGN
// §12): a CometBFT ABCI 2.0 application, App, that hosts syncer.Machine —
// the run state machine — over its own store; the incremental app hash and
// the run log of sealed run roots (with proofs against a header); genesis and
// the tooling that writes a testnet's or the --dev chain's homes; the node
// that runs CometBFT in-process (Start) and Local, the syncer.Chain the
// node's service uses; Light, the syncer.Chain of a light client (headers
// verified by CometBFT's light package, state read by proven queries,
// writes broadcast and their results checked against verified headers);
// Manual, the same App driven by a sequencer for tests; and the client of a
// node's CometBFT RPC.
//
// It owns decoding transactions into the machine (wire.DecodeTx), mapping
// the machine's key spaces to key prefixes of the chain's store, the app
// hash, genesis, CometBFT embedding and queries. It must not run Wasm, touch
// payload bytes or read a wall clock in the state machine: every rule is the
// machine's, every deadline block time (the light client's trusting period
// is the one wall-clock check, on headers, outside the machine).
package chain
