package attest

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/go-sev-guest/verify/trust"

	"github.com/tenzro/train/attest/nitro"
	"github.com/tenzro/train/attest/nvidia"
	"github.com/tenzro/train/attest/simroots"
	"github.com/tenzro/train/attest/snp"
	"github.com/tenzro/train/attest/tdx"
	"github.com/tenzro/train/attest/verdict"
	"github.com/tenzro/train/machine"
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
const DomainEvidence = wire.DomainEvidence

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
	// NvidiaCollateralDir is the NVIDIA collateral cache (RIMs and OCSP
	// responses, nvidia.LoadCollateral layout); "" is CollateralDir.
	NvidiaCollateralDir string
	// SNPRoots overrides the pinned AMD roots (nil: VCEK and VLEK roots for
	// Milan, Genoa, Turin).
	SNPRoots map[string][]*trust.AMDRootCerts
	// Replay records the report data of accepted evidence; nil: in memory.
	Replay ReplayGuard
	Logger *slog.Logger
	// CacheEntries bounds each verified-chain cache (SEV-SNP endorsement-key
	// chains, Nitro document chains, TDX PCK chains with their collateral,
	// NVIDIA device chains and RIMs): 0 is the packages' default (1024);
	// negative disables caching, so every chain and all collateral is
	// verified on every call. Cached or not, every check particular to the
	// evidence runs on every call (docs/RATIONALE.md).
	CacheEntries int
}

// ReplayGuard remembers accepted report data. MarkUsed returns false when
// the value was already used.
type ReplayGuard interface {
	MarkUsed(ctx context.Context, reportData wire.Hash) (fresh bool, err error)
}

// Checker verifies evidence envelopes; it implements syncer.Attestor (the
// node's pre-check) and, through ConsensusVerifier, machine.EvidenceVerifier
// (every validator's check): one set of rules for both.
type Checker struct {
	opts       Options
	nvCache    *nvidia.Cache
	snpCache   *snp.Cache
	nitroCache *nitro.Cache
	tdxCache   *tdx.Cache
}

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
	c := &Checker{opts: opts, snpCache: snp.NewCache(opts.CacheEntries), nitroCache: nitro.NewCache(opts.CacheEntries), tdxCache: tdx.NewCache(opts.CacheEntries)}
	if opts.CacheEntries >= 0 {
		c.nvCache = nvidia.NewCache()
	}
	return c
}

// Digest is the evidence digest recorded in receipts: SHA-256 over the
// canonical encoding of DomainEvidence, the vendor and the raw evidence.
func Digest(vendor string, evidence []byte) wire.Hash {
	return wire.EvidenceDigest(vendor, evidence, "", nil, false)
}

// EnvelopeDigest is the digest of an envelope: Digest(vendor, evidence)
// without GPU evidence; with it, the same encoding followed by Str("nvidia")
// and Bytes(GPU report), so a receipt's digest names the GPU evidence each
// accepted submission carried.
func EnvelopeDigest(e *Envelope) wire.Hash {
	if e.GPU == nil {
		return Digest(e.Vendor, e.Evidence)
	}
	return wire.EvidenceDigest(e.Vendor, e.Evidence, e.GPU.Vendor, e.GPU.Report, true)
}

// VerifyParams are the inputs of one verification besides the envelope.
type VerifyParams struct {
	Policy *Policy    // nil: authenticity only
	At     time.Time  // pinned verification time
	Expect *wire.Hash // the binding the evidence must carry (nil: not checked)
	// GPUNonce is the nonce a GPU report must carry when Expect is nil
	// (`tenzro attest verify --nonce`); with Expect it is GPUNonce(*Expect).
	GPUNonce []byte
	// DriverRIM and VBIOSRIM pin the RIMs to compare with (like cc_admin's
	// --driver_rim / --vbios_rim); otherwise they come from collateral.
	DriverRIM, VBIOSRIM []byte
}

// CheckEvidence implements syncer.Attestor (the receiving node's pre-check,
// at the node's clock): Judge, then the node's replay guard.
func (c *Checker) CheckEvidence(ctx context.Context, tier string, policy []byte, evidence []byte, reportData wire.Hash) (wire.Hash, error) {
	dg, err := c.Judge(ctx, tier, policy, evidence, c.opts.Clock(), reportData)
	if err != nil {
		return wire.Hash{}, err
	}
	fresh, err := c.opts.Replay.MarkUsed(ctx, reportData)
	if err != nil {
		return wire.Hash{}, fmt.Errorf("attestation replay guard: %w", err)
	}
	if !fresh {
		return wire.Hash{}, &machine.Error{Kind: machine.KindAttestation, Msg: (&Refusal{Check: "binding.replay", Err: fmt.Errorf("report data %s was already used (replayed nonce)", reportData)}).Error()}
	}
	return dg, nil
}

