// Package plugins is the deterministic Wasm plugin host of the syncer: it
// implements syncer.Engine on wazero (compiler engine, WebAssembly 2.0 core
// features with SIMD128, no threads or relaxed SIMD, a memory page limit,
// a fresh instance per call) and owns the plugin registry
// (content-addressed by SHA-256, stored through syncer.KV in
// syncer.KSPlugins), the fuel instrumenter (Instrument, CostTable), rule
// reference parsing (ParseRef), the structural pre-check of untrusted
// modules (wasmscan.go), chunked execution of fragments larger than the page
// limit (coordinate ranges, and chunked passes with a carried state for
// distance-based rules: chunked.go, ABI.md §6) and the built-in rules
// (package builtin), the worker processes that run calls out of process
// (worker_*.go: memfd arena, RLIMIT_AS, wall-clock kill, bounded pool;
// ABI.md §12), the call budgets (budget.go) and the compiled-module LRU
// (lru.go).
// The ABI is in ABI.md; package abi holds its manifest definitions,
// conformance the suite any plugin can be run against, buildtool the
// builder behind `tenzro plugin build`, sdk/ the C header and Go SDK.
package plugins
