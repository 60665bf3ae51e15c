package enclave

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/hkdf"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/machine"
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

// Broker makes Confidential-tier dataset keys and releases each only to
// evidence that passes the task's policy. It keeps no key in memory: each
// task's key lives in a record sealed (AES-256-GCM) under the broker's
// sealing key, which the caller stores atomically with the run and the
// broker reads back through records, so keys survive restarts and the
// broker is safe for concurrent use.
type Broker struct {
	checker syncer.Attestor
	nonces  *attest.NonceStore
	sealing []byte
	records KeyRecords
}

// KeyRecords returns the sealed key record stored for a task, or an error
// wrapping syncer.ErrNotFound.
type KeyRecords func(ctx context.Context, taskID string) ([]byte, error)

type brokerKey struct {
	Key    []byte `json:"key"`
	Policy []byte `json:"policy"`
	Tier   string `json:"tier"`
}

// NewBroker returns a broker verifying with checker, issuing nonces from
// nonces, sealing records under sealingKey (32 bytes, from the enclave's
// SealingKey) and reading them through records.
func NewBroker(checker syncer.Attestor, nonces *attest.NonceStore, sealingKey []byte, records KeyRecords) (*Broker, error) {
	if len(sealingKey) != 32 {
		return nil, fmt.Errorf("key broker: sealing key is %d bytes, want 32", len(sealingKey))
	}
	if records == nil {
		return nil, errors.New("key broker: no record reader")
	}
	return &Broker{checker: checker, nonces: nonces, sealing: append([]byte(nil), sealingKey...), records: records}, nil
}

func recordAAD(taskID string) []byte { return []byte("tenzro/train/broker-record/v1/" + taskID) }

// NewDatasetKey makes a fresh AES-256 key for taskID, or takes the sponsor's
// own when key is non-nil (it must be 32 bytes), and returns it with its
// sealed record, which the caller must store (with the run, in one batch).
func (b *Broker) NewDatasetKey(taskID, tier string, policy, key []byte) (k, sealed []byte, err error) {
	if key != nil {
		if len(key) != 32 {
			return nil, nil, fmt.Errorf("key broker: a dataset key is 32 bytes (AES-256), got %d", len(key))
		}
		k = append([]byte(nil), key...)
	} else {
		k = make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return nil, nil, err
		}
	}
	raw, err := json.Marshal(brokerKey{Key: k, Policy: policy, Tier: tier})
	if err != nil {
		return nil, nil, err
	}
	sealed, err = Seal(b.sealing, raw, recordAAD(taskID))
	if err != nil {
		return nil, nil, fmt.Errorf("key broker: seal record: %w", err)
	}
	return k, sealed, nil
}

func (b *Broker) load(ctx context.Context, taskID string) (*brokerKey, error) {
	sealed, err := b.records(ctx, taskID)
	if errors.Is(err, machine.ErrNotFound) {
		return nil, machine.Errf(machine.KindNotFound, "key broker: no dataset key for task %q", taskID)
	}
	if err != nil {
		return nil, fmt.Errorf("key broker: read record of %q: %w", taskID, err)
	}
	raw, err := Open(b.sealing, sealed, recordAAD(taskID))
	if err != nil {
		return nil, fmt.Errorf("key broker: record of %q does not open under this enclave's sealing key: %w", taskID, err)
	}
	var bk brokerKey
	if err := json.Unmarshal(raw, &bk); err != nil {
		return nil, fmt.Errorf("key broker: record of %q: %w", taskID, err)
	}
	return &bk, nil
}

// Nonce issues a single-use nonce for a key request on taskID.
func (b *Broker) Nonce(ctx context.Context, taskID string) ([]byte, error) {
	return b.nonces.Issue(ctx, "broker/"+taskID)
}

// Release verifies the request's evidence and returns the dataset key
// wrapped to the recipient key. A refusal names the failed check.
func (b *Broker) Release(ctx context.Context, req *KeyRequest) (*WrappedKey, error) {
	bk, err := b.load(ctx, req.TaskID)
	if err != nil {
		return nil, err
	}
	if err := b.nonces.Consume(ctx, "broker/"+req.TaskID, req.Nonce); err != nil {
		return nil, machine.Errf(machine.KindAttestation, "attestation refused: check broker.nonce failed: %v", err)
	}
	rpub, err := ecdh.X25519().NewPublicKey(req.RecipientKey)
	if err != nil {
		return nil, machine.Errf(machine.KindInvalid, "key broker: recipient key: %v", err)
	}
	rd := attest.KeyReportData(PurposeDatasetKey, req.RecipientKey, req.Nonce)
	digest, err := b.checker.CheckEvidence(ctx, bk.Tier, bk.Policy, req.Evidence, rd)
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
	sealed, err := Seal(kek, bk.Key, []byte(req.TaskID))
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
