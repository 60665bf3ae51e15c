package snp

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/google/go-sev-guest/abi"
	"github.com/google/go-sev-guest/kds"
	"github.com/google/go-sev-guest/validate"

	"github.com/tenzro/train/attest/verdict"
)

// Policy is the SEV-SNP part of an attestation policy (JSON).
type Policy struct {
	// Measurements allowlists the launch MEASUREMENT (48-byte hex). Empty:
	// any measurement (allowed only outside production policies).
	Measurements []string `json:"measurement,omitempty"`
	// HostData allowlists HOST_DATA (32-byte hex). Empty: not checked.
	HostData []string `json:"host_data,omitempty"`
	// SMTAllowed must be set: true accepts guests that permit SMT (real
	// VMs do), false refuses them.
	SMTAllowed *bool `json:"smt_allowed"`
	// VMPL is the required VMPL (0-3); nil: not checked.
	VMPL *int `json:"vmpl,omitempty"`
	// MinTCB is the component-wise minimum of the reported TCB.
	MinTCB *TCB `json:"min_tcb,omitempty"`
	// AllowProvisionalFirmware accepts committed TCB/firmware below current.
	AllowProvisionalFirmware bool `json:"allow_provisional_firmware,omitempty"`
	// MinGuestSVN is the minimum GUEST_SVN.
	MinGuestSVN uint32 `json:"min_guest_svn,omitempty"`
	// Signers lists accepted endorsement keys: "VCEK", "VLEK" (default both).
	Signers []string `json:"signers,omitempty"`
}

// TCB is a minimum TCB, component-wise.
type TCB struct {
	Bootloader uint8 `json:"bootloader"`
	TEE        uint8 `json:"tee"`
	SNP        uint8 `json:"snp"`
	Microcode  uint8 `json:"microcode"`
}

// Check reports problems in the policy itself.
func (p *Policy) Check() error {
	if p.SMTAllowed == nil {
		return fmt.Errorf("snp policy: smt_allowed must be set explicitly (true or false)")
	}
	for _, m := range p.Measurements {
		if b, err := hex.DecodeString(m); err != nil || len(b) != abi.MeasurementSize {
			return fmt.Errorf("snp policy: measurement %q is not %d bytes of hex", m, abi.MeasurementSize)
		}
	}
	for _, h := range p.HostData {
		if b, err := hex.DecodeString(h); err != nil || len(b) != abi.HostDataSize {
			return fmt.Errorf("snp policy: host_data %q is not %d bytes of hex", h, abi.HostDataSize)
		}
	}
	if p.VMPL != nil && (*p.VMPL < 0 || *p.VMPL > 3) {
		return fmt.Errorf("snp policy: vmpl %d not in 0..3", *p.VMPL)
	}
	for _, s := range p.Signers {
		if s != "VCEK" && s != "VLEK" {
			return fmt.Errorf("snp policy: signer %q (want VCEK or VLEK)", s)
		}
	}
	return nil
}

// Validate checks the verified evidence against the policy, recording each
// check. Binding of the report data is checked by the caller.
func Validate(ev *Evidence, p *Policy, checks *verdict.Checks) error {
	if err := p.Check(); err != nil {
		return checks.Fail("snp.policy", err)
	}
	r := ev.Report
	gp, err := abi.ParseSnpPolicy(r.GetPolicy())
	if err != nil {
		return checks.Fail("snp.guest_policy", err)
	}
	if gp.Debug {
		return checks.Failf("snp.guest_policy.debug", "guest policy 0x%x allows debugging", r.GetPolicy())
	}
	checks.Pass("snp.guest_policy.debug", "debug disallowed")
	if gp.MigrateMA {
		return checks.Failf("snp.guest_policy.migrate_ma", "guest policy 0x%x allows a migration agent", r.GetPolicy())
	}
	checks.Pass("snp.guest_policy.migrate_ma", "no migration agent")
	if gp.SMT && !*p.SMTAllowed {
		return checks.Failf("snp.guest_policy.smt", "guest policy allows SMT; the policy refuses it")
	}
	checks.Pass("snp.guest_policy.smt", "smt=%v, allowed=%v", gp.SMT, *p.SMTAllowed)
	if len(p.Signers) > 0 {
		ok := false
		for _, s := range p.Signers {
			ok = ok || s == ev.Signer.String()
		}
		if !ok {
			return checks.Failf("snp.signer", "signed by %v, policy accepts %s", ev.Signer, strings.Join(p.Signers, ", "))
		}
		checks.Pass("snp.signer", "%v accepted", ev.Signer)
	}
	if len(p.Measurements) > 0 {
		if !inHexList(r.GetMeasurement(), p.Measurements) {
			return checks.Failf("snp.measurement", "measurement %x not in the allowlist", r.GetMeasurement())
		}
		checks.Pass("snp.measurement", "%x allowlisted", r.GetMeasurement())
	}
	if len(p.HostData) > 0 {
		if !inHexList(r.GetHostData(), p.HostData) {
			return checks.Failf("snp.host_data", "host data %x not in the allowlist", r.GetHostData())
		}
		checks.Pass("snp.host_data", "%x allowlisted", r.GetHostData())
	}
	if p.VMPL != nil {
		if int(r.GetVmpl()) != *p.VMPL {
			return checks.Failf("snp.vmpl", "report VMPL %d, policy requires %d", r.GetVmpl(), *p.VMPL)
		}
		checks.Pass("snp.vmpl", "VMPL %d", r.GetVmpl())
	}
	if r.GetGuestSvn() < p.MinGuestSVN {
		return checks.Failf("snp.guest_svn", "GUEST_SVN %d below minimum %d", r.GetGuestSvn(), p.MinGuestSVN)
	}
	// TCB, provisional firmware and the endorsement key's TCB: the library.
	opts := &validate.Options{
		// The guest policy bits are checked above; here the maximum is wide open.
		GuestPolicy:               abi.SnpPolicy{SMT: true, MigrateMA: true, Debug: true, CXLAllowed: true},
		PermitProvisionalFirmware: p.AllowProvisionalFirmware,
	}
	if p.MinTCB != nil {
		opts.MinimumTCB = kds.TCBParts{BlSpl: p.MinTCB.Bootloader, TeeSpl: p.MinTCB.TEE, SnpSpl: p.MinTCB.SNP, UcodeSpl: p.MinTCB.Microcode}
	}
	if err := validate.SnpAttestation(ev.Attestation(), opts); err != nil {
		if !p.AllowProvisionalFirmware && strings.Contains(strings.ToLower(err.Error()), "committed") {
			return checks.Failf("snp.tcb.provisional_firmware", "firmware is provisional (committed below current) and the policy does not allow it: %v", err)
		}
		return checks.Fail("snp.tcb", err)
	}
	checks.Pass("snp.tcb", "reported TCB 0x%016x meets the minimum; provisional firmware allowed=%v", r.GetReportedTcb(), p.AllowProvisionalFirmware)
	return nil
}

func inHexList(v []byte, list []string) bool {
	for _, s := range list {
		if b, err := hex.DecodeString(s); err == nil && bytes.Equal(b, v) {
			return true
		}
	}
	return false
}
