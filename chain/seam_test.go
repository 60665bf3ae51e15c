package chain

import "github.com/tenzro/train/syncer"

// The chain serves the node through syncer.Chain without importing syncer:
// these assertions keep the two in step.
var (
	_ syncer.Chain = (*Manual)(nil)
	_ syncer.Chain = (*Local)(nil)
)
