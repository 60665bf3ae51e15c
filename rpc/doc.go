// Package rpc serves the node's syncer.Service as JSON-RPC 2.0 over HTTP
// (default 127.0.0.1:8545), using github.com/creachadair/jrpc2 and its jhttp
// bridge.
//
// It owns the transport concerns only: method names and their snake_case
// parameters (wire/api.go), strict parameter decoding, request-size limits,
// a semaphore bounding the memory of concurrent large requests, the mapping
// of syncer.Kind refusals to JSON-RPC error codes (ERRORS.md), the OpenRPC
// document served as rpc.discover, and Prometheus metrics. It holds no
// business rules: every decision is the Service's.
//
// The typed Go client lives in rpc/client; libp2p gossip in rpc/gossip.
package rpc
