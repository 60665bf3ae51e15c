package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// DomainEvidence prefixes the evidence digest recorded in receipts and
// signed by an enrolment (PROTOCOL §3, §11).
const DomainEvidence = "tenzro/train/attest/evidence/v1"

// MaxClaimBytes bounds the attestation claim a transaction carries inline
// (the evidence envelope, at most 512 KiB, plus its nonce and program hash
// in JSON): every validator verifies these bytes, and the sender pays the
// transaction's per-byte fee for them.
const MaxClaimBytes = 520 << 10

// EvidenceDigest is the digest of an evidence envelope: SHA-256 over
// Str(DomainEvidence) ‖ Str(vendor) ‖ Bytes(evidence), followed by
// Str(gpu vendor) ‖ Bytes(gpu report) when the envelope carries GPU
// evidence. It names the evidence in receipts and in enrolment preimages.
func EvidenceDigest(vendor string, evidence []byte, gpuVendor string, gpuReport []byte, hasGPU bool) Hash {
	c := NewCanon(DomainEvidence).Str(vendor).Bytes(evidence)
	if hasGPU {
		c.Str(gpuVendor).Bytes(gpuReport)
	}
	return c.Sum()
}

// ClaimEvidenceDigest is EvidenceDigest of the envelope inside an
// attestation claim (AttestationClaim JSON). It reads only the fields the
// digest covers; the envelope's full, strict parse is the verifier's.
func ClaimEvidenceDigest(claim []byte) (Hash, error) {
	if len(claim) > MaxClaimBytes {
		return Hash{}, fmt.Errorf("attestation claim is %d bytes, limit %d", len(claim), MaxClaimBytes)
	}
	var c AttestationClaim
	dec := json.NewDecoder(bytes.NewReader(claim))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Hash{}, fmt.Errorf("attestation claim: %w", err)
	}
	if dec.More() {
		return Hash{}, fmt.Errorf("attestation claim: trailing data")
	}
	var env struct {
		Vendor   string `json:"vendor"`
		Evidence []byte `json:"evidence"`
		GPU      *struct {
			Vendor string `json:"vendor"`
			Report []byte `json:"report"`
		} `json:"gpu"`
	}
	if err := json.Unmarshal(c.Envelope, &env); err != nil {
		return Hash{}, fmt.Errorf("attestation claim: envelope: %w", err)
	}
	if env.Vendor == "" || len(env.Evidence) == 0 {
		return Hash{}, fmt.Errorf("attestation claim: envelope needs a vendor and evidence")
	}
	if env.GPU != nil {
		return EvidenceDigest(env.Vendor, env.Evidence, env.GPU.Vendor, env.GPU.Report, true), nil
	}
	return EvidenceDigest(env.Vendor, env.Evidence, "", nil, false), nil
}

// EnrollPreimage is the enrolment's signing preimage (PROTOCOL §3): the
// request preimage with Str(task_id) ‖ Str(stake) ‖ Hash(evidence digest),
// the digest being ClaimEvidenceDigest of the attestation claim, all zero
// when the enrolment carries none (Open tier). The signature so covers the
// evidence: a relay cannot swap or invent it.
func EnrollPreimage(chainID, trainerDID string, nonce uint64, taskID, stake string, evidence Hash) []byte {
	return RequestPreimage(chainID, MethodEnrollTrainer, trainerDID, nonce, func(c *Canon) { c.Str(taskID).Str(stake).Hash(evidence) })
}
