package wire

import "encoding/binary"

// Domain tags. Every hashed or signed preimage starts with one of these,
// length-prefixed, so a signature for one purpose can never be replayed for
// another. docs/PROTOCOL.md lists them with test vectors.
const (
	DomainRequest     = "tenzro/train/request/v2"      // signed RPC requests (v2: the chain id follows the tag)
	DomainSubmission  = "tenzro/train/submission/v2"   // outer-gradient submissions (v2: the chain id follows the tag)
	DomainSpec        = "tenzro/train/spec/v1"         // task-spec hash
	DomainRoundCommit = "tenzro/train/round-commit/v1" // round commit hash
	DomainModel       = "tenzro/train/model/v1"        // model hash over fragment hashes
	DomainFragment    = "tenzro/train/fragment/v1"     // fragment weights hash
	DomainReceipt     = "tenzro/train/receipt/v2"      // syncer's receipt signature (v2 receipts; v1 used receipt/v1)
	DomainRunRoot     = "tenzro/train/run-root/v1"     // Merkle run root
	DomainEquivocate  = "tenzro/train/equivocation/v1" // equivocation evidence digest
	DomainElection    = "tenzro/train/election/v1"     // syncer election VRF input
)

// Canon builds a canonical, length-prefixed byte string. Each field is
// written as an 8-byte big-endian length followed by its bytes; integers are
// written as a field holding their 8-byte big-endian value. The encoding is
// injective: two different field lists never produce the same bytes.
type Canon struct{ b []byte }

// NewCanon starts a preimage with its domain tag as the first field.
func NewCanon(domain string) *Canon {
	c := &Canon{b: make([]byte, 0, 256)}
	return c.Str(domain)
}

// Bytes appends one field holding p.
func (c *Canon) Bytes(p []byte) *Canon {
	c.b = binary.BigEndian.AppendUint64(c.b, uint64(len(p)))
	c.b = append(c.b, p...)
	return c
}

// Str appends one field holding the UTF-8 bytes of s.
func (c *Canon) Str(s string) *Canon {
	c.b = binary.BigEndian.AppendUint64(c.b, uint64(len(s)))
	c.b = append(c.b, s...)
	return c
}

// U64 appends one field holding v as 8 big-endian bytes.
func (c *Canon) U64(v uint64) *Canon {
	c.b = binary.BigEndian.AppendUint64(c.b, 8)
	c.b = binary.BigEndian.AppendUint64(c.b, v)
	return c
}

// Hash appends one field holding the 32 bytes of h.
func (c *Canon) Hash(h Hash) *Canon { return c.Bytes(h[:]) }

// Out returns the encoded bytes.
func (c *Canon) Out() []byte { return c.b }

// Sum returns SHA-256 of the encoded bytes: the hash of a structured
// preimage (spec, round commit, attestation binding, …).
func (c *Canon) Sum() Hash { return SHA256(c.b) }

// SumContent returns the ContentHash (BLAKE3-256) of the encoded bytes. Only
// the model hash uses it: a model is content, named by its fragments'
// content hashes (ModelHash).
func (c *Canon) SumContent() Hash { return ContentHash(c.b) }

// ModelHash is the model hash (docs/PROTOCOL.md §5): BLAKE3-256 of
// Str(DomainModel) ‖ Hash(fragment_0) ‖ … ‖ Hash(fragment_{F-1}), the
// fragments being their weights hashes in fragment order.
func ModelHash(frags []Hash) Hash {
	c := NewCanon(DomainModel)
	for _, h := range frags {
		c.Hash(h)
	}
	return c.SumContent()
}

// DomainAttest tags the Verified-tier evidence binding (v2: the payload
// hash is part of it; v1 evidence, without it, is not accepted).
const DomainAttest = "tenzro/train/attest/v2"

// AttestReportData is the Verified-tier binding carried in evidence report
// data (DESIGN §6): SHA-256(Str(DomainAttest) ‖ Hash(program) ‖ U64(shard) ‖
// Hash(model) ‖ Str(trainer DID) ‖ Bytes(round nonce) ‖ Hash(payload)).
// payload is the ContentHash of the outer-gradient payload the evidence
// accompanies (so the evidence covers that gradient, issue 23), the zero
// hash for an enrolment, which carries no payload.
func AttestReportData(programHash Hash, shard uint64, modelHash Hash, trainerDID string, roundNonce []byte, payload Hash) Hash {
	return NewCanon(DomainAttest).Hash(programHash).U64(shard).Hash(modelHash).Str(trainerDID).Bytes(roundNonce).Hash(payload).Sum()
}
