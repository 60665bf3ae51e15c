//go:build linux

package plugins

import "testing"

// scoreWorker is the shared out-of-process engine (worker_test.go).
func scoreWorker(t testing.TB) *Engine { return sharedWorkerEngine(t) }
