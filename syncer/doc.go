// Package syncer is the node: its Service over a Chain (reads from the last
// committed state, writes as transactions after the checks that need the
// bytes), the syncer worker that commits the fragments of the runs this
// node's key is the current syncer of, validator re-execution of challenged
// commits, replication, the candidate daemon, replay, the Engine seam to the
// plugin host and the native engine. Payloads, weights and evidence live in
// Blobs; a PayloadFetcher gets what this node does not hold.
//
// The consensus rules are not here: they are package machine, which the
// node reads through its exported view and pre-checks. Receipts are
// package audit. It must not know about HTTP, Pebble, CometBFT or wazero
// types: chain serves it (structurally, through Chain) without importing it.
//
// Pay for work (issue 23): binding.go checks that a payload names its signer,
// task, round and fragment (at Submit and in the worker's re-check);
// copies.go is the copy rule (exact integer cosine, the earliest block is
// the original), called by the worker's computeCommit; stale.go is the
// stale rule (the same cosine against the trainer's own inputs of the two
// rounds before: replays), run after it; the machine's mpay.go settles a
// final commit's inputs.
//
// Speed-only caches, never read by re-execution or replay, and changing no
// verdict: quantcache.go (earlier rounds' quantized prefixes, for the stale
// rule) and inputcache.go (what a commit needs of each input this node
// accepted, computed at Submit); lru.go is their bounded bookkeeping.
package syncer
