// Package e2e holds black-box tests that build the real `tenzro` and
// `tenzro-node` binaries and drive them only through the CLI, as users do:
// a full run from posting to a verified receipt, and kill -9 of the node
// between and inside rounds with a byte-identical final receipt.
package e2e
