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
// ABI.md §12), the call budgets (budget.go), the compiled-module LRU
// (lru.go), Engine.Finalize — a fragment's verifiers, aggregation and outer
// step in one call on blob files read in place (finalize*.go) — with the
// staging memory whose pages are mapped over large guest blocks instead of
// copying into fresh ones (feed.go, stage_linux.go), and the native fast
// path of the built-in Nesterov step, fuel for fuel (nesterov_native.go),
// and evaluators: Engine.Score runs a score plugin (ABI v3) on the round's
// start weights, one submission's gradient and batches of windows, and
// score_batches.go enumerates a corpus's training windows and draws the
// own-shard and control batches from chain randomness (score*.go,
// docs/protocol/scoring.md).
// The ABI is in ABI.md; package abi holds its manifest definitions,
// conformance the suite any plugin can be run against, buildtool the
// builder behind `tenzro plugin build`, sdk/ the C header and Go SDK.
package plugins