// Judge is the one rule for a trainer's evidence, used by the node's
// pre-check (CheckEvidence) and by every validator (ConsensusVerifier): the
// envelope must verify at time at, pass the tier's policy and bind
// reportData, and a GPU report alone is not a trainer's evidence. It
// returns the evidence digest; a refusal is a *machine.Error of kind
// KindAttestation naming the failed check.
func (c *Checker) Judge(ctx context.Context, tier string, policy []byte, evidence []byte, at time.Time, reportData wire.Hash) (wire.Hash, error) {
	p, err := ParsePolicy(policy, tier)
	if err != nil {
		return wire.Hash{}, machine.Errf(machine.KindAttestation, "attestation: check policy failed: %v", err)
	}
	res, err := c.Verify(ctx, evidence, p, at, &reportData)
	if err != nil {
		return wire.Hash{}, &machine.Error{Kind: machine.KindAttestation, Msg: err.Error()}
	}
	if res.Vendor == VendorNvidia {
		return wire.Hash{}, &machine.Error{Kind: machine.KindAttestation, Msg: (&Refusal{Check: "binding.composite", Err: fmt.Errorf("a GPU report alone does not attest a trainer: send it as the gpu part of TDX or SEV-SNP evidence")}).Error()}
	}
	c.opts.Logger.Debug("attestation accepted", "vendor", res.Vendor, "digest", res.Digest, "simulated", res.Simulated, "at", at)
	return res.Digest, nil
}

// ConsensusVerifier is the machine's evidence verifier
// (machine.EvidenceVerifier): Judge at the block's time, with collateral
// only from the envelope (no collateral directory, no network) and no
// caches, so every validator computes the same verdict from the
// transaction's bytes. Replay is the machine's (chain state).
type ConsensusVerifier struct{ c *Checker }

var _ machine.EvidenceVerifier = (*ConsensusVerifier)(nil)

// NewConsensusVerifier returns the verifier every validator runs.
func NewConsensusVerifier() *ConsensusVerifier {
	return &ConsensusVerifier{c: NewChecker(Options{CacheEntries: -1, Clock: func() time.Time { return time.Time{} }})}
}

// VerifyEvidence implements machine.EvidenceVerifier.
func (v *ConsensusVerifier) VerifyEvidence(ctx context.Context, tier string, policy, envelope []byte, at time.Time, reportData wire.Hash) (wire.Hash, error) {
	return v.c.Judge(ctx, tier, policy, envelope, at, reportData)
}

// Verify verifies an envelope at time at. With p nil it checks
// authenticity only (parse, signature, chain, collateral, debug) and
// returns the claims; with p it also validates. With expected non-nil the
// report data must bind it. The returned Result lists every check that
// ran; err is a *Refusal naming the failed one.
func (c *Checker) Verify(ctx context.Context, envelope []byte, p *Policy, at time.Time, expected *wire.Hash) (*Result, error) {
	return c.VerifyWith(ctx, envelope, VerifyParams{Policy: p, At: at, Expect: expected})
}

