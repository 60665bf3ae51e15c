package machine

import "github.com/tenzro/train/wire"

// Version of the node software, whose rules this package is.
const Version = "0.2.0"

// NativeEngineID names the node's built-in Go engine (syncer.NativeEngine); its hash is what receipts
// record when it ran.
const NativeEngineID = "tenzro/native-engine/v2: Mean(f64 sum in canonical order, /K in f64, rounded to f32), Finite, Nesterov(PyTorch SGD fused semantics)"

// NativeHash is the hash a posting and a receipt name for part (Mean,
// Finite, Nesterov) of the native engine.
func NativeHash(part string) wire.Hash { return wire.SHA256([]byte(NativeEngineID + "#" + part)) }

// NativeBuiltins are the native engine's implementations by hash (the
// built-ins a chain accepts besides the embedded Wasm modules).
func NativeBuiltins() map[wire.Hash]string {
	return map[wire.Hash]string{NativeHash("Mean"): "Mean", NativeHash("Finite"): "Finite", NativeHash("Nesterov"): "Nesterov"}
}
