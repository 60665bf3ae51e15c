package enclave

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"

	"golang.org/x/crypto/hkdf"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/syncer"
)

// PurposeDatasetKey is the KeyReportData purpose of a dataset-key request.
const PurposeDatasetKey = "dataset-key-request"

const wrapInfo = "tenzro/train/dataset-key-wrap/v1"

// KeyRequest asks the broker for a dataset key. The evidence's report data
// must be attest.KeyReportData(PurposeDatasetKey, RecipientKey, Nonce),
// where Nonce was issued by the broker.
type KeyRequest struct {
	TaskID       string `json:"task_id"`
	Evidence     []byte `json:"evidence"`
	RecipientKey []byte `json:"recipient_key"` // X25519 public key, 32 bytes
	Nonce        []byte `json:"nonce"`
}

// WrappedKey is the dataset key wrapped to the recipient: X25519 with an
// ephemeral key, HKDF-SHA256 (salt = ephemeral ‖ recipient), AES-256-GCM.
type WrappedKey struct {
	EphemeralKey []byte `json:"ephemeral_key"`
	Sealed       []byte `json:"sealed"`
	EvidenceHash string `json:"evidence_digest"`
}

// Broker holds Confidential-tier dataset keys and releases each only to
// evidence that passes the task's policy.
type Broker struct {
	checker syncer.Attestor
	nonces  *attest.NonceStore
	keys    map[string]brokerKey
}

type brokerKey struct {
	key, policy []byte
	tier        string
}

// NewBroker returns a broker verifying with checker and issuing nonces from
// nonces.
func NewBroker(checker syncer.Attestor, nonces *attest.NonceStore) *Broker {
	return &Broker{checker: checker, nonces: nonces, keys: map[string]brokerKey{}}
}

// NewDatasetKey makes and holds a fresh AES-256 key for taskID.
func (b *Broker) NewDatasetKey(taskID, tier string, policy []byte) ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	b.keys[taskID] = brokerKey{key: k, policy: policy, tier: tier}
	return k, nil
}

// Nonce issues a single-use nonce for a key request on taskID.
func (b *Broker) Nonce(ctx context.Context, taskID string) ([]byte, error) {
	return b.nonces.Issue(ctx, "broker/"+taskID)
}

// Release verifies the request's evidence and returns the dataset key
// wrapped to the recipient key. A refusal names the failed check.
func (b *Broker) Release(ctx context.Context, req *KeyRequest) (*WrappedKey, error) {
	bk, ok := b.keys[req.TaskID]
	if !ok {
		return nil, syncer.Errf(syncer.KindNotFound, "key broker: no dataset key for task %q", req.TaskID)
	}
	if err := b.nonces.Consume(ctx, "broker/"+req.TaskID, req.Nonce); err != nil {
		return nil, syncer.Errf(syncer.KindAttestation, "attestation refused: check broker.nonce failed: %v", err)
	}
	rpub, err := ecdh.X25519().NewPublicKey(req.RecipientKey)
	if err != nil {
		return nil, syncer.Errf(syncer.KindInvalid, "key broker: recipient key: %v", err)
	}
	rd := attest.KeyReportData(PurposeDatasetKey, req.RecipientKey, req.Nonce)
	digest, err := b.checker.CheckEvidence(ctx, bk.tier, bk.policy, req.Evidence, rd)
	if err != nil {
		return nil, err
	}
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	shared, err := eph.ECDH(rpub)
	if err != nil {
		return nil, err
	}
	kek, err := deriveKEK(shared, eph.PublicKey().Bytes(), req.RecipientKey)
	if err != nil {
		return nil, err
	}
	sealed, err := Seal(kek, bk.key, []byte(req.TaskID))
	if err != nil {
		return nil, err
	}
	return &WrappedKey{EphemeralKey: eph.PublicKey().Bytes(), Sealed: sealed, EvidenceHash: digest.String()}, nil
}

// Unwrap is the enclave side: it opens a WrappedKey with the recipient's
// private key.
func Unwrap(priv *ecdh.PrivateKey, taskID string, w *WrappedKey) ([]byte, error) {
	epub, err := ecdh.X25519().NewPublicKey(w.EphemeralKey)
	if err != nil {
		return nil, fmt.Errorf("unwrap: %w", err)
	}
	shared, err := priv.ECDH(epub)
	if err != nil {
		return nil, fmt.Errorf("unwrap: %w", err)
	}
	kek, err := deriveKEK(shared, w.EphemeralKey, priv.PublicKey().Bytes())
	if err != nil {
		return nil, err
	}
	return Open(kek, w.Sealed, []byte(taskID))
}

func deriveKEK(shared, eph, recipient []byte) ([]byte, error) {
	k := make([]byte, 32)
	salt := append(append([]byte{}, eph...), recipient...)
	if _, err := io.ReadFull(hkdf.New(sha256.New, shared, salt, []byte(wrapInfo)), k); err != nil {
		return nil, err
	}
	return k, nil
}

// EncryptDataset encrypts a dataset with AES-256-GCM under key (the task
// id is the associated data).
func EncryptDataset(key []byte, taskID string, plaintext []byte) ([]byte, error) {
	return Seal(key, plaintext, []byte("dataset/"+taskID))
}

// DecryptDataset reverses EncryptDataset inside the enclave.
func DecryptDataset(key []byte, taskID string, ciphertext []byte) ([]byte, error) {
	return Open(key, ciphertext, []byte("dataset/"+taskID))
}
