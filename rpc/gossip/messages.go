package gossip

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Topic and protocol names (DESIGN §7).
const (
	// TopicTraining carries submission and fragment-payload announcements.
	TopicTraining = "tenzro/training/1.0.0"
	// TopicSyncer carries syncer status: round transitions and finality.
	TopicSyncer = "tenzro/training/syncer/1.0.0"
	// BlobProtocol is the stream protocol that moves payloads by hash:
	// ranges of a blob, so a broken transfer resumes (blob.go).
	BlobProtocol = "/tenzro/blob/2.0.0"
	// NonceProtocol is the request/response stream protocol by which a
	// light node obtains a trainer's attestation nonce from the syncer's node.
	NonceProtocol = "/tenzro/attest-nonce/1.0.0"
)

// Signing domains of the gossip messages signed by a syncer (see
// docs/protocol/gossip.md). Submission announcements reuse the submission
// signature (wire.DomainSubmission).
const (
	DomainSyncerStatus   = "tenzro/train/syncer-status/v1"
	DomainFragmentAnnoun = "tenzro/train/fragment-announce/v1"
)

// Message type tags: every gossip message is one JSON object whose "type"
// field says which of these it is.
const (
	TypeSubmission   = "submission"
	TypeFragment     = "fragment"
	TypeSyncerStatus = "syncer_status"
)

// Syncer statuses carried by SyncerStatus.Status.
const (
	SyncerAwaiting       = wire.StatusAwaiting  // run posted, waiting for trainers
	SyncerRunning        = wire.StatusRunning   // round Round is open
	SyncerRoundCommitted = "round_committed"    // round Round committed; ModelHash is the new model
	SyncerSealed         = wire.StatusSealed    // final: ModelHash is the final model
	SyncerCancelled      = wire.StatusCancelled // final: run cancelled
)

var syncerStatuses = map[string]bool{
	SyncerAwaiting: true, SyncerRunning: true, SyncerRoundCommitted: true, SyncerSealed: true, SyncerCancelled: true,
}

// MaxMessageSize bounds one gossip message's data. Announcements are a few
// hundred bytes; anything larger travels over BlobProtocol.
const MaxMessageSize = 4 << 10

// DefaultMaxBlob is Config.MaxBlob's default: 256 MiB, room for the seed's
// ~33 MB fragments of a 200M-parameter bf16 model and much larger ones.
const DefaultMaxBlob = 256 << 20

// taskIDRe mirrors the task-id rule of wire.ValidateSpec.
var taskIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

// SubmissionAnnouncement says that a trainer's outer gradient exists and can
// be fetched by PayloadHash from the announcing peer. Signature is the
// submission signature over wire.SubmissionPreimage, the very signature the
// OuterGradient carries, so it is verifiable without the payload.
type SubmissionAnnouncement struct {
	Type          string        `json:"type"`
	TaskID        string        `json:"task_id"`
	TrainerDID    string        `json:"trainer_did"`
	Round         uint64        `json:"round"`
	FragmentIndex uint64        `json:"fragment_index"`
	PayloadHash   wire.Hash     `json:"payload_hash"`
	PayloadSize   int64         `json:"payload_size"`
	ChainID       string        `json:"chain_id"`
	Signature     wire.HexBytes `json:"signature"`
	// Metrics are the submission's signed metrics (covered by Signature).
	Metrics wire.SubmissionMetrics `json:"metrics,omitempty"`
	// AttestationHash and AttestationSize name the submission's attestation
	// claim (Verified and Confidential tiers), fetched like the payload over
	// BlobProtocol by its content hash (wire.ContentHash). The claim is not under the trainer's
	// signature; its evidence binds the trainer DID and the round nonce, so
	// a relay cannot substitute evidence that passes.
	AttestationHash wire.Hash `json:"attestation_hash,omitzero"`
	AttestationSize int64     `json:"attestation_size,omitempty"`
}

// MaxAttestation bounds a forwarded attestation claim.
const MaxAttestation = 1 << 20

// AnnouncementFor builds the announcement of a submission.
func AnnouncementFor(g *wire.OuterGradient) SubmissionAnnouncement {
	a := SubmissionAnnouncement{
		Type:          TypeSubmission,
		TaskID:        g.TaskID,
		TrainerDID:    g.TrainerDID,
		Round:         g.Round,
		FragmentIndex: g.FragmentIndex,
		PayloadHash:   g.PayloadHash,
		PayloadSize:   int64(len(g.GradientPayload)),
		ChainID:       g.ChainID,
		Signature:     append(wire.HexBytes(nil), g.Signature...),
		Metrics:       g.Metrics,
	}
	if len(g.Attestation) > 0 {
		a.AttestationHash, a.AttestationSize = wire.ContentHash(g.Attestation), int64(len(g.Attestation))
	}
	return a
}

