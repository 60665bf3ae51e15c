package rpc

import _ "embed"

// openRPCDoc is the OpenRPC 1.2 document served as rpc.discover. It is
// generated from the method catalog in openrpc_test.go
// (go test ./rpc -run TestOpenRPCDocument -update) and a test keeps it in
// step with the served methods.
//
//go:embed openrpc.json
var openRPCDoc []byte

// OpenRPC returns a copy of the OpenRPC document.
func OpenRPC() []byte { return append([]byte(nil), openRPCDoc...) }
