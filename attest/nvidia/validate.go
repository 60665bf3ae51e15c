package nvidia

import (
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tenzro/train/attest/verdict"
)

// Policy is the nvidia_cc part of an attestation policy (JSON).
type Policy struct {
	// Architectures allowlists GPU architectures ("HOPPER", "BLACKWELL");
	// empty: any.
	Architectures []string `json:"architectures,omitempty"`
	// CCMode must be "on": the report's measurements must have been
	// compared with NVIDIA's RIMs and matched (the golden values are those
	// of a GPU in CC mode; a GPU with CC off cannot produce them), so
	// "on" refuses unknown measurements whatever AllowUnknownMeasurements
	// says.
	CCMode string `json:"cc_mode"`
	// MinDriverVersion and MinVBIOSVersion are minimum versions, compared
	// part by part ("550.90.07"; VBIOS parts are hex: "96.00.9f.00.01").
	MinDriverVersion string `json:"min_driver_version,omitempty"`
	MinVBIOSVersion  string `json:"min_vbios_version,omitempty"`
	// Measurements pins measurement blocks beyond the RIMs: block index
	// (1-based, as in the report) to accepted values (48-byte hex).
	Measurements map[string][]string `json:"measurements,omitempty"`
	// AllowUnknownRevocation accepts evidence whose OCSP collateral is
	// missing (the chain and signature still must hold).
	AllowUnknownRevocation bool `json:"allow_unknown_revocation,omitempty"`
	// AllowUnknownMeasurements accepts evidence whose RIMs are missing.
	AllowUnknownMeasurements bool `json:"allow_unknown_measurements,omitempty"`
}

// Check reports problems in the policy itself.
func (p *Policy) Check() error {
	if p.CCMode != "on" {
		return fmt.Errorf("nvidia_cc policy: cc_mode must be \"on\" (got %q)", p.CCMode)
	}
	for _, a := range p.Architectures {
		if a != "HOPPER" && a != "BLACKWELL" {
			return fmt.Errorf("nvidia_cc policy: architecture %q (want HOPPER or BLACKWELL)", a)
		}
	}
	if p.MinDriverVersion != "" {
		if _, err := versionParts(p.MinDriverVersion, 10); err != nil {
			return fmt.Errorf("nvidia_cc policy: min_driver_version: %w", err)
		}
	}
	if p.MinVBIOSVersion != "" {
		if _, err := versionParts(p.MinVBIOSVersion, 16); err != nil {
			return fmt.Errorf("nvidia_cc policy: min_vbios_version: %w", err)
		}
	}
	for k, vs := range p.Measurements {
		if i, err := strconv.Atoi(k); err != nil || i < 1 || i > MaxBlocks {
			return fmt.Errorf("nvidia_cc policy: measurement index %q (want 1..%d)", k, MaxBlocks)
		}
		for _, v := range vs {
			if b, err := hex.DecodeString(v); err != nil || len(b) != 48 {
				return fmt.Errorf("nvidia_cc policy: measurement %s value %q is not 48 bytes of hex", k, v)
			}
		}
	}
	return nil
}

// Architecture names the GPU architecture from the attestation
// certificate's subject ("GH100 A01 GSP FMC LF" → HOPPER), which the
// verified chain vouches for.
func Architecture(leaf *x509.Certificate) string {
	cn := leaf.Subject.CommonName
	switch {
	case strings.HasPrefix(cn, "GH1"):
		return "HOPPER"
	case strings.HasPrefix(cn, "GB1"), strings.HasPrefix(cn, "GB2"):
		return "BLACKWELL"
	}
	return "UNKNOWN"
}

