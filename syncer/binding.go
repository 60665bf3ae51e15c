package syncer

import (
	"errors"
	"fmt"

	"github.com/tenzro/train/wire/safetensors"
)

// Payload binding (issue 23, docs/protocol/safetensors.md §6): an
// outer-gradient payload names its trainer, task, round and fragment in its
// own __metadata__, which the content hash and so the trainer's signature
// cover. Signing another trainer's payload hash ("copy by hash"), replaying
// one's own payload of an earlier round and moving a payload to another
// fragment are all refused by this one check; a byte copy must be
// re-encoded (and is then judged by the copy rule, copies.go).

// checkPayloadBinding says why payload is not bound to (task, trainer,
// round, fragment), or nil when it is. It reads the header only.
func checkPayloadBinding(payload []byte, task, trainer string, round, fragment uint64) error {
	want := safetensors.Binding{Trainer: trainer, Task: task, Round: round, Fragment: fragment}
	err := safetensors.CheckBinding(payload, want, safetensors.DefaultLimits)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, safetensors.ErrUnbound):
		return fmt.Errorf("payload binding: the payload's __metadata__ does not name its trainer, task, round and fragment (%s, %s, %s, %s); tenzro train submit-gradient adds them",
			safetensors.MetaTrainer, safetensors.MetaTask, safetensors.MetaRound, safetensors.MetaFragment)
	default:
		return fmt.Errorf("payload binding: %w", err)
	}
}
