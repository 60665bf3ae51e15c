package syncer

import (
	"context"

	"github.com/tenzro/train/wire"
	"log/slog"
	"time"
)

// Signer holds the syncer's signing key. In every tier the key is born and
// kept inside the node's enclave (enclave package); Evidence binds its
// public key.
type Signer interface {
	// DID is the signer's did:tenzro identity.
	DID() string
	// Sign signs msg with Ed25519.
	Sign(ctx context.Context, msg []byte) ([]byte, error)
	// Evidence is the attestation evidence binding the key (nil when none).
	Evidence() []byte
	// Prove computes the RFC 9381 ECVRF-EDWARDS25519-SHA512-TAI proof for
	// alpha with the same key (used in the syncer election).
	Prove(ctx context.Context, alpha []byte) ([]byte, error)
}

// Config wires a Node.
type Config struct {
	KV KV
	// Blobs holds payloads, initial weights files and fragment weights
	// (store.Blobs, files under <data-dir>/blobs); nil keeps them in KV's
	// KSBlobs keyspace.
	Blobs    Blobs
	Engine   Engine
	Signer   Signer
	Attestor Attestor // nil: Verified/Confidential runs are refused
	// Nonces issues and consumes single-use round nonces for evidence
	// (attest.NonceStore); required with Attestor.
	Nonces NonceStore
	// DatasetKeys is the Confidential tier's key broker (enclave.Broker): at
	// posting it makes the run's dataset key, which only the sponsor receives
	// and only evidence passing the run's policy can later have released.
	DatasetKeys DatasetKeys
	// Dev enables the faucet and registers this node as the only syncer candidate.
	Dev    bool
	Role   string
	Clock  func() time.Time
	Logger *slog.Logger
	// Fees sets the burned posting and publication fees and the per-DID
	// rate limits (defaults when zero).
	Fees FeeConfig
	// UnbondingDelay is how long a withdrawn syncer stake stays locked in
	// its unbonding account (DefaultUnbondingDelay when 0).
	UnbondingDelay time.Duration
	// Announce, when set, is called after each round transition (gossip).
	Announce func(ctx context.Context, ev Event)
	// Observer, when set, receives round and fragment measurements (metrics).
	Observer Observer
}

// Event is a run transition worth telling peers about.
type Event struct {
	TaskID    string
	Kind      string // posted, round_committed, sealed, submission
	Round     uint64
	ModelHash wire.Hash
	Detail    any
}

// NonceStore issues single-use nonces per scope (attest.NonceStore).
type NonceStore interface {
	Issue(ctx context.Context, scope string) ([]byte, error)
	Consume(ctx context.Context, scope string, nonce []byte) error
}

// DatasetKeys creates a Confidential run's dataset key (enclave.Broker): the
// key for the sponsor and a record sealed to the broker's enclave, which the
// node stores in the posting's batch (DatasetKeyRecord reads it back). A
// non-nil key is the sponsor's own (32 bytes) and is sealed instead of a
// fresh one.
type DatasetKeys interface {
	NewDatasetKey(taskID, tier string, policy, key []byte) (k, sealed []byte, err error)
}

func datasetKeyKey(task string) []byte { return []byte("dskey/" + task) }

// DatasetKeyRecord returns the sealed dataset-key record stored with a
// Confidential run (the key broker's enclave.KeyRecords).
func DatasetKeyRecord(ctx context.Context, kv KV, taskID string) ([]byte, error) {
	return kv.Get(ctx, KSMeta, datasetKeyKey(taskID))
}