// Claims are what a verified report says, for results and receipts.
type Claims struct {
	Architecture  string `json:"architecture"`
	Chip          string `json:"chip"`
	DriverVersion string `json:"driver_version"`
	VBIOSVersion  string `json:"vbios_version"`
	FWID          string `json:"fwid,omitempty"`
	Nonce         string `json:"nonce"`
	Measurements  int    `json:"measurement_blocks"`
	// MeasurementStatus and RevocationStatus are "matched"/"good",
	// "unknown" (collateral missing, accepted by the policy) or absent.
	MeasurementStatus string `json:"measurement_status,omitempty"`
	RevocationStatus  string `json:"revocation_status,omitempty"`
	DriverRIM         string `json:"driver_rim_version,omitempty"`
	VBIOSRIM          string `json:"vbios_rim_version,omitempty"`
}

// ClaimsOf returns the claims of a report verified with chain.
func ClaimsOf(r *Report, chain []*x509.Certificate) *Claims {
	c := &Claims{DriverVersion: r.DriverVersion, VBIOSVersion: r.VBIOSVersion, FWID: hex.EncodeToString(r.FWID),
		Nonce: hex.EncodeToString(r.Nonce[:]), Measurements: len(r.Blocks)}
	if len(chain) > 0 {
		c.Architecture = Architecture(chain[0])
		c.Chip, _, _ = strings.Cut(chain[0].Subject.CommonName, " ")
	}
	return c
}

// ValidateNonce checks that the report's request nonce is want.
func ValidateNonce(r *Report, want []byte, checks *verdict.Checks) error {
	if !bytes.Equal(r.Nonce[:], want) {
		return checks.Failf("nvidia.nonce", "report nonce %x is not the issued %x", r.Nonce[:], want)
	}
	checks.Pass("nvidia.nonce", "report nonce %x", r.Nonce[:])
	return nil
}

// ErrUnknownCollateral marks a refusal for missing (not bad) collateral.
var ErrUnknownCollateral = errors.New("measurements/revocation unknown")

// CollateralOptions configures CheckCollateral.
type CollateralOptions struct {
	Now        time.Time
	Roots      Roots
	Collateral *Collateral // nil: none (every dependent check unknown)
	Cache      *Cache      // verified RIMs (nil: none)
	// AllowUnknownRevocation / AllowUnknownMeasurements: from the policy;
	// with no policy both are false (fail closed).
	AllowUnknownRevocation   bool
	AllowUnknownMeasurements bool
}

// CheckCollateral runs the collateral checks after the signature and chain
// held: revocation of the device chain (nvidia.revocation), the RIMs
// (nvidia.rim.driver / nvidia.rim.vbios: chain, expiry, XML signature,
// version) and the measurements against them (nvidia.measurements).
// Missing collateral is recorded as unknown and refuses only when the
// options do not allow it.
func CheckCollateral(r *Report, chain []*x509.Certificate, opts CollateralOptions, claims *Claims, checks *verdict.Checks) (err error) {
	col := opts.Collateral
	if col == nil {
		col = &Collateral{}
	}
	// Revocation of every certificate below the root.
	var unknown []string
	for i := 0; i+1 < len(chain); i++ {
		st, detail := col.CheckOCSP(chain[i], chain[i+1], opts.Now)
		switch st {
		case OCSPRevoked:
			return checks.Failf("nvidia.revocation", "%s", detail)
		case OCSPInvalid:
			return checks.Failf("nvidia.revocation", "%s", detail)
		case OCSPUnknown:
			unknown = append(unknown, chain[i].Subject.CommonName)
		}
	}
	if len(unknown) > 0 {
		checks.Unknown("nvidia.revocation", "revocation unknown: no OCSP collateral for %s", strings.Join(unknown, ", "))
		claims.RevocationStatus = "unknown"
		if !opts.AllowUnknownRevocation {
			// Refused at the end, after the RIM checks ran too.
			defer func() {
				if err == nil || errors.Is(err, ErrUnknownCollateral) {
					err = &verdict.Refusal{Check: "nvidia.revocation", Err: fmt.Errorf("%w: no OCSP collateral for %s (the policy does not allow unknown revocation)", ErrUnknownCollateral, strings.Join(unknown, ", "))}
				}
			}()
		}
	} else {
		checks.Pass("nvidia.revocation", "OCSP good for %d certificates", len(chain)-1)
		claims.RevocationStatus = "good"
	}
	// RIMs.
	driver, err := pickRIM(col, col.DriverRIM, r.DriverVersion, opts, "nvidia.rim.driver", checks)
	if err != nil {
		return err
	}
	vbios, err := pickRIM(col, col.VBIOSRIM, r.VBIOSVersion, opts, "nvidia.rim.vbios", checks)
	if err != nil {
		return err
	}
	if driver == nil || vbios == nil {
		checks.Unknown("nvidia.measurements", "measurements unknown: no verified driver and VBIOS RIMs")
		if !opts.AllowUnknownMeasurements {
			return &verdict.Refusal{Check: "nvidia.measurements", Err: fmt.Errorf("%w: no RIM collateral for driver %s / VBIOS %s (the policy does not allow unknown measurements)", ErrUnknownCollateral, r.DriverVersion, r.VBIOSVersion)}
		}
		claims.MeasurementStatus = "unknown"
		return nil
	}
	claims.DriverRIM, claims.VBIOSRIM = driver.Version, vbios.Version
	n, err := CompareMeasurements(r, driver, vbios)
	if err != nil {
		return checks.Fail("nvidia.measurements", err)
	}
	checks.Pass("nvidia.measurements", "%d active golden measurements matched (driver RIM %s, VBIOS RIM %s)", n, driver.Version, vbios.Version)
	claims.MeasurementStatus = "matched"
	return nil
}

