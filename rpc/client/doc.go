// Package client is the typed Go client of the node's JSON-RPC API (rpc
// package): one method per RPC method, with context, a per-call timeout,
// and errors (*Error) that carry the JSON-RPC code, message and data.
// The CLI, the tests and other Go programs use it.
package client
