package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"lukechampine.com/blake3"
)

// Hash is a 32-byte digest. It encodes in JSON as 64 lowercase hex digits.
//
// The algorithm is given by the field that holds the hash, never by the
// value (docs/PROTOCOL.md, "Hashes"). The rule: bytes of model or gradient
// content — submission payloads, fragment weights, momentum, aggregates,
// initial weights, and so every blob-store key — are hashed with BLAKE3-256
// (ContentHash, NewContentHasher, Canon.SumContent for the model hash);
// domain-separated canonical preimages and anything a standard names (spec
// hash, round commit, run root, attestation binding, plugin modules, dataset
// hashes) are hashed with SHA-256 (SHA256, Canon.Sum). This file is the only
// place that chooses: no other package imports a hash for content.
type Hash [32]byte

// ContentHash returns BLAKE3-256(p), the hash of model and gradient content
// (payload_hash, weights_hash, aggregate_hash, momentum_after, blob keys).
func ContentHash(p []byte) Hash { return blake3.Sum256(p) }

// ContentHasher computes ContentHash over bytes written to it, so content can
// be hashed while it streams to disk or the network.
type ContentHasher struct{ h *blake3.Hasher }

// NewContentHasher returns an empty ContentHasher.
func NewContentHasher() *ContentHasher { return &ContentHasher{h: blake3.New(32, nil)} }

// Write adds p to the hashed content. It never fails.
func (c *ContentHasher) Write(p []byte) (int, error) { return c.h.Write(p) }

// Sum returns the ContentHash of everything written so far (writing may go on).
func (c *ContentHasher) Sum() Hash {
	var h Hash
	c.h.Sum(h[:0])
	return h
}

// SHA256 returns SHA-256(p), for structured preimages and what a standard
// names (plugin modules, evidence, dataset files); see Hash.
func SHA256(p []byte) Hash { return sha256.Sum256(p) }

// String gives lowercase hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is all zeros (unset).
func (h Hash) IsZero() bool { return h == Hash{} }

// ParseHash accepts 64 hex digits, with or without a "0x", "sha256:" or
// "blake3:" prefix. The prefix is a label for people; it is not checked
// against the algorithm the field uses.
func ParseHash(s string) (Hash, error) {
	var h Hash
	t := strings.TrimPrefix(s, "0x")
	if u, ok := strings.CutPrefix(t, "sha256:"); ok {
		t = u
	} else {
		t = strings.TrimPrefix(t, "blake3:")
	}
	if len(t) != 64 {
		return h, fmt.Errorf("hash %q: want 64 hex digits, got %d", trunc(s), len(t))
	}
	if _, err := hex.Decode(h[:], []byte(t)); err != nil {
		return h, fmt.Errorf("hash %q: %w", trunc(s), err)
	}
	return h, nil
}

// MarshalText implements encoding.TextMarshaler.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (h *Hash) UnmarshalText(b []byte) error {
	v, err := ParseHash(string(b))
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// HexBytes is a byte string that encodes in JSON as lowercase hex (used for
// signatures and evidence digests).
type HexBytes []byte

// MarshalText implements encoding.TextMarshaler.
func (r HexBytes) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(r)), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *HexBytes) UnmarshalText(b []byte) error {
	v, err := hex.DecodeString(strings.TrimPrefix(string(b), "0x"))
	if err != nil {
		return fmt.Errorf("hex bytes: %w", err)
	}
	*r = v
	return nil
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