// pickRIM verifies the explicit RIM or the collateral RIM of version want;
// nil without error when there is none.
func pickRIM(col *Collateral, explicit []byte, want string, opts CollateralOptions, name string, checks *verdict.Checks) (*RIM, error) {
	want = strings.ToLower(want)
	try := func(doc []byte) (*RIM, error) {
		rim, step, err := opts.Cache.VerifyRIM(doc, opts.Roots.rim(), opts.Now)
		if err != nil {
			if step == "chain" && strings.Contains(err.Error(), "expired") {
				return nil, checks.Failf(name+".expired", "%v (expired collateral)", err)
			}
			return nil, checks.Failf(name+"."+step, "%v", err)
		}
		return rim, nil
	}
	if explicit != nil {
		rim, err := try(explicit)
		if err != nil {
			return nil, err
		}
		checks.Pass(name+".signature", "RIM %s: signing chain to %s valid until %s, XML signature verified", rim.Version, opts.Roots.rim().Subject.CommonName, rim.NotAfter.UTC().Format(time.RFC3339))
		if rim.Version != want {
			return nil, checks.Failf(name+".version", "RIM is for version %s, the report names %s", rim.Version, want)
		}
		checks.Pass(name+".version", "RIM version %s", rim.Version)
		return rim, nil
	}
	for _, doc := range col.RIMs {
		rim, _, err := opts.Cache.VerifyRIM(doc, opts.Roots.rim(), opts.Now)
		if err != nil || rim.Version != want {
			continue // not this version, or not valid: another may be
		}
		checks.Pass(name+".signature", "RIM %s: signing chain to %s valid until %s, XML signature verified", rim.Version, opts.Roots.rim().Subject.CommonName, rim.NotAfter.UTC().Format(time.RFC3339))
		checks.Pass(name+".version", "RIM version %s", rim.Version)
		return rim, nil
	}
	checks.Unknown(name, "no valid RIM for version %s in the collateral", want)
	return nil, nil
}

