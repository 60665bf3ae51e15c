// Package did implements the protocol's self-certifying identities:
// did:tenzro:<human|machine>:<multibase key>, where the key part is the
// base58btc multibase ('z') encoding of the multicodec ed25519-pub prefix
// (0xed 0x01) followed by the 32-byte Ed25519 public key. A DID resolves to
// its key without any registry. It also holds the key-file format the CLI
// and the trainer share.
package did

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mr-tron/base58"
)

// Kinds of identity.
const (
	KindHuman   = "human"
	KindMachine = "machine"
)

const prefix = "did:tenzro:"

// MaxLen bounds the length of a DID string accepted from outside.
const MaxLen = 128

var multicodecEd25519 = []byte{0xed, 0x01}

// DID is a parsed identity.
type DID struct {
	Kind string
	Key  ed25519.PublicKey
}

// String renders the DID.
func (d DID) String() string {
	return prefix + d.Kind + ":z" + base58.Encode(append(append([]byte{}, multicodecEd25519...), d.Key...))
}

// New builds the DID of a public key.
func New(kind string, pub ed25519.PublicKey) (DID, error) {
	if kind != KindHuman && kind != KindMachine {
		return DID{}, fmt.Errorf("did kind %q: want %q or %q", kind, KindHuman, KindMachine)
	}
	if len(pub) != ed25519.PublicKeySize {
		return DID{}, fmt.Errorf("did: public key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	return DID{Kind: kind, Key: append(ed25519.PublicKey{}, pub...)}, nil
}

// Parse resolves a DID string to its kind and key. It is strict: the
// encoding must round-trip to exactly the same string.
func Parse(s string) (DID, error) {
	if len(s) > MaxLen {
		return DID{}, fmt.Errorf("did: %d bytes, limit %d", len(s), MaxLen)
	}
	if !strings.HasPrefix(s, prefix) {
		return DID{}, fmt.Errorf("did %q: must start with %q", s, prefix)
	}
	rest := s[len(prefix):]
	kind, mb, ok := strings.Cut(rest, ":")
	if !ok {
		return DID{}, fmt.Errorf("did %q: want did:tenzro:<human|machine>:<multibase key>", s)
	}
	if kind != KindHuman && kind != KindMachine {
		return DID{}, fmt.Errorf("did %q: kind %q is neither %q nor %q", s, kind, KindHuman, KindMachine)
	}
	if !strings.HasPrefix(mb, "z") {
		return DID{}, fmt.Errorf("did %q: key must be multibase base58btc (prefix 'z')", s)
	}
	raw, err := base58.Decode(mb[1:])
	if err != nil {
		return DID{}, fmt.Errorf("did %q: key: %w", s, err)
	}
	if len(raw) != 2+ed25519.PublicKeySize || raw[0] != multicodecEd25519[0] || raw[1] != multicodecEd25519[1] {
		return DID{}, fmt.Errorf("did %q: key is not a multicodec ed25519-pub key", s)
	}
	d := DID{Kind: kind, Key: ed25519.PublicKey(raw[2:])}
	if d.String() != s {
		return DID{}, fmt.Errorf("did %q: non-canonical encoding", s)
	}
	return d, nil
}

// Verify checks sig over msg against the key the DID resolves to.
func Verify(didStr string, msg, sig []byte) error {
	d, err := Parse(didStr)
	if err != nil {
		return err
	}
	if len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("signature is %d bytes, want %d", len(sig), ed25519.SignatureSize)
	}
	if !ed25519.Verify(d.Key, msg, sig) {
		return ErrBadSignature
	}
	return nil
}

// ErrBadSignature is returned when a signature does not verify.
var ErrBadSignature = errors.New("signature does not verify against the DID's key")

// Key is a private identity: the DID and its Ed25519 key.
type Key struct {
	DID  DID
	Priv ed25519.PrivateKey
}

// Generate makes a fresh key of the given kind from r (crypto/rand when nil).
func Generate(kind string, r io.Reader) (*Key, error) {
	if r == nil {
		r = rand.Reader
	}
	pub, priv, err := ed25519.GenerateKey(r)
	if err != nil {
		return nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	d, err := New(kind, pub)
	if err != nil {
		return nil, err
	}
	return &Key{DID: d, Priv: priv}, nil
}

// FromSeed rebuilds a key from its 32-byte seed.
func FromSeed(kind string, seed []byte) (*Key, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("seed is %d bytes, want %d", len(seed), ed25519.SeedSize)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	d, err := New(kind, priv.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, err
	}
	return &Key{DID: d, Priv: priv}, nil
}

// Sign signs msg.
func (k *Key) Sign(msg []byte) []byte { return ed25519.Sign(k.Priv, msg) }

// File is the JSON key-file format shared by the CLI and the Python trainer:
// {"did": …, "public_key": hex, "private_key": hex of the 32-byte seed}.
type File struct {
	DID        string `json:"did"`
	PublicKey  string `json:"public_key"`
	PrivateKey string `json:"private_key,omitempty"`
}

// maxKeyFile bounds a key file read from disk.
const maxKeyFile = 4096

// Marshal renders the key file.
func (k *Key) Marshal() []byte {
	b, _ := json.MarshalIndent(File{
		DID:        k.DID.String(),
		PublicKey:  hex.EncodeToString(k.DID.Key),
		PrivateKey: hex.EncodeToString(k.Priv.Seed()),
	}, "", "  ")
	return append(b, '\n')
}

// Unmarshal parses a key file and checks that its parts agree.
func Unmarshal(b []byte) (*Key, error) {
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("key file: %d bytes, limit %d", len(b), maxKeyFile)
	}
	var f File
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	d, err := Parse(f.DID)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	seed, err := hex.DecodeString(f.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("key file: private_key: %w", err)
	}
	k, err := FromSeed(d.Kind, seed)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if k.DID.String() != f.DID {
		return nil, errors.New("key file: private_key does not belong to did")
	}
	if f.PublicKey != "" && f.PublicKey != hex.EncodeToString(k.DID.Key) {
		return nil, errors.New("key file: public_key does not match private_key")
	}
	return k, nil
}

// Load reads a key file from disk.
func Load(path string) (*Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if fi.Size() > maxKeyFile {
		return nil, fmt.Errorf("key file %s: %d bytes, limit %d", path, fi.Size(), maxKeyFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	k, err := Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// Save writes the key file with mode 0600, refusing to overwrite.
func (k *Key) Save(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write key file: %w", err)
	}
	if _, err := f.Write(k.Marshal()); err != nil {
		f.Close()
		return fmt.Errorf("write key file: %w", err)
	}
	return f.Close()
}
