package attest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/go-sev-guest/verify/trust"

	"github.com/tenzro/train/attest/nitro"
	"github.com/tenzro/train/attest/simroots"
	"github.com/tenzro/train/attest/snp"
	"github.com/tenzro/train/attest/tdx"
	"github.com/tenzro/train/attest/verdict"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Check, Checks and Refusal are re-exported from attest/verdict.
type (
	Check   = verdict.Check
	Refusal = verdict.Refusal
)

// FailedCheck names the failed check of a refusal ("" otherwise).
func FailedCheck(err error) string { return verdict.FailedCheck(err) }

// DomainEvidence prefixes the evidence digest recorded in receipts.
const DomainEvidence = "tenzro/train/attest/evidence/v1"

// Result is the outcome of a verification: exactly which checks ran, in
// order, with their outcomes, and the claims of the evidence.
type Result struct {
	Vendor     string    `json:"vendor"`
	Accepted   bool      `json:"accepted"`
	Simulated  bool      `json:"simulated"`
	At         time.Time `json:"verified_at"`
	PolicyUsed bool      `json:"policy_applied"`
	TCBStatus  string    `json:"tcb_status,omitempty"`
	Product    string    `json:"product,omitempty"`
	Digest     wire.Hash `json:"digest"`
	ReportData string    `json:"report_data"`
	Claims     any       `json:"claims,omitempty"`
	Checks     []Check   `json:"checks"`
	Error      string    `json:"error,omitempty"`
	FailedAt   string    `json:"failed_check,omitempty"`
}

// Options configures a Checker.
type Options struct {
	// Clock is the pinned clock (nil: time.Now).
	Clock func() time.Time
	// CollateralDir is the TDX collateral cache (tdx.CacheDir layout).
	CollateralDir string
	// SNPRoots overrides the pinned AMD roots (nil: VCEK and VLEK roots for
	// Milan, Genoa, Turin).
	SNPRoots map[string][]*trust.AMDRootCerts
	// Replay records the report data of accepted evidence; nil: in memory.
	Replay ReplayGuard
	Logger *slog.Logger
}

// ReplayGuard remembers accepted report data. MarkUsed returns false when
// the value was already used.
type ReplayGuard interface {
	MarkUsed(ctx context.Context, reportData wire.Hash) (fresh bool, err error)
}

// Checker verifies evidence envelopes; it implements syncer.Attestor.
type Checker struct {
	opts Options
}

var _ syncer.Attestor = (*Checker)(nil)