// CompareMeasurements compares the report with the active golden
// measurements of the driver and VBIOS RIMs, as NVIDIA's verifier does:
// both RIMs active at one index is an error; golden index i is compared
// with block i+1 and must equal one alternative of the same size;
// measurement 35 is skipped when the report says NVDEC0 is disabled. It
// returns the number of measurements compared.
func CompareMeasurements(r *Report, driver, vbios *RIM) (int, error) {
	golden := map[int]Golden{}
	for i, g := range driver.Golden {
		if g.Active {
			golden[i] = g
		}
	}
	for i, g := range vbios.Golden {
		if !g.Active {
			continue
		}
		if _, dup := golden[i]; dup {
			return 0, fmt.Errorf("driver and VBIOS RIMs are both active at measurement %d", i)
		}
		golden[i] = g
	}
	if len(golden) > len(r.Blocks) {
		return 0, fmt.Errorf("%d golden measurements but only %d in the report", len(golden), len(r.Blocks))
	}
	var bad []int
	n := 0
	for i, g := range golden {
		if i == 35 && r.NVDECDisabled {
			continue
		}
		n++
		m := r.Measurement(i + 1)
		ok := false
		for _, a := range g.Alternatives {
			if len(m) == g.Size && bytes.Equal(a, m) {
				ok = true
			}
		}
		if !ok {
			bad = append(bad, i)
		}
	}
	if len(bad) > 0 {
		sort.Ints(bad)
		return 0, fmt.Errorf("runtime measurements differ from the golden values at indexes %v", bad)
	}
	return n, nil
}

// Validate applies the nvidia_cc policy to a verified report.
func Validate(r *Report, claims *Claims, p *Policy, checks *verdict.Checks) error {
	if len(p.Architectures) > 0 {
		if !slices.Contains(p.Architectures, claims.Architecture) {
			return checks.Failf("nvidia.architecture", "architecture %s not in %v", claims.Architecture, p.Architectures)
		}
		checks.Pass("nvidia.architecture", "%s (%s)", claims.Architecture, claims.Chip)
	}
	if p.CCMode == "on" {
		if claims.MeasurementStatus != "matched" {
			return checks.Failf("nvidia.cc_mode", "cc_mode on needs measurements matched against NVIDIA's RIMs (status %q)", claims.MeasurementStatus)
		}
		checks.Pass("nvidia.cc_mode", "measurements match the CC-mode golden values")
	}
	if p.MinDriverVersion != "" {
		if err := atLeast(r.DriverVersion, p.MinDriverVersion, 10); err != nil {
			return checks.Failf("nvidia.driver_version", "driver %v", err)
		}
		checks.Pass("nvidia.driver_version", "driver %s ≥ %s", r.DriverVersion, p.MinDriverVersion)
	}
	if p.MinVBIOSVersion != "" {
		if err := atLeast(r.VBIOSVersion, p.MinVBIOSVersion, 16); err != nil {
			return checks.Failf("nvidia.vbios_version", "VBIOS %v", err)
		}
		checks.Pass("nvidia.vbios_version", "VBIOS %s ≥ %s", r.VBIOSVersion, p.MinVBIOSVersion)
	}
	if len(p.Measurements) > 0 {
		keys := make([]string, 0, len(p.Measurements))
		for k := range p.Measurements {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			i, _ := strconv.Atoi(k)
			m := hex.EncodeToString(r.Measurement(i))
			if !slices.Contains(p.Measurements[k], m) {
				return checks.Failf("nvidia.policy.measurements", "measurement block %d = %s is not accepted by the policy", i, m)
			}
		}
		checks.Pass("nvidia.policy.measurements", "%d pinned measurement blocks match", len(keys))
	}
	return nil
}

func versionParts(v string, base int) ([]uint64, error) {
	parts := strings.Split(v, ".")
	if len(parts) == 0 || len(parts) > 8 {
		return nil, fmt.Errorf("version %q", v)
	}
	out := make([]uint64, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return nil, fmt.Errorf("version %q: part %q", v, p)
		}
		out[i] = n
	}
	return out, nil
}

func atLeast(have, min string, base int) error {
	h, err := versionParts(have, base)
	if err != nil {
		return err
	}
	m, _ := versionParts(min, base)
	for i := 0; i < len(m); i++ {
		var x uint64
		if i < len(h) {
			x = h[i]
		}
		if x != m[i] {
			if x < m[i] {
				return fmt.Errorf("version %s is below the minimum %s", have, min)
			}
			return nil
		}
	}
	return nil
}