// VerifyWith is Verify with every parameter.
func (c *Checker) VerifyWith(ctx context.Context, envelope []byte, vp VerifyParams) (*Result, error) {
	p, at, expected := vp.Policy, vp.At, vp.Expect
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
	res.Digest = EnvelopeDigest(env)
	if env.GPU != nil {
		checks.Pass("envelope", "vendor %s, %d bytes of evidence, with a %d-byte %s GPU report", env.Vendor, len(env.Evidence), len(env.GPU.Report), env.GPU.Vendor)
	} else {
		checks.Pass("envelope", "vendor %s, %d bytes of evidence", env.Vendor, len(env.Evidence))
	}
	allowSim := p != nil && p.AllowSimulated && simroots.Available()
	if p != nil && env.Vendor != VendorNvidia {
		if p.NvidiaCC != nil && env.GPU == nil {
			return fail(checks.Failf("nvidia.missing", "the policy requires GPU evidence (nvidia_cc) and the envelope carries none"))
		}
		if p.NvidiaCC == nil && env.GPU != nil {
			return fail(checks.Failf("policy.vendor", "policy has no nvidia_cc section for the GPU evidence"))
		}
	}
	var reportData []byte
	switch env.Vendor {
	case VendorNvidia:
		if p != nil && p.NvidiaCC == nil {
			return fail(checks.Failf("policy.vendor", "policy has no nvidia_cc section"))
		}
		gpu := &GPUEvidence{Vendor: VendorNvidia, Report: env.Evidence, Certs: env.Certs}
		nonce := vp.GPUNonce
		if expected != nil {
			n := GPUNonce(*expected)
			nonce = n[:]
		}
		claims, sim, err := c.verifyGPU(gpu, p, at, nonce, allowSim, vp, &checks)
		res.Claims = claims
		if err != nil {
			return fail(err)
		}
		res.Simulated = sim
		res.Accepted = true
		res.Checks = checks.List
		return res, nil
	case VendorSNP:
		if p != nil && p.SNP == nil {
			return fail(checks.Failf("policy.vendor", "policy has no snp section"))
		}
		ev, err := c.snpCache.Parse(env.Evidence, env.CertTable, env.Certs)
		if err != nil {
			return fail(checks.Fail("snp.parse", err))
		}
		checks.Pass("snp.parse", "report v%d signed by %v", ev.Report.GetVersion(), ev.Signer)
		res.Claims = ev.Claims()
		v, err := snp.Verify(ctx, ev, snp.VerifyOptions{Now: at, Roots: c.opts.SNPRoots, AllowSimulated: allowSim, Cache: c.snpCache}, &checks)
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
		ev, err := c.tdxCache.Parse(env.Evidence)
		if err != nil {
			return fail(checks.Fail("tdx.parse", err))
		}
		checks.Pass("tdx.parse", "quote, FMSPC %s", ev.FMSPC)
		res.Claims = ev.Claims()
		col, err := c.collateral(env, ev.FMSPC)
		if errors.Is(err, tdx.ErrNoCollateral) {
			col = nil // signatures and chain are still checked; TCB status unknown
		} else if err != nil {
			return fail(checks.Fail("tdx.collateral", err))
		}
		var statuses []string
		if p != nil {
			statuses = p.TDX.TCBStatus
		}
		v, err := tdx.Verify(ctx, ev, tdx.VerifyOptions{Now: at, Collateral: col, TCBStatuses: statuses, AllowSimulated: allowSim, Cache: c.tdxCache}, &checks)
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
		ev, err := c.nitroCache.Parse(env.Evidence)
		if err != nil {
			return fail(checks.Fail("nitro.parse", err))
		}
		checks.Pass("nitro.parse", "module %s issued %s", ev.Doc.ModuleID, ev.IssuedAt.Format(time.RFC3339))
		res.Claims = ev.Claims()
		v, err := nitro.Verify(ev, nitro.VerifyOptions{Now: at, AllowSimulated: allowSim, Cache: c.nitroCache}, &checks)
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
		want := make([]byte, 32)
		copy(want, expected[:])
		if !bytes.Equal(reportData[:32], want) {
			return fail(checks.Failf("binding.report_data", "REPORTDATA %x does not begin with the expected binding %x", reportData, expected[:]))
		}
		checks.Pass("binding.report_data", "REPORTDATA binds %x", expected[:])
	}
	if (env.Vendor == VendorTDX || env.Vendor == VendorSNP) && (expected != nil || env.GPU != nil) {
		second := make([]byte, 32)
		what := "32 zero bytes (no GPU evidence)"
		if env.GPU != nil {
			h := GPUReportHash(env.GPU.Report)
			second, what = h[:], "the GPU report's hash "+h.String()
		}
		if len(reportData) != 64 || !bytes.Equal(reportData[32:], second) {
			name := "binding.report_data"
			if env.GPU != nil {
				name = "binding.gpu_report"
			}
			return fail(checks.Failf(name, "REPORTDATA's second half %x is not %s", reportData[min(32, len(reportData)):], what))
		}
		if env.GPU != nil {
			checks.Pass("binding.gpu_report", "REPORTDATA's second half is %s", what)
		}
	}
	if env.GPU != nil {
		var nonce []byte
		if expected != nil {
			n := GPUNonce(*expected)
			nonce = n[:]
		} else {
			// Without an expected binding, the GPU nonce must still be the
			// one derived from the binding the CPU evidence carries.
			var rd wire.Hash
			copy(rd[:], reportData[:32])
			n := GPUNonce(rd)
			nonce = n[:]
		}
		gclaims, sim, err := c.verifyGPU(env.GPU, p, at, nonce, allowSim, vp, &checks)
		res.Claims = map[string]any{"cpu": res.Claims, "gpu": gclaims}
		if err != nil {
			return fail(err)
		}
		res.Simulated = res.Simulated || sim
	}
	res.Accepted = true
	res.Checks = checks.List
	return res, nil
}

