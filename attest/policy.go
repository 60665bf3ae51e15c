package attest

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/tenzro/train/attest/nitro"
	"github.com/tenzro/train/attest/nvidia"
	"github.com/tenzro/train/attest/snp"
	"github.com/tenzro/train/attest/tdx"
)

// MaxPolicy bounds a policy document.
const MaxPolicy = 64 << 10

// Policy is an attestation policy for one tier (POLICY in EVIDENCE.md).
// Evidence of a vendor is accepted only when the policy has that vendor's
// section.
type Policy struct {
	Version int    `json:"version"`
	Tier    string `json:"tier,omitempty"`
	// AllowSimulated accepts evidence chaining to the simulated test roots.
	// Refused anyway in a build with the `production` tag.
	AllowSimulated bool          `json:"allow_simulated,omitempty"`
	TDX            *tdx.Policy   `json:"tdx,omitempty"`
	SNP            *snp.Policy   `json:"snp,omitempty"`
	Nitro          *nitro.Policy `json:"nitro,omitempty"`
	// NvidiaCC requires composite evidence with an NVIDIA CC GPU report
	// that passes this section (EVIDENCE.md, nvidia_cc).
	NvidiaCC *nvidia.Policy `json:"nvidia_cc,omitempty"`
}

// ParsePolicy decodes a policy. The input may be a single policy or an
// object mapping tier names ("Verified", "Confidential") to policies, as a
// task spec's attestation_policy does; tier picks the entry then.
func ParsePolicy(b []byte, tier string) (*Policy, error) {
	if len(b) > MaxPolicy {
		return nil, fmt.Errorf("attestation policy is %d bytes, limit %d", len(b), MaxPolicy)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("attestation policy: %w", err)
	}
	if _, single := probe["version"]; !single {
		sub, ok := probe[tier]
		if !ok {
			return nil, fmt.Errorf("attestation policy: no policy for tier %q", tier)
		}
		b = sub
	}
	var p Policy
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("attestation policy: %w", err)
	}
	if p.Version != 1 {
		return nil, fmt.Errorf("attestation policy: version %d (want 1)", p.Version)
	}
	if p.Tier != "" && tier != "" && p.Tier != tier {
		return nil, fmt.Errorf("attestation policy is for tier %q, not %q", p.Tier, tier)
	}
	if p.TDX == nil && p.SNP == nil && p.Nitro == nil && p.NvidiaCC == nil {
		return nil, fmt.Errorf("attestation policy: no vendor section (tdx, snp, nitro or nvidia_cc)")
	}
	if p.NvidiaCC != nil {
		if err := p.NvidiaCC.Check(); err != nil {
			return nil, err
		}
	}
	if p.TDX != nil {
		if err := p.TDX.Check(); err != nil {
			return nil, err
		}
	}
	if p.SNP != nil {
		if err := p.SNP.Check(); err != nil {
			return nil, err
		}
	}
	if p.Nitro != nil {
		if err := p.Nitro.Check(); err != nil {
			return nil, err
		}
	}
	return &p, nil
}

// Template returns a documented policy template for a tier and vendor, as
// JSON with a "_comment" field per section removed (JSON has no comments):
// the documentation is in EVIDENCE.md and the CLI prints it alongside.
func Template(tier, vendor string) (*Policy, error) {
	smt := true
	vmpl := 0
	p := &Policy{Version: 1, Tier: tier}
	switch vendor {
	case VendorTDX:
		p.TDX = &tdx.Policy{MRTD: []string{zeroHex(48)}, RTMR0: []string{zeroHex(48)}, RTMR1: []string{zeroHex(48)}, RTMR2: []string{zeroHex(48)},
			MRSEAM: []string{zeroHex(48)}, TCBStatus: []string{"UpToDate"}}
	case VendorSNP:
		p.SNP = &snp.Policy{Measurements: []string{zeroHex(48)}, SMTAllowed: &smt, VMPL: &vmpl,
			MinTCB: &snp.TCB{Bootloader: 0, TEE: 0, SNP: 0, Microcode: 0}, Signers: []string{"VCEK", "VLEK"}}
	case VendorNitro:
		p.Nitro = &nitro.Policy{PCR0: []string{zeroHex(48)}, PCR1: []string{zeroHex(48)}, PCR2: []string{zeroHex(48)}, MaxAge: "10m"}
	case VendorNvidia:
		// Composite: the CPU section a GPU host runs in, plus nvidia_cc.
		p.SNP = &snp.Policy{Measurements: []string{zeroHex(48)}, SMTAllowed: &smt, VMPL: &vmpl,
			MinTCB: &snp.TCB{}, Signers: []string{"VCEK", "VLEK"}}
		p.NvidiaCC = &nvidia.Policy{Architectures: []string{"HOPPER"}, CCMode: "on", MinDriverVersion: "550.54.14", MinVBIOSVersion: "96.00.5e.00.01"}
	default:
		return nil, fmt.Errorf("vendor %q (want tdx, snp, nitro or nvidia)", vendor)
	}
	return p, nil
}

func zeroHex(n int) string { return string(bytes.Repeat([]byte("00"), n)) }
