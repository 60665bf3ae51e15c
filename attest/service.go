package attest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// EvidenceRecord is what the evidence store keeps per digest.
type EvidenceRecord struct {
	TaskID   string          `json:"task_id"`
	DID      string          `json:"did"`
	Vendor   string          `json:"vendor"`
	Envelope json.RawMessage `json:"envelope"`
	StoredAt int64           `json:"stored_at"` // unix seconds
}

// EvidenceStore keeps submitted evidence by digest.
type EvidenceStore interface {
	PutEvidence(ctx context.Context, digest wire.Hash, rec *EvidenceRecord) error
	// GetEvidence returns the record or an error wrapping syncer.ErrNotFound.
	GetEvidence(ctx context.Context, digest wire.Hash) (*EvidenceRecord, error)
}

// kvPrefix is the key prefix of evidence records in syncer.KSEvidence (the
// syncer keeps equivocation evidence under "equivocation/" there).
const kvPrefix = "attest/"

// KVEvidence is an EvidenceStore on a syncer.KV, keyspace KSEvidence, key
// "attest/" ‖ digest, value the record as JSON.
type KVEvidence struct{ KV machine.KV }

// PutEvidence implements EvidenceStore (one synced batch).
func (s KVEvidence) PutEvidence(ctx context.Context, digest wire.Hash, rec *EvidenceRecord) error {
	v, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("evidence store: %w", err)
	}
	var b machine.Batch
	b.Set(machine.KSEvidence, append([]byte(kvPrefix), digest[:]...), v)
	if err := s.KV.Commit(ctx, &b); err != nil {
		return fmt.Errorf("evidence store: %w", err)
	}
	return nil
}

// GetEvidence implements EvidenceStore.
func (s KVEvidence) GetEvidence(ctx context.Context, digest wire.Hash) (*EvidenceRecord, error) {
	v, err := s.KV.Get(ctx, machine.KSEvidence, append([]byte(kvPrefix), digest[:]...))
	if err != nil {
		return nil, fmt.Errorf("evidence %s: %w", digest, err)
	}
	var rec EvidenceRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, fmt.Errorf("evidence %s: stored record: %w", digest, err)
	}
	return &rec, nil
}

// Service is what the RPC layer serves as tenzro_attest_*: round nonces,
// evidence submission and retrieval by digest, and policy templates.
//
// Nonces are issued in the scope the syncer consumes them in (task id "/"
// trainer DID), so a nonce from Service.Nonce is the one a trainer's next
// enrolment or submission binds. Submitted evidence is parsed and stored,
// not judged: its policy and binding are checked where they are known, in
// syncer (Attestor.CheckEvidence) and the key broker.
type Service struct {
	nonces *NonceStore
	store  EvidenceStore
	clock  func() time.Time
}

// NewService returns a Service issuing nonces from nonces and keeping
// evidence in store (KVEvidence{kv} for the node's database); clock nil is
// time.Now.
func NewService(nonces *NonceStore, store EvidenceStore, clock func() time.Time) *Service {
	if clock == nil {
		clock = time.Now
	}
	return &Service{nonces: nonces, store: store, clock: clock}
}

// NonceScope is the scope of a trainer's round nonce (the syncer's).
func NonceScope(taskID, did string) string { return taskID + "/" + did }

// Size limits on identifiers.
const (
	maxTaskID = 256
	maxDID    = 256
)

func checkIDs(taskID, did string) error {
	if taskID == "" || len(taskID) > maxTaskID {
		return machine.Errf(machine.KindInvalid, "task_id must be 1..%d bytes", maxTaskID)
	}
	if did == "" || len(did) > maxDID {
		return machine.Errf(machine.KindInvalid, "did must be 1..%d bytes", maxDID)
	}
	return nil
}

// Nonce issues a single-use nonce for the trainer did on task taskID.
func (s *Service) Nonce(ctx context.Context, taskID, did string) ([]byte, error) {
	if err := checkIDs(taskID, did); err != nil {
		return nil, err
	}
	return s.nonces.Issue(ctx, NonceScope(taskID, did))
}

// SubmitEvidence parses an envelope strictly and stores it by its digest
// (Digest(vendor, evidence), the value receipts carry). Submitting the same
// evidence again returns the same digest.
func (s *Service) SubmitEvidence(ctx context.Context, taskID, did string, envelope []byte) (wire.Hash, error) {
	if err := checkIDs(taskID, did); err != nil {
		return wire.Hash{}, err
	}
	env, err := ParseEnvelope(envelope)
	if err != nil {
		return wire.Hash{}, machine.Errf(machine.KindInvalid, "%v", err)
	}
	d := EnvelopeDigest(env)
	rec := &EvidenceRecord{TaskID: taskID, DID: did, Vendor: env.Vendor, Envelope: env.Marshal(), StoredAt: s.clock().Unix()}
	if err := s.store.PutEvidence(ctx, d, rec); err != nil {
		return wire.Hash{}, err
	}
	return d, nil
}

// GetEvidence returns the stored envelope with that digest (a syncer.Error
// of KindNotFound when there is none).
func (s *Service) GetEvidence(ctx context.Context, digest wire.Hash) ([]byte, error) {
	rec, err := s.store.GetEvidence(ctx, digest)
	if errors.Is(err, machine.ErrNotFound) {
		return nil, machine.Errf(machine.KindNotFound, "no evidence with digest %s", digest)
	}
	if err != nil {
		return nil, err
	}
	return rec.Envelope, nil
}

// Policy returns the policy template for a tier ("Verified",
// "Confidential") and vendor ("tdx", "snp", "nitro") as JSON.
func (s *Service) Policy(_ context.Context, tier, vendor string) ([]byte, error) {
	if tier != wire.TierVerified && tier != wire.TierConfidential {
		return nil, machine.Errf(machine.KindInvalid, "tier %q (want %s or %s)", tier, wire.TierVerified, wire.TierConfidential)
	}
	p, err := Template(tier, vendor)
	if err != nil {
		return nil, machine.Errf(machine.KindInvalid, "%v", err)
	}
	return json.MarshalIndent(p, "", "  ")
}
