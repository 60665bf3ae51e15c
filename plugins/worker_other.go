//go:build !linux

package plugins

import (
	"context"
	"errors"

	"github.com/tenzro/train/syncer"
)

// Plugin workers need Linux (memfd, SCM_RIGHTS, RLIMIT_AS): elsewhere an
// engine runs its calls in process only.

// ServeWorkerIfChild returns at once: there are no workers on this system.
func ServeWorkerIfChild() {}

type pool struct{}

func (*pool) close() {}

var errNoWorkers = errors.New("plugins: worker processes need Linux (memfd); run with Workers = 0")

func newEngineWorkers(*Engine) (*pool, error) { return nil, errNoWorkers }

func (e *Engine) prepareRemote(context.Context, []byte, *Manifest) (*plugin, error) {
	return nil, errNoWorkers
}

func (e *Engine) remoteAggregate(context.Context, *plugin, syncer.AggregateInput) (syncer.AggregateOutput, error) {
	return syncer.AggregateOutput{}, errNoWorkers
}

func (e *Engine) remoteVerify(context.Context, *plugin, syncer.VerifyInput) (syncer.VerifyOutput, error) {
	return syncer.VerifyOutput{}, errNoWorkers
}

func (e *Engine) remoteOuter(context.Context, *plugin, syncer.OuterStepInput, int) (syncer.OuterStepOutput, error) {
	return syncer.OuterStepOutput{}, errNoWorkers
}

func (e *Engine) remoteDecode(context.Context, *plugin, syncer.DecodeInput) (syncer.DecodeOutput, error) {
	return syncer.DecodeOutput{}, errNoWorkers
}

func (e *Engine) remoteFinalize(ctx context.Context, in syncer.FinalizeInput, _ int64) (syncer.FinalizeOutput, error) {
	return e.finalizeInProcess(ctx, in)
}
