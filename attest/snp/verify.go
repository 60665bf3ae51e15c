package snp

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	"github.com/google/go-sev-guest/kds"
	"github.com/google/go-sev-guest/verify"
	"github.com/google/go-sev-guest/verify/trust"

	"github.com/tenzro/train/attest/simroots"
	"github.com/tenzro/train/attest/verdict"
)

// ProductLines are the AMD product lines with pinned roots.
var ProductLines = []string{"Milan", "Genoa", "Turin"}

// Roots builds trusted AMD roots from the certificate bundles embedded in
// go-sev-guest (copied from AMD KDS). withVLEK adds the ASVK so VLEK-signed
// reports (as AWS issues) verify; the library's default roots hold only the
// VCEK chain.
func Roots(withVLEK bool) (map[string][]*trust.AMDRootCerts, error) {
	vcek := map[string][]byte{"Milan": trust.AskArkMilanVcekBytes, "Genoa": trust.AskArkGenoaVcekBytes, "Turin": trust.AskArkTurinVcekBytes}
	vlek := map[string][]byte{"Milan": trust.AskArkMilanVlekBytes, "Genoa": trust.AskArkGenoaVlekBytes, "Turin": trust.AskArkTurinVlekBytes}
	out := map[string][]*trust.AMDRootCerts{}
	for _, p := range ProductLines {
		pc := &trust.ProductCerts{}
		if err := pc.FromKDSCertBytes(append(bytes.TrimRight(vcek[p], "\r\n"), '\n')); err != nil {
			return nil, fmt.Errorf("snp roots %s VCEK bundle: %w", p, err)
		}
		if withVLEK {
			ask, ark, err := kds.ParseProductCertChain(append(bytes.TrimRight(vlek[p], "\r\n"), '\n'))
			if err != nil {
				return nil, fmt.Errorf("snp roots %s VLEK bundle: %w", p, err)
			}
			asvk, err := x509.ParseCertificate(ask)
			if err != nil {
				return nil, fmt.Errorf("snp roots %s ASVK: %w", p, err)
			}
			arkv, err := x509.ParseCertificate(ark)
			if err != nil {
				return nil, fmt.Errorf("snp roots %s VLEK ARK: %w", p, err)
			}
			if !arkv.Equal(pc.Ark) {
				return nil, fmt.Errorf("snp roots %s: VLEK bundle's ARK differs from the VCEK bundle's", p)
			}
			pc.Asvk = asvk
		}
		r := trust.AMDRootCertsProduct(p)
		r.ProductCerts = pc
		out[p] = []*trust.AMDRootCerts{r}
	}
	return out, nil
}

var (
	defaultRootsOnce sync.Once
	defaultRoots     map[string][]*trust.AMDRootCerts
	defaultRootsErr  error
)

// DefaultRoots returns the pinned AMD roots for VCEK and VLEK (cached).
func DefaultRoots() (map[string][]*trust.AMDRootCerts, error) {
	defaultRootsOnce.Do(func() { defaultRoots, defaultRootsErr = Roots(true) })
	return defaultRoots, defaultRootsErr
}

// VerifyOptions configures authenticity checks.
type VerifyOptions struct {
	// Now is the pinned verification time (required).
	Now time.Time
	// Roots are the trusted AMD roots; nil means DefaultRoots.
	Roots map[string][]*trust.AMDRootCerts
	// AllowSimulated also accepts reports chaining to the simulated test
	// roots (only in non-production builds).
	AllowSimulated bool
	// Cache holds endorsement-key chains verified before (nil: none). The
	// report's signature is checked on every call either way.
	Cache *Cache
}

// Verified is the outcome of Verify.
type Verified struct {
	Simulated bool
	Product   string
}

