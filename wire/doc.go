// Package wire holds the protocol objects that the syncer, the RPC layer, the
// store and the CLI share: the task spec, the run view, outer-gradient
// submissions, round commits and the training receipt, together with the
// canonical length-prefixed encoding that every signature and hash in the
// protocol is computed over (see docs/PROTOCOL.md).
//
// It is a leaf package: it imports nothing from this module except its own
// sub-packages, so every other package may depend on it.
package wire