// Preimage is the submission's signing preimage (PROTOCOL §4).
func (a *SubmissionAnnouncement) Preimage() []byte {
	return wire.SubmissionPreimageWithMetrics(a.ChainID, a.TaskID, a.TrainerDID, a.Round, a.FragmentIndex, a.PayloadHash, a.Metrics)
}

// Verify checks the announcement's shape and signature. maxBlob bounds
// PayloadSize (≤ 0: no bound).
func (a *SubmissionAnnouncement) Verify(maxBlob int64) error {
	if a.Type != TypeSubmission {
		return fmt.Errorf("submission announcement: type %q, want %q", a.Type, TypeSubmission)
	}
	if err := checkTaskID(a.TaskID); err != nil {
		return fmt.Errorf("submission announcement: %w", err)
	}
	if a.FragmentIndex >= wire.MaxFragments {
		return fmt.Errorf("submission announcement: fragment_index %d, limit %d", a.FragmentIndex, wire.MaxFragments)
	}
	if a.Round > wire.MaxRounds {
		return fmt.Errorf("submission announcement: round %d, limit %d", a.Round, wire.MaxRounds)
	}
	if a.PayloadHash.IsZero() {
		return errors.New("submission announcement: payload_hash missing")
	}
	if len(a.ChainID) > wire.MaxChainIDLen {
		return fmt.Errorf("submission announcement: chain_id of %d bytes, limit %d", len(a.ChainID), wire.MaxChainIDLen)
	}
	if err := a.Metrics.Validate(); err != nil {
		return fmt.Errorf("submission announcement: %w", err)
	}
	if a.PayloadSize <= 0 {
		return fmt.Errorf("submission announcement: payload_size %d, want > 0", a.PayloadSize)
	}
	if maxBlob > 0 && a.PayloadSize > maxBlob {
		return fmt.Errorf("submission announcement: payload_size %d above this node's limit %d: %w", a.PayloadSize, maxBlob, errOverLocalLimit)
	}
	if a.AttestationHash.IsZero() != (a.AttestationSize == 0) || a.AttestationSize < 0 || a.AttestationSize > MaxAttestation {
		return fmt.Errorf("submission announcement: attestation_size %d with attestation_hash %s (want both or neither, size ≤ %d)", a.AttestationSize, a.AttestationHash, MaxAttestation)
	}
	if err := did.Verify(a.TrainerDID, a.Preimage(), a.Signature); err != nil {
		return fmt.Errorf("submission announcement from %s: %w", a.TrainerDID, err)
	}
	return nil
}

// SyncerStatus is a syncer's signed statement about a run: the round it is
// in, a round transition, or finality.
type SyncerStatus struct {
	Type      string        `json:"type"`
	TaskID    string        `json:"task_id"`
	Round     uint64        `json:"round"`
	Status    string        `json:"status"`
	ModelHash wire.Hash     `json:"model_hash"`
	SyncerDID string        `json:"syncer_did"`
	Signature wire.HexBytes `json:"signature"`
}

// Preimage is the signing preimage: Canon(DomainSyncerStatus) with task_id,
// round, status, model_hash, syncer_did in that order.
func (s *SyncerStatus) Preimage() []byte {
	return wire.NewCanon(DomainSyncerStatus).Str(s.TaskID).U64(s.Round).Str(s.Status).Hash(s.ModelHash).Str(s.SyncerDID).Out()
}

// Sign sets Type, SyncerDID and Signature using the syncer's key.
func (s *SyncerStatus) Sign(k *did.Key) {
	s.Type = TypeSyncerStatus
	s.SyncerDID = k.DID.String()
	s.Signature = k.Sign(s.Preimage())
}

// Verify checks the status's shape and signature. Whether SyncerDID is the
// elected syncer of the run is for the receiver to decide.
func (s *SyncerStatus) Verify() error {
	if s.Type != TypeSyncerStatus {
		return fmt.Errorf("syncer status: type %q, want %q", s.Type, TypeSyncerStatus)
	}
	if err := checkTaskID(s.TaskID); err != nil {
		return fmt.Errorf("syncer status: %w", err)
	}
	if s.Round > wire.MaxRounds {
		return fmt.Errorf("syncer status: round %d, limit %d", s.Round, wire.MaxRounds)
	}
	if !syncerStatuses[s.Status] {
		return fmt.Errorf("syncer status: unknown status %q", trunc(s.Status))
	}
	if err := did.Verify(s.SyncerDID, s.Preimage(), s.Signature); err != nil {
		return fmt.Errorf("syncer status from %s: %w", s.SyncerDID, err)
	}
	return nil
}