// Verify checks the report signature and its VCEK/VLEK chain to a pinned
// AMD root at opts.Now, recording each step in checks. The signature is
// always verified; with opts.Cache, a chain verified before (same
// certificate bytes, same roots, opts.Now inside every certificate's
// validity) is not verified again.
func Verify(ctx context.Context, ev *Evidence, opts VerifyOptions, checks *verdict.Checks) (*Verified, error) {
	if opts.Now.IsZero() {
		return nil, checks.Failf("snp.clock", "no pinned verification time")
	}
	ekDER := ev.EndorsementKeyDER()
	if len(ekDER) == 0 {
		return nil, checks.Failf("snp.certs", "no %v certificate in the report's certificate table or the supplied certificates", ev.Signer)
	}
	ek, err := opts.Cache.parseCert(ekDER)
	if err != nil {
		return nil, checks.Failf("snp.certs", "%v certificate: %v", ev.Signer, err)
	}
	checks.Pass("snp.certs", "%v certificate %q, valid %s to %s", ev.Signer, ek.Subject.CommonName, ek.NotBefore.Format(time.RFC3339), ek.NotAfter.Format(time.RFC3339))
	roots := opts.Roots
	var rootsErr error
	if roots == nil {
		roots, rootsErr = DefaultRoots()
	}
	// go-sev-guest's chain check ends with the report signature, over its
	// re-encoding of the report. When that re-encoding is the raw report,
	// its signature check is the one below: the library runs first and the
	// signature is verified once; a cached chain stands for the library's
	// chain check, and the signature is verified here.
	canon := rootsErr == nil && canonical(ev)
	if canon && opts.Cache != nil {
		if _, hit := opts.Cache.lookup(ev, ek, ekDER, roots, opts.Now); hit {
			if err := verify.SnpReportSignature(ev.Raw, ek); err != nil {
				return nil, checks.Fail("snp.signature", err)
			}
			checks.Pass("snp.signature", "report signature verifies under the %v key", ev.Signer)
			checks.Pass("snp.chain", "%v chains to the pinned AMD root at %s", ev.Signer, opts.Now.Format(time.RFC3339))
			return &Verified{Product: productOf(ev, ek)}, nil
		}
	}
	var chainErr error
	if canon {
		if chainErr = verifyChain(ctx, ev, roots, opts.Now); chainErr == nil {
			opts.Cache.store(ev, ek, ekDER, roots, chainEntry{})
			checks.Pass("snp.signature", "report signature verifies under the %v key", ev.Signer)
			checks.Pass("snp.chain", "%v chains to the pinned AMD root at %s", ev.Signer, opts.Now.Format(time.RFC3339))
			return &Verified{Product: productOf(ev, ek)}, nil
		}
	}
	if err := verify.SnpReportSignature(ev.Raw, ek); err != nil {
		return nil, checks.Fail("snp.signature", err)
	}
	checks.Pass("snp.signature", "report signature verifies under the %v key", ev.Signer)
	if rootsErr != nil {
		return nil, checks.Fail("snp.roots", rootsErr)
	}
	if !canon {
		if chainErr = verifyChain(ctx, ev, roots, opts.Now); chainErr == nil {
			checks.Pass("snp.chain", "%v chains to the pinned AMD root at %s", ev.Signer, opts.Now.Format(time.RFC3339))
			return &Verified{Product: productOf(ev, ek)}, nil
		}
	}
	cacheable := canon && opts.Cache != nil
	if sim, err := simroots.SNPRoots(); err == nil {
		if cacheable {
			if _, hit := opts.Cache.lookup(ev, ek, ekDER, sim, opts.Now); hit {
				return simulated(ev, ek, opts, checks)
			}
		}
		if verifyChain(ctx, ev, sim, opts.Now) == nil {
			if cacheable {
				opts.Cache.store(ev, ek, ekDER, sim, chainEntry{simulated: true})
			}
			return simulated(ev, ek, opts, checks)
		}
	}
	if now := opts.Now; now.After(ek.NotAfter) || now.Before(ek.NotBefore) {
		return nil, checks.Failf("snp.chain.validity", "%v certificate valid %s to %s, not at %s: %v", ev.Signer,
			ek.NotBefore.Format(time.RFC3339), ek.NotAfter.Format(time.RFC3339), now.Format(time.RFC3339), chainErr)
	}
	return nil, checks.Fail("snp.chain", chainErr)
}

// simulated records a chain to the simulated test roots: refused unless
// the policy allows simulated evidence.
func simulated(ev *Evidence, ek *x509.Certificate, opts VerifyOptions, checks *verdict.Checks) (*Verified, error) {
	if !opts.AllowSimulated {
		return nil, checks.Failf("snp.simulated", "report chains to the SIMULATED test roots; the policy does not allow simulated evidence")
	}
	checks.Pass("snp.chain", "%v chains to the SIMULATED test root (allow_simulated)", ev.Signer)
	return &Verified{Simulated: true, Product: productOf(ev, ek)}, nil
}

func verifyChain(ctx context.Context, ev *Evidence, roots map[string][]*trust.AMDRootCerts, now time.Time) error {
	opts := &verify.Options{DisableCertFetching: true, TrustedRoots: roots, Now: now}
	return verify.SnpAttestationContext(ctx, ev.Attestation(), opts)
}

func productOf(ev *Evidence, ek *x509.Certificate) string {
	if fms := ev.Report.GetCpuid1EaxFms(); fms != 0 {
		return kds.ProductLineFromFms(fms)
	}
	if ext, err := kds.CertificateExtensions(ek, ev.Signer); err == nil {
		if p, err := kds.ParseProductName(ext.ProductName, ev.Signer); err == nil {
			return kds.ProductLine(p)
		}
	}
	return ""
}

// VerifyChain verifies the report's VCEK/VLEK chain (and the report
// signature) against roots only, at now: no fallback to other roots. The
// product line comes from the report (CPUID in v3+ reports) or the
// certificate, and only that line's roots are consulted.
func VerifyChain(ctx context.Context, ev *Evidence, roots map[string][]*trust.AMDRootCerts, now time.Time) error {
	return verifyChain(ctx, ev, roots, now)
}
