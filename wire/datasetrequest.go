package wire

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// Signed dataset requests (docs/protocol/datasets.md §Requests). An
// import, fetch or remove on a node's dataset API carries the header
//
//	Tenzro-Dataset-Request: v1 <did> <op> <cid> <expires> <nonce> <signature hex>
//
// fields separated by one space: the requester's DID, the operation
// (import, fetch or remove), the dataset's root CID as the request names it
// (for an import, the CAR's root), the Unix second after which the request
// is void, a number the requester picks at random (two requests alike in
// every other field still differ; the node refuses a (did, nonce) it saw
// before the expiry), and the DID's Ed25519 signature over
// DatasetRequestPreimage. It
// is the blob intent's scheme (Tenzro-Blob-Intent: one header, the chain id
// in the preimage, an expiry within a bounded window) with the operation and
// the CID in place of the blob's hash and size. The node pins a dataset for
// the DID that imported (or fetched) it, counts it against that DID's
// quota, and lets only a DID that pinned it remove it.

// DomainDatasetRequest tags the preimage of a dataset request.
const DomainDatasetRequest = "tenzro/train/dataset-request/v1"

// DatasetRequestHeader is the HTTP header that carries a DatasetRequest.
const DatasetRequestHeader = "Tenzro-Dataset-Request"

// MaxDatasetRequestBytes bounds the header's value.
const MaxDatasetRequestBytes = 512

// Dataset request operations.
const (
	DatasetOpImport = "import"
	DatasetOpFetch  = "fetch"
	DatasetOpRemove = "remove"
)

// DatasetRequest is a signed request to import, fetch or remove a dataset.
type DatasetRequest struct {
	DID     string
	Op      string
	CID     string
	Expires uint64 // Unix seconds
	Nonce   uint64
	Sig     []byte
}

// DatasetRequestPreimage is the signed preimage: Str(DomainDatasetRequest) ‖
// Str(chain_id) ‖ Str(op) ‖ Str(cid) ‖ Str(did) ‖ U64(expires) ‖ U64(nonce).
func DatasetRequestPreimage(chainID, op, cid, did string, expires, nonce uint64) []byte {
	return NewCanon(DomainDatasetRequest).Str(chainID).Str(op).Str(cid).Str(did).U64(expires).U64(nonce).Out()
}

// Preimage is DatasetRequestPreimage of this request.
func (d DatasetRequest) Preimage(chainID string) []byte {
	return DatasetRequestPreimage(chainID, d.Op, d.CID, d.DID, d.Expires, d.Nonce)
}

// String renders the header value.
func (d DatasetRequest) String() string {
	return fmt.Sprintf("v1 %s %s %s %d %d %s", d.DID, d.Op, d.CID, d.Expires, d.Nonce, hex.EncodeToString(d.Sig))
}

// ParseDatasetRequest parses a header value strictly: seven fields
// separated by single spaces, a known operation, a CID of 1..128 letters
// and digits, a decimal expiry and nonce without sign or leading zeros, a
// 64-byte signature in lower-case hex. (Whether the CID parses as a CID is
// for the dataset API, which compares it with the one the request names.)
func ParseDatasetRequest(s string) (DatasetRequest, error) {
	var d DatasetRequest
	if len(s) > MaxDatasetRequestBytes {
		return d, fmt.Errorf("%s of %d bytes exceeds %d", DatasetRequestHeader, len(s), MaxDatasetRequestBytes)
	}
	f := strings.Split(s, " ")
	if len(f) != 7 || f[0] != "v1" {
		return d, fmt.Errorf("%s: want \"v1 <did> <op> <cid> <expires> <nonce> <signature hex>\" (seven fields, single spaces)", DatasetRequestHeader)
	}
	did, err := ParseDIDLike(f[1])
	if err != nil || did != f[1] {
		return d, fmt.Errorf("%s: did %q: %v", DatasetRequestHeader, trunc(f[1]), err)
	}
	switch f[2] {
	case DatasetOpImport, DatasetOpFetch, DatasetOpRemove:
	default:
		return d, fmt.Errorf("%s: operation %q: want import, fetch or remove", DatasetRequestHeader, trunc(f[2]))
	}
	if c := f[3]; c == "" || len(c) > 128 || strings.ContainsFunc(c, func(r rune) bool {
		return !('0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
	}) {
		return d, fmt.Errorf("%s: cid %q: want 1..128 letters and digits", DatasetRequestHeader, trunc(c))
	}
	if d.Expires, err = decimalField(DatasetRequestHeader, "expires", f[4]); err != nil {
		return d, err
	}
	if d.Nonce, err = decimalField(DatasetRequestHeader, "nonce", f[5]); err != nil {
		return d, err
	}
	if len(f[6]) != 128 || strings.ToLower(f[6]) != f[6] {
		return d, fmt.Errorf("%s: signature: want 128 lower-case hex digits (Ed25519), got %d characters", DatasetRequestHeader, len(f[6]))
	}
	if d.Sig, err = hex.DecodeString(f[6]); err != nil {
		return d, fmt.Errorf("%s: signature: %v", DatasetRequestHeader, err)
	}
	d.DID, d.Op, d.CID = did, f[2], f[3]
	return d, nil
}
