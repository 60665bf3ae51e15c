package plugins

import (
	"context"

	"github.com/tenzro/train/syncer"
)

// Finalize implements syncer.Engine through the separate calls (for now).
func (e *Engine) Finalize(ctx context.Context, in syncer.FinalizeInput) (syncer.FinalizeOutput, error) {
	return syncer.FinalizeBySteps(ctx, e, in)
}