// verifyGPU runs the NVIDIA checks in order: parse, chain and signature,
// nonce, collateral (revocation, RIMs, measurements), policy.
func (c *Checker) verifyGPU(gpu *GPUEvidence, p *Policy, at time.Time, nonce []byte, allowSim bool, vp VerifyParams, checks *verdict.Checks) (*nvidia.Claims, bool, error) {
	rep, err := nvidia.Parse(gpu.Report)
	if err != nil {
		return nil, false, checks.Fail("nvidia.parse", err)
	}
	var chain []*x509.Certificate
	for i, d := range gpu.Certs {
		if len(d) > 8<<10 {
			return nil, false, checks.Failf("nvidia.parse", "certificate %d is %d bytes", i, len(d))
		}
		cs, err := nvidia.ParseChain(d)
		if err != nil {
			return nil, false, checks.Fail("nvidia.parse", err)
		}
		chain = append(chain, cs...)
	}
	if len(chain) == 0 || len(chain) > nvidia.MaxChainCert {
		return nil, false, checks.Failf("nvidia.parse", "%d certificates in the device chain", len(chain))
	}
	checks.Pass("nvidia.parse", "SPDM 1.1 report, %d measurement blocks, driver %s, VBIOS %s, %d certificates", len(rep.Blocks), rep.DriverVersion, rep.VBIOSVersion, len(chain))
	var roots nvidia.Roots
	sim := false
	for _, ct := range chain {
		if simroots.IsSimulated(ct) {
			sim = true
		}
	}
	if sim {
		if !allowSim {
			return nvidia.ClaimsOf(rep, nil), true, checks.Failf("nvidia.simulated", "GPU chain is from the SIMULATED GPU provider; the policy does not allow simulated evidence")
		}
		d, r, err := simroots.Nvidia()
		if err != nil {
			return nil, true, checks.Fail("nvidia.simulated", err)
		}
		roots = nvidia.Roots{Device: d.Cert, RIM: r.Cert, Label: "the SIMULATED test root (allow_simulated)"}
	}
	verified, err := nvidia.Verify(rep, chain, nvidia.VerifyOptions{Now: at, Roots: roots, Cache: c.nvCache}, checks)
	claims := nvidia.ClaimsOf(rep, verified)
	if err != nil {
		return claims, sim, err
	}
	if nonce != nil {
		if err := nvidia.ValidateNonce(rep, nonce, checks); err != nil {
			return claims, sim, err
		}
	} else {
		checks.Unknown("nvidia.nonce", "no expected nonce given: freshness not checked")
	}
	col, err := c.nvidiaCollateral(gpu, vp)
	if err != nil {
		return claims, sim, checks.Fail("nvidia.collateral", err)
	}
	copts := nvidia.CollateralOptions{Now: at, Roots: roots, Collateral: col, Cache: c.nvCache}
	if p != nil && p.NvidiaCC != nil {
		copts.AllowUnknownRevocation, copts.AllowUnknownMeasurements = p.NvidiaCC.AllowUnknownRevocation, p.NvidiaCC.AllowUnknownMeasurements
	}
	if err := nvidia.CheckCollateral(rep, verified, copts, claims, checks); err != nil {
		return claims, sim, err
	}
	if p != nil && p.NvidiaCC != nil {
		if err := nvidia.Validate(rep, claims, p.NvidiaCC, checks); err != nil {
			return claims, sim, err
		}
	}
	return claims, sim, nil
}

func (c *Checker) nvidiaCollateral(gpu *GPUEvidence, vp VerifyParams) (*nvidia.Collateral, error) {
	dir := c.opts.NvidiaCollateralDir
	if dir == "" {
		dir = c.opts.CollateralDir
	}
	col, err := nvidia.LoadCollateral(dir)
	if err != nil {
		return nil, err
	}
	col.RIMs = append(col.RIMs, gpu.RIMs...)
	for k, v := range gpu.OCSP {
		if len(v) > nvidia.MaxOCSPResponse {
			return nil, fmt.Errorf("OCSP response for %s is %d bytes", k, len(v))
		}
		if _, ok := col.OCSP[k]; !ok {
			col.OCSP[k] = v
		}
	}
	col.DriverRIM, col.VBIOSRIM = vp.DriverRIM, vp.VBIOSRIM
	return col, nil
}

func (c *Checker) collateral(env *Envelope, fmspc string) (*tdx.Collateral, error) {
	if len(env.Collateral) > 0 {
		return c.tdxCache.ParseCollateral(env.Collateral)
	}
	return c.tdxCache.Load(tdx.CacheDir(c.opts.CollateralDir), fmspc)
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
