package main

import (
	"os"
	"testing"

	"github.com/tenzro/train/plugins"
)

// TestMain lets the test binary serve as the wasm engine's plugin worker
// (`tenzro plugin run` starts workers by re-executing this executable).
func TestMain(m *testing.M) {
	plugins.ServeWorkerIfChild()
	os.Exit(m.Run())
}
