package plugins

import (
	"os"
	"testing"

	wasm "github.com/tenzro/train/plugins"
)

// TestMain lets the benchmark binary serve as its own plugin worker
// (BenchmarkFinalize runs the engine with workers, as the node does).
func TestMain(m *testing.M) {
	wasm.ServeWorkerIfChild()
	os.Exit(m.Run())
}
