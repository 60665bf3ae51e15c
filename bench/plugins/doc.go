// Package plugins benchmarks the Wasm rule plugins against native Go loops
// over the same data (K=6 inputs of N=2^24 f32 values), with and without
// fuel metering, and against numpy (TENZRO_PYTHON). Run:
//
//	go test ./bench/plugins -run XXX -bench . -benchtime=3x
//
// Each benchmark reports wasm_ms, nofuel_ms and native_ms measured in the
// same run, and speed_vs_native = native time / wasm time (1.0 = as fast).
package plugins
