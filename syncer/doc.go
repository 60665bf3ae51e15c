// Package syncer owns the run: its rules and the node's service over them.
//
//   - Machine (machine.go, m*.go) is the run state machine's deterministic
//     transitions — post → elect → enrol → submission records → fragment
//     commits → round close → seal, plus the ledger, syncer candidates,
//     plugin records, cancellation, expiry and fees — over a KV and a Block
//     (height, time, hash). It is the one place for admission and settlement
//     rules: no wall clock, no plugin, no payload bytes, no floats, every
//     transition all or nothing. chain.App hosts it.
//   - Node (node*.go, worker.go) is the node's Service over a Chain (reads
//     from the last committed state, writes as transactions after the checks
//     that need the bytes), the syncer worker that commits the fragments of
//     the runs this node's key is the current syncer of, and the candidate
//     daemon that enters its elections. Payloads, weights and evidence live
//     in Blobs; a PayloadFetcher gets what this node does not hold.
//   - Receipts (receipt*.go), the run root, replay, the Engine seam to the
//     plugin host and the native engine.
//   - Pay for work (issue 23): binding.go checks that a payload names its
//     signer, task, round and fragment; copies.go is the copy rule (exact
//     integer cosine, earliest block is the original), called by the
//     worker's computeCommit; mpay.go settles a final commit's inputs (kept
//     inputs earn N whether or not selected, copies are slashed).
//
// It must not know about HTTP, Pebble, CometBFT or wazero types: chain
// imports syncer, never the reverse.
package syncer
