//go:build linux

package plugins

import "testing"

// scoreWorker is the shared out-of-process engine (worker_test.go).
func scoreWorker(t testing.TB) *Engine { return sharedWorkerEngine(t) }

// fuelWorker is an out-of-process engine of its own with cfg.
func fuelWorker(t testing.TB, cfg Config) *Engine { return workerEngine(t, cfg) }
