package attest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenzro/train/wire"
)

// Domains of the binding.
const (
	DomainAttest    = wire.DomainAttest
	DomainAttestKey = "tenzro/train/attest/key/v1"
)

// ReportData is the Verified-tier binding: SHA-256 of the canonical
// length-prefixed encoding of the domain "tenzro/train/attest/v2", the
// program hash, the shard, the model hash, the trainer DID, the round nonce
// and the payload hash (the gradient the evidence accompanies; zero for an
// enrolment). TDX and SNP carry it in the first 32 bytes of the 64-byte
// REPORTDATA (the rest zero); Nitro carries it as user_data (and nonce).
func ReportData(programHash wire.Hash, shard uint64, modelHash wire.Hash, trainerDID string, roundNonce []byte, payload wire.Hash) wire.Hash {
	return wire.AttestReportData(programHash, shard, modelHash, trainerDID, roundNonce, payload)
}

// KeyReportData binds a public key to evidence: SHA-256 of the canonical
// encoding of "tenzro/train/attest/key/v1", a purpose (for example
// "syncer-signing-key" or "dataset-key-request"), the key bytes and a
// nonce (may be empty).
func KeyReportData(purpose string, publicKey, nonce []byte) wire.Hash {
	return wire.NewCanon(DomainAttestKey).Str(purpose).Bytes(publicKey).Bytes(nonce).Sum()
}

// NonceSize is the size of a round nonce.
const NonceSize = 32

// Errors of the nonce store.
var (
	ErrNonceUnknown = errors.New("nonce unknown, expired or already used")
)

// NonceBackend persists nonces; the lead can back it with syncer.KV. Put
// stores a nonce with its expiry; Take deletes it and returns its expiry,
// atomically (ok false when absent).
type NonceBackend interface {
	Put(ctx context.Context, scope string, nonce []byte, expires time.Time) error
	Take(ctx context.Context, scope string, nonce []byte) (expires time.Time, ok bool, err error)
}

// NonceStore issues single-use round nonces. Scope ties a nonce to its use
// (e.g. task id, trainer DID and round).
type NonceStore struct {
	backend NonceBackend
	ttl     time.Duration
	clock   func() time.Time
}

// NewNonceStore returns a store over backend (nil: in memory) whose nonces
// live ttl, on clock (nil: time.Now).
func NewNonceStore(backend NonceBackend, ttl time.Duration, clock func() time.Time) *NonceStore {
	if backend == nil {
		backend = NewMemoryNonces()
	}
	if clock == nil {
		clock = time.Now
	}
	if ttl <= 0 {
		ttl = 10 * time.Minute
	}
	return &NonceStore{backend: backend, ttl: ttl, clock: clock}
}

// Issue returns a fresh random nonce for scope.
func (s *NonceStore) Issue(ctx context.Context, scope string) ([]byte, error) {
	n := make([]byte, NonceSize)
	if _, err := rand.Read(n); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	if err := s.backend.Put(ctx, scope, n, s.clock().Add(s.ttl)); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	return n, nil
}

// Consume uses a nonce once: it fails for an unknown, expired or replayed
// nonce.
func (s *NonceStore) Consume(ctx context.Context, scope string, nonce []byte) error {
	exp, ok, err := s.backend.Take(ctx, scope, nonce)
	if err != nil {
		return fmt.Errorf("nonce: %w", err)
	}
	if !ok {
		return ErrNonceUnknown
	}
	if s.clock().After(exp) {
		return fmt.Errorf("%w (expired %s)", ErrNonceUnknown, exp.Format(time.RFC3339))
	}
	return nil
}

// MemoryNonces is an in-memory NonceBackend.
type MemoryNonces struct {
	mu sync.Mutex
	m  map[string]time.Time
}

// NewMemoryNonces returns an empty in-memory backend.
func NewMemoryNonces() *MemoryNonces { return &MemoryNonces{m: map[string]time.Time{}} }

func key(scope string, nonce []byte) string {
	return string(wire.NewCanon("nonce").Str(scope).Bytes(nonce).Out())
}

// Put implements NonceBackend.
func (m *MemoryNonces) Put(_ context.Context, scope string, nonce []byte, exp time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Drop expired entries so the map stays bounded.
	for k, e := range m.m {
		if time.Now().After(e.Add(24 * time.Hour)) {
			delete(m.m, k)
		}
	}
	m.m[key(scope, nonce)] = exp
	return nil
}

// Take implements NonceBackend.
func (m *MemoryNonces) Take(_ context.Context, scope string, nonce []byte) (time.Time, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(scope, nonce)
	e, ok := m.m[k]
	delete(m.m, k)
	return e, ok, nil
}

// Domains of the composite CPU + GPU binding (docs/protocol/attestation-gpu.md).
const (
	DomainGPUNonce  = "tenzro/train/attest/gpu-nonce/v1"
	DomainGPUReport = "tenzro/train/attest/gpu-report/v1"
)

// GPUNonce is the nonce a Verified trainer's GPU report carries: SHA-256 of
// the canonical encoding of DomainGPUNonce and the 32-byte binding rd
// (ReportData: program, shard, model, trainer DID, round nonce), so the GPU
// report is as fresh and as specific as the CPU quote.
func GPUNonce(rd wire.Hash) wire.Hash {
	return wire.NewCanon(DomainGPUNonce).Hash(rd).Sum()
}

// GPUReportHash commits to a GPU report's exact bytes (request ‖
// response, signature included): SHA-256 of the canonical encoding of
// DomainGPUReport and the report.
func GPUReportHash(report []byte) wire.Hash {
	return wire.NewCanon(DomainGPUReport).Bytes(report).Sum()
}

// CompositeReportData is the 64-byte CPU REPORTDATA of composite evidence:
// rd ‖ GPUReportHash(report). (Without a GPU the second half is zero.)
func CompositeReportData(rd wire.Hash, report []byte) [64]byte {
	var out [64]byte
	copy(out[:32], rd[:])
	h := GPUReportHash(report)
	copy(out[32:], h[:])
	return out
}
