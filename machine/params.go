package machine

import (
	"math/big"
	"time"
)

// Posting a run and publishing a plugin each cost a flat fee that is burned
// (moved to the issuer account, out of circulation), and each is limited
// per DID (see RATIONALE "core: posting and publishing cost a burned fee").
// A refused request pays nothing.
var (
	// DefaultPostingFee is burned at each accepted postTask (attoTNZO).
	DefaultPostingFee = big.NewInt(1_000_000_000)
	// DefaultPublishFee is burned at each accepted plugin publication.
	DefaultPublishFee = big.NewInt(1_000_000_000)
)

// Limits on external inputs handled by the node.
const (
	MaxPayloadBytes = 1 << 30 // one submission's safetensors payload
	MaxInitWeights  = 4 << 30
)

// Cancellation reasons recorded in the run.
const (
	CancelBySponsor = "cancelled by the sponsor before the run started"
	CancelExpired   = "expired: the enrolment window passed before the run could start"
)

// DefaultUnbondingDelay is how long a withdrawn syncer stake stays locked
// when the genesis sets no delay: long enough that a syncer cannot
// misbehave in a round and take its stake out before a challenge could
// reach it.
const DefaultUnbondingDelay = 7 * 24 * time.Hour

// FiniteVerifier is the verifier every run has, whatever its spec lists
// (DESIGN §4.2): a NaN or Inf coordinate would make every robust rule's
// answer depend on where it sits, and a Mean of it poisons the weights.
const FiniteVerifier = "Finite"
