package wire

import "encoding/json"

// Params and results of the tenzro_attest_* methods served by the node's
// attestation service (cmd/tenzro-node decodes them strictly with these
// types; rpc/openrpc.json documents them from the same types).

// SubmitEvidenceParams is tenzro_attest_submitEvidence: evidence for a
// trainer of a run, checked against the run's policy and stored by digest.
type SubmitEvidenceParams struct {
	TaskID string `json:"task_id"`
	DID    string `json:"did"`
	// Envelope is the vendor-tagged evidence envelope (attest/EVIDENCE.md).
	Envelope json.RawMessage `json:"envelope"`
}

// SubmitEvidenceResult answers tenzro_attest_submitEvidence.
type SubmitEvidenceResult struct {
	Digest Hash `json:"digest"`
}

// GetEvidenceParams is tenzro_attest_getEvidence.
type GetEvidenceParams struct {
	Digest Hash `json:"digest"`
}

// GetEvidenceResult answers tenzro_attest_getEvidence.
type GetEvidenceResult struct {
	Envelope json.RawMessage `json:"envelope"`
}

// GetPolicyParams is tenzro_attest_getPolicy: the policy template the node
// applies for a tier (verified, confidential) and vendor (tdx, snp, nitro).
type GetPolicyParams struct {
	Tier   string `json:"tier"`
	Vendor string `json:"vendor"`
}
