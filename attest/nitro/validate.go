package nitro

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/tenzro/train/attest/verdict"
)

// Policy is the Nitro part of an attestation policy (JSON). PCR values are
// 48-byte hex (SHA-384).
type Policy struct {
	PCR0 []string `json:"pcr0,omitempty"`
	PCR1 []string `json:"pcr1,omitempty"`
	PCR2 []string `json:"pcr2,omitempty"`
	// PCR8 (signing certificate of the enclave image) is checked when set.
	PCR8 []string `json:"pcr8,omitempty"`
	// MaxAge bounds how old the document may be at verification time
	// (Go duration, default "10m"); it also bounds future skew.
	MaxAge string `json:"max_age,omitempty"`
}

// Check reports problems in the policy itself.
func (p *Policy) Check() error {
	for name, l := range map[string][]string{"pcr0": p.PCR0, "pcr1": p.PCR1, "pcr2": p.PCR2, "pcr8": p.PCR8} {
		for _, v := range l {
			if b, err := hex.DecodeString(v); err != nil || len(b) != 48 {
				return fmt.Errorf("nitro policy: %s value %q is not 48 bytes of hex", name, v)
			}
		}
	}
	if p.MaxAge != "" {
		if d, err := time.ParseDuration(p.MaxAge); err != nil || d <= 0 {
			return fmt.Errorf("nitro policy: max_age %q is not a positive duration", p.MaxAge)
		}
	}
	return nil
}

func (p *Policy) maxAge() time.Duration {
	if d, err := time.ParseDuration(p.MaxAge); err == nil && d > 0 {
		return d
	}
	return 10 * time.Minute
}

// ValidateDebug refuses debug enclaves (PCR0 all zeros). It runs with and
// without a policy: a debug enclave's measurements mean nothing.
func ValidateDebug(ev *Evidence, checks *verdict.Checks) error {
	pcr0, ok := ev.Doc.PCRs[0]
	if !ok {
		return checks.Failf("nitro.pcr0", "document has no PCR0")
	}
	if allZero(pcr0) {
		return checks.Failf("nitro.debug", "PCR0 is all zeros: the enclave runs in debug mode")
	}
	checks.Pass("nitro.debug", "PCR0 is not all zeros")
	return nil
}

// Validate checks the verified document against the policy at now.
func Validate(ev *Evidence, p *Policy, now time.Time, checks *verdict.Checks) error {
	if err := p.Check(); err != nil {
		return checks.Fail("nitro.policy", err)
	}
	for _, pc := range []struct {
		idx  uint
		list []string
	}{{0, p.PCR0}, {1, p.PCR1}, {2, p.PCR2}, {8, p.PCR8}} {
		if len(pc.list) == 0 {
			continue
		}
		name := fmt.Sprintf("nitro.pcr%d", pc.idx)
		v, ok := ev.Doc.PCRs[pc.idx]
		if !ok {
			return checks.Failf(name, "document has no PCR%d", pc.idx)
		}
		if !inHexList(v, pc.list) {
			return checks.Failf(name, "PCR%d %x not in the allowlist", pc.idx, v)
		}
		checks.Pass(name, "%x allowlisted", v)
	}
	age := now.Sub(ev.IssuedAt)
	if age > p.maxAge() || -age > p.maxAge() {
		return checks.Failf("nitro.timestamp", "document issued %s, %s from the verification time %s (limit %s)",
			ev.IssuedAt.Format(time.RFC3339), age.Round(time.Second), now.Format(time.RFC3339), p.maxAge())
	}
	checks.Pass("nitro.timestamp", "issued %s, within %s", ev.IssuedAt.Format(time.RFC3339), p.maxAge())
	return nil
}

// ValidateBinding requires user_data to hold exactly reportData, and nonce,
// when present, to equal it as well (the node's round nonce is inside it).
func ValidateBinding(ev *Evidence, reportData []byte, checks *verdict.Checks) error {
	if !bytes.Equal(ev.Doc.UserData, reportData) {
		return checks.Failf("binding.report_data", "user_data %x does not equal the expected report data %x", trunc(ev.Doc.UserData), reportData)
	}
	if len(ev.Doc.Nonce) > 0 && !bytes.Equal(ev.Doc.Nonce, reportData) {
		return checks.Failf("binding.nonce", "nonce %x does not equal the expected report data", trunc(ev.Doc.Nonce))
	}
	checks.Pass("binding.report_data", "user_data binds %x", reportData)
	return nil
}

func trunc(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

func inHexList(v []byte, list []string) bool {
	for _, s := range list {
		if b, err := hex.DecodeString(s); err == nil && bytes.Equal(b, v) {
			return true
		}
	}
	return false
}
