package plugins

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as its own plugin worker: an engine
// with Workers > 0 re-executes it with WorkerEnv set (workerEngine), so
// `go test ./plugins/` needs no node binary.
func TestMain(m *testing.M) {
	ServeWorkerIfChild()
	os.Exit(m.Run())
}
