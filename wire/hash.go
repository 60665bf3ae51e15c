package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Hash is a SHA-256 digest. It encodes in JSON as 64 lowercase hex digits.
type Hash [32]byte

// SumBytes returns SHA-256(p).
func SumBytes(p []byte) Hash { return sha256.Sum256(p) }

// String gives lowercase hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is all zeros (unset).
func (h Hash) IsZero() bool { return h == Hash{} }

// ParseHash accepts 64 hex digits, with or without a "0x" or "sha256:" prefix.
func ParseHash(s string) (Hash, error) {
	var h Hash
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "sha256:")
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
