//go:build !linux

package plugins

import "testing"

// scoreWorker: no worker processes off Linux.
func scoreWorker(testing.TB) *Engine { return nil }
