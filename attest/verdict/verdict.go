// Package verdict holds the small types every attestation verifier shares:
// a named check with its outcome, the list of checks a verification ran, and
// the refusal error that names the failing check. It is a leaf package so the
// per-vendor verifiers (attest/tdx, attest/snp, attest/nitro) and the policy
// layer (attest) can all use it without import cycles.
package verdict

import (
	"errors"
	"fmt"
)

// Check is one named verification step and its outcome.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
	// Unknown marks a check that could not be decided (its collateral is
	// missing); OK is false. Whether that refuses is the policy's decision.
	Unknown bool `json:"unknown,omitempty"`
}

// Checks records the checks a verification ran, in order.
type Checks struct {
	List []Check `json:"checks"`
}

// Pass records a passed check.
func (c *Checks) Pass(name, detailFmt string, a ...any) {
	c.List = append(c.List, Check{Name: name, OK: true, Detail: fmt.Sprintf(detailFmt, a...)})
}

// Unknown records a check that could not be decided for lack of collateral.
func (c *Checks) Unknown(name, detailFmt string, a ...any) {
	c.List = append(c.List, Check{Name: name, Unknown: true, Detail: fmt.Sprintf(detailFmt, a...)})
}

// Fail records a failed check and returns the refusal naming it.
func (c *Checks) Fail(name string, err error) error {
	c.List = append(c.List, Check{Name: name, OK: false, Detail: err.Error()})
	return &Refusal{Check: name, Err: err}
}

// Failf is Fail with a formatted error.
func (c *Checks) Failf(name, format string, a ...any) error {
	return c.Fail(name, fmt.Errorf(format, a...))
}

// Refusal is the error of a refused piece of evidence: Check names the step
// that failed (for example "snp.policy.debug" or "nitro.chain").
type Refusal struct {
	Check string
	Err   error
}

func (r *Refusal) Error() string {
	return "attestation refused: check " + r.Check + " failed: " + r.Err.Error()
}

// Unwrap returns the cause.
func (r *Refusal) Unwrap() error { return r.Err }

// FailedCheck returns the name of the failed check carried by err, or "" when
// err is not a refusal.
func FailedCheck(err error) string {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Check
	}
	return ""
}
