package attest

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Vendors.
const (
	VendorTDX   = "tdx"
	VendorSNP   = "snp"
	VendorNitro = "nitro"
	// VendorNvidia is an NVIDIA CC GPU report: alone (authenticity checks,
	// `tenzro attest verify`) or, for Verified trainers, as the gpu part of
	// a TDX or SEV-SNP envelope (composite evidence).
	VendorNvidia = "nvidia"
)

// GPUEvidence is the GPU part of composite evidence (EVIDENCE.md).
type GPUEvidence struct {
	Vendor string `json:"vendor"` // "nvidia"
	// Report is the raw SPDM GET_MEASUREMENTS request ‖ response.
	Report []byte `json:"report"`
	// Certs is the device certificate chain, DER, leaf first (never roots).
	Certs [][]byte `json:"certs"`
	// RIMs and OCSP are optional collateral (verified like the node's
	// cached collateral; OCSP keyed by certificate serial, lower-case hex).
	RIMs [][]byte          `json:"rims,omitempty"`
	OCSP map[string][]byte `json:"ocsp,omitempty"`
	// Simulated marks evidence from the simulated GPU provider (informational:
	// the verifier decides from the chain).
	Simulated bool `json:"simulated,omitempty"`
}

// MaxEnvelope bounds an evidence envelope.
const MaxEnvelope = 512 << 10

// Envelope is the vendor-tagged evidence the node exchanges (EVIDENCE.md).
type Envelope struct {
	Vendor string `json:"vendor"`
	// Evidence is the raw quote / report / COSE_Sign1 document.
	Evidence []byte `json:"evidence"`
	// Certs are extra DER certificates (SNP: the VCEK or VLEK when the
	// report's table lacks it). Never used as roots.
	Certs [][]byte `json:"certs,omitempty"`
	// CertTable is SNP's GHCB certificate table from SNP_GET_EXT_REPORT.
	CertTable []byte `json:"cert_table,omitempty"`
	// Collateral is TDX collateral (tdx.Collateral JSON) for the quote's
	// FMSPC; the node's cache is used when absent.
	Collateral json.RawMessage `json:"collateral,omitempty"`
	// GPU is the GPU report bound to this CPU evidence (TDX and SEV-SNP
	// only): its nonce is attest.GPUNonce of the binding and the second
	// half of REPORTDATA is attest.GPUReportHash of its report.
	GPU *GPUEvidence `json:"gpu,omitempty"`
	// Nonce is the round nonce the evidence binds (informational: the
	// binding is recomputed by the verifier).
	Nonce []byte `json:"nonce,omitempty"`
}

// ParseEnvelope decodes an envelope strictly.
func ParseEnvelope(b []byte) (*Envelope, error) {
	if len(b) > MaxEnvelope {
		return nil, fmt.Errorf("evidence envelope is %d bytes, limit %d", len(b), MaxEnvelope)
	}
	var e Envelope
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("evidence envelope: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("evidence envelope: trailing data")
	}
	switch e.Vendor {
	case VendorTDX, VendorSNP, VendorNitro, VendorNvidia:
	default:
		return nil, fmt.Errorf("evidence envelope: vendor %q (want tdx, snp, nitro or nvidia)", e.Vendor)
	}
	if len(e.Evidence) == 0 {
		return nil, fmt.Errorf("evidence envelope: empty evidence")
	}
	if e.GPU != nil {
		if e.Vendor != VendorTDX && e.Vendor != VendorSNP {
			return nil, fmt.Errorf("evidence envelope: gpu evidence goes with tdx or snp evidence, not %s", e.Vendor)
		}
		if e.GPU.Vendor != VendorNvidia {
			return nil, fmt.Errorf("evidence envelope: gpu vendor %q (want nvidia)", e.GPU.Vendor)
		}
		if len(e.GPU.Report) == 0 || len(e.GPU.Certs) == 0 || len(e.GPU.Certs) > 8 || len(e.GPU.RIMs) > 8 || len(e.GPU.OCSP) > 16 {
			return nil, fmt.Errorf("evidence envelope: gpu needs a report, 1..8 certificates, at most 8 RIMs and 16 OCSP responses")
		}
	}
	return &e, nil
}

// Marshal renders the envelope.
func (e *Envelope) Marshal() []byte {
	b, _ := json.Marshal(e)
	return b
}
