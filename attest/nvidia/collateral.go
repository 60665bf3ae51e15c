package nvidia

import (
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/crypto/ocsp"
)

// Collateral limits.
const (
	MaxCollateralRIMs = 64      // RIM documents in a collateral set
	MaxOCSPResponse   = 8 << 10 // one DER OCSP response
	MaxOCSPResponses  = 64
)

// Collateral is what NVIDIA's online services answer in production — RIMs
// (from the RIM service) and OCSP responses (from ocsp.ndis.nvidia.com) —
// cached and supplied offline. Nothing here is trusted: RIMs are verified
// to the RIM root, OCSP responses against the issuer of the certificate
// they speak for, and both only inside their validity at the pinned time.
type Collateral struct {
	// RIMs are candidate RIM documents; the driver and VBIOS RIMs are the
	// ones whose colloquialVersion equals the report's versions.
	RIMs [][]byte
	// DriverRIM and VBIOSRIM, when set, are the RIMs to use (like
	// cc_admin's --driver_rim and --vbios_rim); their versions are still
	// compared with the report's.
	DriverRIM, VBIOSRIM []byte
	// OCSP maps a certificate serial number (lower-case hex) to a DER OCSP
	// response for it.
	OCSP map[string][]byte
}

// LoadCollateral reads a collateral directory: *.swidtag / *.xml RIMs at its
// top level and ocsp/<serial-hex>.der responses. A missing directory is
// empty collateral (every dependent check is then "unknown").
func LoadCollateral(dir string) (*Collateral, error) {
	c := &Collateral{OCSP: map[string][]byte{}}
	if dir == "" {
		return c, nil
	}
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nvidia collateral: %w", err)
	}
	names := []string{}
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() && (strings.HasSuffix(n, ".swidtag") || strings.HasSuffix(n, ".xml")) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) > MaxCollateralRIMs {
		return nil, fmt.Errorf("nvidia collateral: %d RIMs in %s, limit %d", len(names), dir, MaxCollateralRIMs)
	}
	for _, n := range names {
		b, err := readFileLimited(filepath.Join(dir, n), MaxRIM)
		if err != nil {
			return nil, fmt.Errorf("nvidia collateral: %w", err)
		}
		c.RIMs = append(c.RIMs, b)
	}
	oents, err := os.ReadDir(filepath.Join(dir, "ocsp"))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("nvidia collateral: %w", err)
	}
	if len(oents) > MaxOCSPResponses {
		return nil, fmt.Errorf("nvidia collateral: %d OCSP responses, limit %d", len(oents), MaxOCSPResponses)
	}
	for _, e := range oents {
		serial, ok := strings.CutSuffix(e.Name(), ".der")
		if !ok || e.IsDir() {
			continue
		}
		if _, err := hex.DecodeString(serial); err != nil {
			return nil, fmt.Errorf("nvidia collateral: OCSP file %s is not <serial-hex>.der", e.Name())
		}
		b, err := readFileLimited(filepath.Join(dir, "ocsp", e.Name()), MaxOCSPResponse)
		if err != nil {
			return nil, fmt.Errorf("nvidia collateral: %w", err)
		}
		c.OCSP[strings.ToLower(serial)] = b
	}
	return c, nil
}

func readFileLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// SerialHex is the collateral key of a certificate.
func SerialHex(c *x509.Certificate) string { return hex.EncodeToString(c.SerialNumber.Bytes()) }

// OCSPStatus is the outcome of a revocation check for one certificate.
type OCSPStatus int

// OCSP outcomes.
const (
	OCSPGood OCSPStatus = iota
	OCSPUnknown
	OCSPRevoked
	OCSPInvalid
)

// CheckOCSP checks the cached OCSP response for cert (issued by issuer) at
// now: it must be signed by the issuer or a responder it delegated to, be
// for this certificate, and now must lie in [ThisUpdate, NextUpdate]. A
// missing response is OCSPUnknown; an expired or badly signed one is
// OCSPInvalid.
func (c *Collateral) CheckOCSP(cert, issuer *x509.Certificate, now time.Time) (OCSPStatus, string) {
	der, ok := c.OCSP[SerialHex(cert)]
	if !ok {
		return OCSPUnknown, fmt.Sprintf("no OCSP response for %s (serial %s)", cert.Subject.CommonName, SerialHex(cert))
	}
	resp, err := ocsp.ParseResponseForCert(der, cert, issuer)
	if err != nil {
		return OCSPInvalid, fmt.Sprintf("OCSP response for %s: %v", cert.Subject.CommonName, err)
	}
	if now.Before(resp.ThisUpdate) || (!resp.NextUpdate.IsZero() && now.After(resp.NextUpdate)) || resp.NextUpdate.IsZero() {
		return OCSPInvalid, fmt.Sprintf("OCSP response for %s is valid %s..%s, not at %s (expired collateral)", cert.Subject.CommonName,
			resp.ThisUpdate.UTC().Format(time.RFC3339), resp.NextUpdate.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	switch resp.Status {
	case ocsp.Good:
		return OCSPGood, fmt.Sprintf("%s good until %s", cert.Subject.CommonName, resp.NextUpdate.UTC().Format(time.RFC3339))
	case ocsp.Revoked:
		return OCSPRevoked, fmt.Sprintf("%s revoked at %s (reason %d)", cert.Subject.CommonName, resp.RevokedAt.UTC().Format(time.RFC3339), resp.RevocationReason)
	}
	return OCSPUnknown, fmt.Sprintf("OCSP responder does not know %s", cert.Subject.CommonName)
}
