package tdx

import (
	"bytes"
	"encoding/hex"
	"fmt"

	pb "github.com/google/go-tdx-guest/proto/tdx"
	"github.com/google/go-tdx-guest/validate"

	"github.com/tenzro/train/attest/verdict"
)

// Policy is the TDX part of an attestation policy (JSON). Measurements are
// 48-byte hex.
type Policy struct {
	MRTD   []string `json:"mrtd,omitempty"`
	RTMR0  []string `json:"rtmr0,omitempty"`
	RTMR1  []string `json:"rtmr1,omitempty"`
	RTMR2  []string `json:"rtmr2,omitempty"`
	RTMR3  []string `json:"rtmr3,omitempty"`
	MRSEAM []string `json:"mrseam,omitempty"`
	// TCBStatus allowlists TCB statuses (default ["UpToDate"]).
	TCBStatus []string `json:"tcb_status,omitempty"`
	// MinTEETCBSVN is the component-wise minimum TEE_TCB_SVN (16-byte hex).
	MinTEETCBSVN string `json:"min_tee_tcb_svn,omitempty"`
}

// Check reports problems in the policy itself.
func (p *Policy) Check() error {
	for name, l := range map[string][]string{"mrtd": p.MRTD, "rtmr0": p.RTMR0, "rtmr1": p.RTMR1, "rtmr2": p.RTMR2, "rtmr3": p.RTMR3, "mrseam": p.MRSEAM} {
		for _, v := range l {
			if b, err := hex.DecodeString(v); err != nil || len(b) != 48 {
				return fmt.Errorf("tdx policy: %s value %q is not 48 bytes of hex", name, v)
			}
		}
	}
	if p.MinTEETCBSVN != "" {
		if b, err := hex.DecodeString(p.MinTEETCBSVN); err != nil || len(b) != 16 {
			return fmt.Errorf("tdx policy: min_tee_tcb_svn is not 16 bytes of hex")
		}
	}
	return nil
}

// ValidateDebug refuses a TD with the DEBUG attribute; it runs with and
// without a policy.
func ValidateDebug(ev *Evidence, checks *verdict.Checks) error {
	if IsDebug(ev.Body.GetTdAttributes()) {
		return checks.Failf("tdx.debug", "TD_ATTRIBUTES %x has the DEBUG bit set", ev.Body.GetTdAttributes())
	}
	checks.Pass("tdx.debug", "DEBUG attribute clear")
	return nil
}

// Validate checks the verified quote against the policy.
func Validate(ev *Evidence, p *Policy, checks *verdict.Checks) error {
	if err := p.Check(); err != nil {
		return checks.Fail("tdx.policy", err)
	}
	if q, ok := ev.Quote.(*pb.QuoteV4); ok {
		// The library's attribute/XFAM checks; fresh options, debug check on.
		o := &validate.Options{TdQuoteBodyOptions: validate.TdQuoteBodyOptions{EnableTdDebugCheck: true}}
		if err := validate.TdxQuote(q, o); err != nil {
			return checks.Fail("tdx.attributes", err)
		}
		checks.Pass("tdx.attributes", "TD attributes and XFAM within the fixed bits")
	}
	rt := ev.Body.GetRtmrs()
	for _, f := range []struct {
		name string
		v    []byte
		list []string
	}{{"tdx.mrtd", ev.Body.GetMrTd(), p.MRTD}, {"tdx.rtmr0", at(rt, 0), p.RTMR0}, {"tdx.rtmr1", at(rt, 1), p.RTMR1},
		{"tdx.rtmr2", at(rt, 2), p.RTMR2}, {"tdx.rtmr3", at(rt, 3), p.RTMR3}, {"tdx.mrseam", ev.Body.GetMrSeam(), p.MRSEAM}} {
		if len(f.list) == 0 {
			continue
		}
		if !inHexList(f.v, f.list) {
			return checks.Failf(f.name, "%x not in the allowlist", f.v)
		}
		checks.Pass(f.name, "%x allowlisted", f.v)
	}
	if p.MinTEETCBSVN != "" {
		min, _ := hex.DecodeString(p.MinTEETCBSVN)
		svn := ev.Body.GetTeeTcbSvn()
		for i := range min {
			if i >= len(svn) || svn[i] < min[i] {
				return checks.Failf("tdx.tee_tcb_svn", "TEE_TCB_SVN %x below minimum %x", svn, min)
			}
		}
		checks.Pass("tdx.tee_tcb_svn", "%x meets minimum", svn)
	}
	return nil
}

func at(l [][]byte, i int) []byte {
	if i < len(l) {
		return l[i]
	}
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
