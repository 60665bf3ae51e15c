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
)

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
	case VendorTDX, VendorSNP, VendorNitro:
	default:
		return nil, fmt.Errorf("evidence envelope: vendor %q (want tdx, snp or nitro)", e.Vendor)
	}
	if len(e.Evidence) == 0 {
		return nil, fmt.Errorf("evidence envelope: empty evidence")
	}
	return &e, nil
}

// Marshal renders the envelope.
func (e *Envelope) Marshal() []byte {
	b, _ := json.Marshal(e)
	return b
}