// NewChecker returns a Checker.
func NewChecker(opts Options) *Checker {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Replay == nil {
		opts.Replay = &memReplay{m: map[wire.Hash]struct{}{}}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Checker{opts: opts}
}

// Digest is the evidence digest recorded in receipts: SHA-256 over the
// canonical encoding of DomainEvidence, the vendor and the raw evidence.
func Digest(vendor string, evidence []byte) wire.Hash {
	return wire.NewCanon(DomainEvidence).Str(vendor).Bytes(evidence).Sum()
}

// CheckEvidence implements syncer.Attestor: the envelope must verify, pass
// the tier's policy, bind reportData, and not have been used before.
func (c *Checker) CheckEvidence(ctx context.Context, tier string, policy []byte, evidence []byte, reportData wire.Hash) (wire.Hash, error) {
	p, err := ParsePolicy(policy, tier)
	if err != nil {
		return wire.Hash{}, syncer.Errf(syncer.KindAttestation, "attestation: check policy failed: %v", err)
	}
	res, err := c.Verify(ctx, evidence, p, c.opts.Clock(), &reportData)
	if err != nil {
		return wire.Hash{}, &syncer.Error{Kind: syncer.KindAttestation, Msg: err.Error()}
	}
	fresh, err := c.opts.Replay.MarkUsed(ctx, reportData)
	if err != nil {
		return wire.Hash{}, fmt.Errorf("attestation replay guard: %w", err)
	}
	if !fresh {
		return wire.Hash{}, &syncer.Error{Kind: syncer.KindAttestation, Msg: (&Refusal{Check: "binding.replay", Err: fmt.Errorf("report data %s was already used (replayed nonce)", reportData)}).Error()}
	}
	c.opts.Logger.Debug("attestation accepted", "vendor", res.Vendor, "digest", res.Digest, "simulated", res.Simulated)
	return res.Digest, nil
}

// Verify verifies an envelope at time at. With p nil it checks
// authenticity only (parse, signature, chain, collateral, debug) and
// returns the claims; with p it also validates. With expected non-nil the
// report data must bind it. The returned Result lists every check that
// ran; err is a *Refusal naming the failed one.
func (c *Checker) Verify(ctx context.Context, envelope []byte, p *Policy, at time.Time, expected *wire.Hash) (*Result, error) {
	res := &Result{At: at.UTC(), PolicyUsed: p != nil}
	var checks verdict.Checks
	fail := func(err error) (*Result, error) {
		res.Checks = checks.List
		res.Error = err.Error()
		res.FailedAt = verdict.FailedCheck(err)
		return res, err
	}
	env, err := ParseEnvelope(envelope)
	if err != nil {
		return fail(checks.Fail("envelope", err))
	}
	res.Vendor = env.Vendor
	res.Digest = Digest(env.Vendor, env.Evidence)
	checks.Pass("envelope", "vendor %s, %d bytes of evidence", env.Vendor, len(env.Evidence))
	allowSim := p != nil && p.AllowSimulated && simroots.Available()
	var reportData []byte
	switch env.Vendor {
	case VendorSNP:
		if p != nil && p.SNP == nil {
			return fail(checks.Failf("policy.vendor", "policy has no snp section"))
		}
		ev, err := snp.Parse(env.Evidence, env.CertTable, env.Certs)
		if err != nil {
			return fail(checks.Fail("snp.parse", err))
		}
		checks.Pass("snp.parse", "report v%d signed by %v", ev.Report.GetVersion(), ev.Signer)
		res.Claims = ev.Claims()
		v, err := snp.Verify(ctx, ev, snp.VerifyOptions{Now: at, Roots: c.opts.SNPRoots, AllowSimulated: allowSim}, &checks)
		if err != nil {
			return fail(err)
		}
		res.Simulated, res.Product = v.Simulated, v.Product
		if p != nil {
			if err := snp.Validate(ev, p.SNP, &checks); err != nil {
				return fail(err)
			}
		} else if ev.Claims().Debug {
			return fail(checks.Failf("snp.guest_policy.debug", "guest policy allows debugging"))
		}
		reportData = ev.Report.GetReportData()
	case VendorTDX:
		if p != nil && p.TDX == nil {
			return fail(checks.Failf("policy.vendor", "policy has no tdx section"))
		}
		ev, err := tdx.Parse(env.Evidence)
		if err != nil {
			return fail(checks.Fail("tdx.parse", err))
		}
		checks.Pass("tdx.parse", "quote, FMSPC %s", ev.FMSPC)
		res.Claims = ev.Claims()
		col, err := c.collateral(env, ev.FMSPC)
		if err != nil {
			return fail(checks.Fail("tdx.collateral", err))
		}
		var statuses []string
		if p != nil {
			statuses = p.TDX.TCBStatus
		}
		v, err := tdx.Verify(ctx, ev, tdx.VerifyOptions{Now: at, Collateral: col, TCBStatuses: statuses, AllowSimulated: allowSim}, &checks)
		if err != nil {
			return fail(err)
		}
		res.TCBStatus, res.Simulated = v.TCBStatus, v.Simulated
		if err := tdx.ValidateDebug(ev, &checks); err != nil {
			return fail(err)
		}
		if p != nil {
			if err := tdx.Validate(ev, p.TDX, &checks); err != nil {
				return fail(err)
			}
		}
		reportData = ev.Body.GetReportData()
	case VendorNitro:
		if p != nil && p.Nitro == nil {
			return fail(checks.Failf("policy.vendor", "policy has no nitro section"))
		}
		ev, err := nitro.Parse(env.Evidence)
		if err != nil {
			return fail(checks.Fail("nitro.parse", err))
		}
		checks.Pass("nitro.parse", "module %s issued %s", ev.Doc.ModuleID, ev.IssuedAt.Format(time.RFC3339))
		res.Claims = ev.Claims()
		v, err := nitro.Verify(ev, nitro.VerifyOptions{Now: at, AllowSimulated: allowSim}, &checks)
		if err != nil {
			return fail(err)
		}
		res.Simulated = v.Simulated
		if err := nitro.ValidateDebug(ev, &checks); err != nil {
			return fail(err)
		}
		if p != nil {
			if err := nitro.Validate(ev, p.Nitro, at, &checks); err != nil {
				return fail(err)
			}
		}
		if expected != nil {
			if err := nitro.ValidateBinding(ev, expected[:], &checks); err != nil {
				return fail(err)
			}
		}
		reportData = ev.Doc.UserData
	}
	res.ReportData = fmt.Sprintf("%x", reportData)
	if expected != nil && env.Vendor != VendorNitro {
		want := make([]byte, 64)
		copy(want, expected[:])
		if !bytes.Equal(reportData, want) {
			return fail(checks.Failf("binding.report_data", "REPORTDATA %x is not the expected binding %x followed by 32 zero bytes", reportData, expected[:]))
		}
		checks.Pass("binding.report_data", "REPORTDATA binds %x", expected[:])
	}
	res.Accepted = true
	res.Checks = checks.List
	return res, nil
}

func (c *Checker) collateral(env *Envelope, fmspc string) (*tdx.Collateral, error) {
	if len(env.Collateral) > 0 {
		return tdx.ParseCollateral(env.Collateral)
	}
	return tdx.CacheDir(c.opts.CollateralDir).Load(fmspc)
}

type memReplay struct {
	mu sync.Mutex
	m  map[wire.Hash]struct{}
}

func (r *memReplay) MarkUsed(_ context.Context, h wire.Hash) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[h]; ok {
		return false, nil
	}
	r.m[h] = struct{}{}
	return true, nil
}
