//go:build tools

// Package deps pins, in go.mod, the modules that this round of work builds on
// before any package imports them: BLAKE3 (the bulk content hash, issue 10).
// The build tag keeps it out of every binary; `go mod tidy`
// still sees it, so the pinned versions stay put. Delete a line here once a real
// package imports that module.
package deps

import (
	_ "lukechampine.com/blake3"
)
