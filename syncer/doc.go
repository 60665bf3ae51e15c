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
package syncer
