package enclave

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire/did"
)

// PurposeSyncerKey is the KeyReportData purpose of the syncer key evidence.
const PurposeSyncerKey = "syncer-signing-key"

const sealLabel = "tenzro/train/syncer-key/v1"

// KeyCustody holds the syncer's Ed25519 key inside the enclave. It
// implements syncer.Signer.
type KeyCustody struct {
	priv     ed25519.PrivateKey
	did      string
	evidence []byte
}

var _ syncer.Signer = (*KeyCustody)(nil)

// NewKeyCustody loads the sealed key at sealedPath, or generates one inside
// the enclave and seals it there (AES-256-GCM under the provider's sealing
// key; the clear key is never written). It then fetches evidence binding
// the public key: report data = attest.KeyReportData(PurposeSyncerKey, pub, nil).
func NewKeyCustody(ctx context.Context, p Provider, sealedPath string) (*KeyCustody, error) {
	sk, err := p.SealingKey(ctx, sealLabel)
	if err != nil {
		return nil, fmt.Errorf("key custody: %w", err)
	}
	var seed []byte
	sealed, err := os.ReadFile(sealedPath)
	switch {
	case err == nil:
		if seed, err = Open(sk, sealed, []byte(sealLabel)); err != nil {
			return nil, fmt.Errorf("key custody: unseal %s: %w", sealedPath, err)
		}
	case errors.Is(err, os.ErrNotExist):
		seed = make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, fmt.Errorf("key custody: %w", err)
		}
		blob, err := Seal(sk, seed, []byte(sealLabel))
		if err != nil {
			return nil, fmt.Errorf("key custody: %w", err)
		}
		f, err := os.OpenFile(sealedPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("key custody: %w", err)
		}
		if _, err := f.Write(blob); err != nil {
			f.Close()
			return nil, fmt.Errorf("key custody: %w", err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("key custody: %w", err)
		}
	default:
		return nil, fmt.Errorf("key custody: %w", err)
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("key custody: sealed seed is %d bytes", len(seed))
	}
	k, err := did.FromSeed(did.KindMachine, seed)
	if err != nil {
		return nil, err
	}
	ev, err := p.Evidence(ctx, attest.KeyReportData(PurposeSyncerKey, k.DID.Key, nil))
	if err != nil {
		return nil, fmt.Errorf("key custody: evidence: %w", err)
	}
	return &KeyCustody{priv: k.Priv, did: k.DID.String(), evidence: ev}, nil
}

// DID implements syncer.Signer.
func (k *KeyCustody) DID() string { return k.did }

// PublicKey returns the Ed25519 public key.
func (k *KeyCustody) PublicKey() ed25519.PublicKey { return k.priv.Public().(ed25519.PublicKey) }

// Sign implements syncer.Signer.
func (k *KeyCustody) Sign(ctx context.Context, msg []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return ed25519.Sign(k.priv, msg), nil
}

// Prove implements syncer.Signer: the ECVRF proof with the custody key.
func (k *KeyCustody) Prove(ctx context.Context, alpha []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return vrf.Prove(k.priv, alpha)
}

// Evidence implements syncer.Signer: the envelope binding the public key.
func (k *KeyCustody) Evidence() []byte { return k.evidence }

// Seal encrypts plaintext with AES-256-GCM under key; the output is
// nonce ‖ ciphertext.
func Seal(key, plaintext, aad []byte) ([]byte, error) {
	g, err := gcm(key)
	if err != nil {
		return nil, err
	}
	n := make([]byte, g.NonceSize())
	if _, err := rand.Read(n); err != nil {
		return nil, err
	}
	return g.Seal(n, n, plaintext, aad), nil
}

// Open reverses Seal.
func Open(key, sealed, aad []byte) ([]byte, error) {
	g, err := gcm(key)
	if err != nil {
		return nil, err
	}
	if len(sealed) < g.NonceSize()+g.Overhead() {
		return nil, errors.New("sealed blob too short")
	}
	return g.Open(nil, sealed[:g.NonceSize()], sealed[g.NonceSize():], aad)
}

func gcm(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("AES-256-GCM key is %d bytes, want 32", len(key))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}
