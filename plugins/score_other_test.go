//go:build !linux

package plugins

import "testing"

// scoreWorker: no worker processes off Linux.
func scoreWorker(testing.TB) *Engine { return nil }

// fuelWorker: no worker processes off Linux.
func fuelWorker(testing.TB, Config) *Engine { return nil }
