package wire

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Blob upload intents (docs/protocol/blobs.md). A PUT /blobs/<hash> carries
// the header
//
//	Tenzro-Blob-Intent: v1 <did> <size> <expires> <task or -> <signature hex>
//
// fields separated by one space: the uploader's DID, the blob's exact size
// in bytes, the Unix second after which the intent is void, the run the
// blob is for ("-" for none) and the DID's Ed25519 signature over
// BlobIntentPreimage. The node accepts the upload only from a DID its rules
// fund (a balance, or an enrolment in the named run) and counts the bytes
// against that DID's quota.

// DomainBlobIntent tags the preimage of a blob upload intent.
const DomainBlobIntent = "tenzro/train/blob-intent/v1"

// BlobIntentHeader is the HTTP header that carries a BlobIntent.
const BlobIntentHeader = "Tenzro-Blob-Intent"

// MaxBlobIntentBytes bounds the header's value.
const MaxBlobIntentBytes = 512

// BlobIntent is a signed request to store one blob.
type BlobIntent struct {
	DID     string
	Size    uint64
	Expires uint64 // Unix seconds
	Task    string // "" for none
	Sig     []byte
}

// BlobIntentPreimage is the signed preimage: Str(DomainBlobIntent) ‖
// Str(chain_id) ‖ Hash(blob) ‖ U64(size) ‖ Str(did) ‖ U64(expires) ‖
// Str(task). The chain id binds the intent to one network.
func BlobIntentPreimage(chainID string, h Hash, size uint64, did string, expires uint64, task string) []byte {
	return NewCanon(DomainBlobIntent).Str(chainID).Hash(h).U64(size).Str(did).U64(expires).Str(task).Out()
}

// Preimage is BlobIntentPreimage of this intent for the blob h.
func (b BlobIntent) Preimage(chainID string, h Hash) []byte {
	return BlobIntentPreimage(chainID, h, b.Size, b.DID, b.Expires, b.Task)
}

// String renders the header value.
func (b BlobIntent) String() string {
	task := b.Task
	if task == "" {
		task = "-"
	}
	return fmt.Sprintf("v1 %s %d %d %s %s", b.DID, b.Size, b.Expires, task, hex.EncodeToString(b.Sig))
}

// ParseBlobIntent parses a header value strictly: six fields separated by
// single spaces, decimal numbers without sign or leading zeros, a 64-byte
// signature in lower-case hex.
func ParseBlobIntent(s string) (BlobIntent, error) {
	var b BlobIntent
	if len(s) > MaxBlobIntentBytes {
		return b, fmt.Errorf("%s of %d bytes exceeds %d", BlobIntentHeader, len(s), MaxBlobIntentBytes)
	}
	f := strings.Split(s, " ")
	if len(f) != 6 || f[0] != "v1" {
		return b, fmt.Errorf("%s: want \"v1 <did> <size> <expires> <task or -> <signature hex>\" (six fields, single spaces)", BlobIntentHeader)
	}
	did, err := ParseDIDLike(f[1])
	if err != nil || did != f[1] {
		return b, fmt.Errorf("%s: did %q: %v", BlobIntentHeader, trunc(f[1]), err)
	}
	if b.Size, err = decimalField(BlobIntentHeader, "size", f[2]); err != nil {
		return b, err
	}
	if b.Expires, err = decimalField(BlobIntentHeader, "expires", f[3]); err != nil {
		return b, err
	}
	switch t := f[4]; {
	case t == "-":
	case t == "" || len(t) > 128 || strings.ContainsFunc(t, func(r rune) bool { return r <= ' ' || r > '~' }):
		return b, fmt.Errorf("%s: task %q: want \"-\" or a task id of 1..128 printable ASCII characters", BlobIntentHeader, trunc(t))
	default:
		b.Task = t
	}
	if len(f[5]) != 128 || strings.ToLower(f[5]) != f[5] {
		return b, fmt.Errorf("%s: signature: want 128 lower-case hex digits (Ed25519), got %d characters", BlobIntentHeader, len(f[5]))
	}
	if b.Sig, err = hex.DecodeString(f[5]); err != nil {
		return b, fmt.Errorf("%s: signature: %v", BlobIntentHeader, err)
	}
	b.DID = did
	return b, nil
}

// decimalField parses a header's decimal field strictly: digits only, no
// sign, no leading zeros, within uint64.
func decimalField(header, name, v string) (uint64, error) {
	if v == "" || (len(v) > 1 && v[0] == '0') || strings.TrimLeft(v, "0123456789") != "" {
		return 0, fmt.Errorf("%s: %s %q: want a decimal number", header, name, trunc(v))
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %s %q: %v", header, name, trunc(v), err)
	}
	return n, nil
}