// FragmentAnnouncement says that a fragment's weights after a round can be
// fetched by WeightsHash from the announcing peer; signed by the syncer.
type FragmentAnnouncement struct {
	Type          string        `json:"type"`
	TaskID        string        `json:"task_id"`
	Round         uint64        `json:"round"`
	FragmentIndex uint64        `json:"fragment_index"`
	WeightsHash   wire.Hash     `json:"weights_hash"`
	PayloadSize   int64         `json:"payload_size"`
	SyncerDID     string        `json:"syncer_did"`
	Signature     wire.HexBytes `json:"signature"`
}

// Preimage is the signing preimage: Canon(DomainFragmentAnnoun) with
// task_id, round, fragment_index, weights_hash, payload_size, syncer_did.
func (f *FragmentAnnouncement) Preimage() []byte {
	return wire.NewCanon(DomainFragmentAnnoun).Str(f.TaskID).U64(f.Round).U64(f.FragmentIndex).
		Hash(f.WeightsHash).U64(uint64(f.PayloadSize)).Str(f.SyncerDID).Out()
}

// Sign sets Type, SyncerDID and Signature using the syncer's key.
func (f *FragmentAnnouncement) Sign(k *did.Key) {
	f.Type = TypeFragment
	f.SyncerDID = k.DID.String()
	f.Signature = k.Sign(f.Preimage())
}

// Verify checks shape and signature; maxBlob bounds PayloadSize (≤ 0: none).
func (f *FragmentAnnouncement) Verify(maxBlob int64) error {
	if f.Type != TypeFragment {
		return fmt.Errorf("fragment announcement: type %q, want %q", f.Type, TypeFragment)
	}
	if err := checkTaskID(f.TaskID); err != nil {
		return fmt.Errorf("fragment announcement: %w", err)
	}
	if f.FragmentIndex >= wire.MaxFragments || f.Round > wire.MaxRounds {
		return fmt.Errorf("fragment announcement: round %d / fragment_index %d out of range", f.Round, f.FragmentIndex)
	}
	if f.WeightsHash.IsZero() || f.PayloadSize <= 0 {
		return errors.New("fragment announcement: weights_hash and a positive payload_size are required")
	}
	if maxBlob > 0 && f.PayloadSize > maxBlob {
		return fmt.Errorf("fragment announcement: payload_size %d above this node's limit %d: %w", f.PayloadSize, maxBlob, errOverLocalLimit)
	}
	if err := did.Verify(f.SyncerDID, f.Preimage(), f.Signature); err != nil {
		return fmt.Errorf("fragment announcement from %s: %w", f.SyncerDID, err)
	}
	return nil
}

// errOverLocalLimit marks a message that is valid but exceeds this node's
// own MaxBlob: it is ignored, not rejected, so peers with a larger limit are
// not penalised for forwarding it.
var errOverLocalLimit = errors.New("over local limit")

func checkTaskID(id string) error {
	if len(id) == 0 || len(id) > wire.MaxTaskIDLen || !taskIDRe.MatchString(id) {
		return fmt.Errorf("task_id %q must be 1–%d characters of [A-Za-z0-9._:-] starting with a letter or digit", trunc(id), wire.MaxTaskIDLen)
	}
	return nil
}

func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Decode parses one gossip message strictly: at most MaxMessageSize bytes,
// exactly one JSON object, no unknown fields, a known "type". It returns a
// *SubmissionAnnouncement, *FragmentAnnouncement or *SyncerStatus. It checks
// syntax only; call the result's Verify.
func Decode(data []byte) (any, error) {
	if len(data) > MaxMessageSize {
		return nil, fmt.Errorf("gossip message: %d bytes, limit %d", len(data), MaxMessageSize)
	}
	var probe struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("gossip message: %w", err)
	}
	var v any
	switch probe.Type {
	case TypeSubmission:
		v = new(SubmissionAnnouncement)
	case TypeFragment:
		v = new(FragmentAnnouncement)
	case TypeSyncerStatus:
		v = new(SyncerStatus)
	default:
		return nil, fmt.Errorf("gossip message: unknown type %q", trunc(probe.Type))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return nil, fmt.Errorf("gossip %s message: %w", probe.Type, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("gossip %s message: trailing data after the object", probe.Type)
	}
	return v, nil
}

// encode renders a message, enforcing MaxMessageSize.
func encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode gossip message: %w", err)
	}
	if len(b) > MaxMessageSize {
		return nil, fmt.Errorf("encode gossip message: %d bytes, limit %d", len(b), MaxMessageSize)
	}
	return b, nil
}
