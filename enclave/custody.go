package enclave

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
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
//
// Two modes: sealed, where the TEE derives a sealing key (SEV-SNP, the
// simulated provider) and the key survives restarts as an AES-256-GCM blob
// only the same enclave opens; and ephemeral, where the TEE has no local
// sealing primitive (TDX, Nitro: SealingKey fails with ErrNoLocalSealing)
// and the key lives only in the enclave's memory: a restart births a new
// key, so a new syncer DID.
type KeyCustody struct {
	priv     ed25519.PrivateKey
	did      string
	evidence []byte
	sealed   bool
}

var _ syncer.Signer = (*KeyCustody)(nil)

// CustodyOptions tunes NewKeyCustodyWith.
type CustodyOptions struct {
	// Logger receives the custody mode and, in ephemeral mode, the DID
	// change; nil is slog.Default().
	Logger *slog.Logger
	// PreviousDID is the syncer DID this node used before this start
	// (known to the node's store, not to the enclave). In ephemeral mode a
	// different new DID is logged as a change of the syncer's identity.
	PreviousDID string
}

// NewKeyCustody is NewKeyCustodyWith with default options.
func NewKeyCustody(ctx context.Context, p Provider, sealedPath string) (*KeyCustody, error) {
	return NewKeyCustodyWith(ctx, p, sealedPath, CustodyOptions{})
}

// NewKeyCustodyWith creates the custody of the syncer key.
//
// Sealed mode (p.SealingKey works): it loads the sealed key at sealedPath,
// or generates one inside the enclave and seals it there (AES-256-GCM
// under the provider's sealing key; the clear key is never written).
//
// Ephemeral mode (p.SealingKey fails with ErrNoLocalSealing, as on TDX and
// Nitro): it generates the key in enclave memory and writes nothing; the
// key dies with the process. Any other SealingKey failure is an error: a
// TEE that can seal must not silently fall back to a new key.
//
// Either way it then fetches evidence binding the public key: report
// data = attest.KeyReportData(PurposeSyncerKey, pub, nil).
func NewKeyCustodyWith(ctx context.Context, p Provider, sealedPath string, opts CustodyOptions) (*KeyCustody, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var (
		seed   []byte
		sealed bool
	)
	sk, err := p.SealingKey(ctx, sealLabel)
	switch {
	case err == nil:
		if seed, err = sealedSeed(sk, sealedPath); err != nil {
			return nil, err
		}
		sealed = true
	case errors.Is(err, ErrNoLocalSealing):
		seed = make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, fmt.Errorf("key custody: %w", err)
		}
		if _, serr := os.Stat(sealedPath); serr == nil {
			log.Warn("a sealed syncer key exists but this TEE cannot open it (no local sealing): left untouched, not used", "vendor", p.Vendor(), "path", sealedPath)
		}
	default:
		return nil, fmt.Errorf("key custody: %w", err)
	}
	k, err := did.FromSeed(did.KindMachine, seed)
	clear(seed)
	if err != nil {
		return nil, fmt.Errorf("key custody: %w", err)
	}
	ev, err := p.Evidence(ctx, attest.KeyReportData(PurposeSyncerKey, k.DID.Key, nil))
	if err != nil {
		return nil, fmt.Errorf("key custody: evidence: %w", err)
	}
	kc := &KeyCustody{priv: k.Priv, did: k.DID.String(), evidence: ev, sealed: sealed}
	if !sealed {
		log.Warn("ephemeral syncer key: this TEE has no local sealing primitive, the key lives in enclave memory only and a restart gives a new syncer DID",
			"vendor", p.Vendor(), "did", kc.did)
		if opts.PreviousDID != "" && opts.PreviousDID != kc.did {
			log.Warn("syncer DID changed at this start (ephemeral key custody): receipts signed before name the previous DID",
				"previous_did", opts.PreviousDID, "did", kc.did)
		}
	}
	return kc, nil
}

// sealedSeed opens the seed sealed at path under sk, or generates a seed
// and writes it there sealed (created exclusively, mode 0600).
func sealedSeed(sk []byte, path string) ([]byte, error) {
	blob, err := os.ReadFile(path)
	switch {
	case err == nil:
		seed, err := Open(sk, blob, []byte(sealLabel))
		if err != nil {
			return nil, fmt.Errorf("key custody: unseal %s: %w", path, err)
		}
		if len(seed) != ed25519.SeedSize {
			clear(seed)
			return nil, fmt.Errorf("key custody: sealed seed is %d bytes", len(seed))
		}
		return seed, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("key custody: %w", err)
	}
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, fmt.Errorf("key custody: %w", err)
	}
	if blob, err = Seal(sk, seed, []byte(sealLabel)); err != nil {
		return nil, fmt.Errorf("key custody: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
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
	return seed, nil
}

// Sealed reports the custody mode: true when the key is sealed to the TEE
// and survives restarts, false when it is ephemeral (held in enclave
// memory only; a restart gives a new key and DID).
func (k *KeyCustody) Sealed() bool { return k.sealed }

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
