package tdx

import (
	"bytes"
	"context"
	"crypto/x509"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/go-tdx-guest/pcs"
	pb "github.com/google/go-tdx-guest/proto/tdx"
	"github.com/google/go-tdx-guest/verify"

	"github.com/tenzro/train/attest/internal/vcache"
	"github.com/tenzro/train/attest/simroots"
	"github.com/tenzro/train/attest/verdict"
)

//go:embed intel_sgx_root_ca.pem
var intelRootPEM []byte

var intelRoot *x509.Certificate

func init() {
	b, _ := pem.Decode(intelRootPEM)
	if b == nil {
		panic("tdx: pinned Intel root is not PEM")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		panic("tdx: pinned Intel root: " + err.Error())
	}
	intelRoot = c
}

// IntelRoot returns the pinned Intel SGX Root CA.
func IntelRoot() *x509.Certificate { return intelRoot }

// VerifyOptions configures authenticity checks.
type VerifyOptions struct {
	Now time.Time // pinned verification time (required)
	// Collateral for the quote's FMSPC (required: missing collateral fails closed).
	Collateral *Collateral
	// TCBStatuses allowlists TDX/QE TCB statuses; empty means UpToDate only.
	TCBStatuses []string
	// AllowSimulated accepts quotes whose PCK chain ends at the simulated
	// Intel root (attest/simroots; only in builds without the production
	// tag). Otherwise such a quote is refused with the check tdx.simulated.
	AllowSimulated bool
	// Cache holds PCK chains and collateral verified before (nil: none).
	// Everything particular to the quote is checked on every call either
	// way.
	Cache *Cache
}

// Verified is the outcome of Verify.
type Verified struct {
	TCBStatus   string
	QETCBStatus string
	Simulated   bool
}

// Verify checks the quote signature, the QE report, the PCK chain to the
// pinned Intel root, the collateral (signatures, freshness, CRLs) and the
// TCB status at opts.Now. With opts.Cache, a PCK chain and collateral the
// library accepted before (same bytes, opts.Now inside every certificate's
// validity and before every next update) are not verified again; the
// quote's own signatures, bindings and TCB matching always are.
func Verify(ctx context.Context, ev *Evidence, opts VerifyOptions, checks *verdict.Checks) (*Verified, error) {
	if opts.Now.IsZero() {
		return nil, checks.Failf("tdx.clock", "no pinned verification time")
	}
	if opts.Collateral == nil {
		return nil, verifyWithoutCollateral(ctx, ev, opts, checks)
	}
	now := opts.Now
	simClaimed := ev.Chain != nil && simroots.IsTDXSimulatedRoot(ev.Chain.RootCertificate)
	// A cached entry: the PCK chain and this collateral under the root the
	// quote will be verified against.
	var (
		entry   *verifiedEntry
		hit     bool
		key     vcache.Key
		keyRoot *x509.Certificate
		keyOK   bool
	)
	if opts.Cache != nil && (!simClaimed || opts.AllowSimulated) {
		keyRoot = intelRoot
		if simClaimed {
			keyRoot, _ = simroots.TDXRoot()
		}
		if key, keyOK = entryKey(keyRoot, ev, opts.Collateral); keyOK {
			entry, hit = opts.Cache.verified.Get(key, now)
		}
	}
	var fmspc string
	var ferr error
	if hit {
		fmspc = entry.col.fmspc // decoded from the same bytes
	} else {
		fmspc, ferr = opts.Collateral.FMSPC()
	}
	if ferr != nil || fmspc != strings.ToLower(ev.FMSPC) {
		return nil, checks.Failf("tdx.collateral", "collateral is for FMSPC %q, quote is %s", fmspc, ev.FMSPC)
	}
	allowed := opts.TCBStatuses
	if len(allowed) == 0 {
		allowed = []string{string(pcs.TcbComponentStatusUpToDate)}
	}
	pool := x509.NewCertPool()
	pool.AddCert(intelRoot)
	rootName := "the pinned Intel SGX Root CA"
	simulated := false
	if simClaimed {
		// The quote claims the simulated root: it is verified against that
		// root only, and only when the policy allows simulated evidence.
		if !opts.AllowSimulated {
			return nil, checks.Failf("tdx.simulated", "quote's PCK chain ends at the SIMULATED test root; the policy does not allow simulated evidence")
		}
		sp, err := simroots.TDXPool()
		if err != nil {
			return nil, checks.Fail("tdx.simulated", err)
		}
		pool, rootName, simulated = sp, "the SIMULATED test root (allow_simulated)", true
	}
	var (
		verr          error
		tdxLvl, qeLvl pcs.TcbLevel
		lerr          error
	)
	if hit {
		verr = checkQuote(ev.Quote, entry)
		tdxLvl, qeLvl, lerr = levels(ev.Quote, entry)
	} else {
		// A fresh Options per call: the library writes chain, collateral and
		// time into it.
		o := &verify.Options{
			GetCollateral:    true,
			CheckRevocations: true,
			Getter:           getter{opts.Collateral},
			Now:              &verify.TimeSet{PckCertChain: now, TcbInfo: now, QeIdentity: now, PckCrl: now, RootCaCrl: now},
			TrustedRoots:     pool,
		}
		verr = verify.TdxQuoteContext(ctx, ev.Quote, o)
		tdxLvl, qeLvl, lerr = verify.SupportedTcbLevelsFromCollateral(ev.Quote, o)
	}
	v, err := decide(ev, opts.Collateral, verr, tdxLvl, qeLvl, lerr, allowed, rootName, simulated, now, checks)
	if err == nil && !hit && keyOK {
		opts.Cache.store(key, keyRoot, ev, opts.Collateral)
	}
	return v, err
}

// decide records the outcome of the library's verification (or of its
// per-quote steps on a cached chain and collateral).
func decide(ev *Evidence, col *Collateral, verr error, tdxLvl, qeLvl pcs.TcbLevel, lerr error, allowed []string, rootName string, simulated bool, now time.Time, checks *verdict.Checks) (*Verified, error) {
	if verr == nil {
		checks.Pass("tdx.signature", "quote and QE report signatures verify")
		checks.Pass("tdx.chain", "PCK chain to %s at %s", rootName, now.Format(time.RFC3339))
		checks.Pass("tdx.collateral", "TCB info and QE identity signed under %s, fresh at %s", rootName, now.Format(time.RFC3339))
		checks.Pass("tdx.revocation", "PCK and root CA CRLs checked")
		if !slices.Contains(allowed, string(tdxLvl.TcbStatus)) || !slices.Contains(allowed, string(qeLvl.TcbStatus)) {
			return nil, checks.Failf("tdx.tcb_status", "TCB status %s / QE %s not in %v", tdxLvl.TcbStatus, qeLvl.TcbStatus, allowed)
		}
		checks.Pass("tdx.tcb_status", "TDX TCB %s, QE TCB %s", tdxLvl.TcbStatus, qeLvl.TcbStatus)
		return &Verified{TCBStatus: string(tdxLvl.TcbStatus), QETCBStatus: string(qeLvl.TcbStatus), Simulated: simulated}, nil
	}
	msg := verr.Error()
	// The library refuses any status but UpToDate as its last step; with
	// an allowlist, finish the checks it skipped.
	if lerr == nil && strings.Contains(msg, "failed TCB status check") {
		if !slices.Contains(allowed, string(tdxLvl.TcbStatus)) || !slices.Contains(allowed, string(qeLvl.TcbStatus)) {
			return nil, checks.Failf("tdx.tcb_status", "TDX TCB status %s / QE TCB status %s not in the allowlist %v", tdxLvl.TcbStatus, qeLvl.TcbStatus, allowed)
		}
		if strings.HasPrefix(msg, "TDX TCB info") {
			if err := qeIdentityCheck(ev, col); err != nil {
				return nil, checks.Fail("tdx.qe_identity", err)
			}
		}
		checks.Pass("tdx.signature", "quote and QE report signatures verify")
		checks.Pass("tdx.chain", "PCK chain to %s at %s", rootName, now.Format(time.RFC3339))
		checks.Pass("tdx.collateral", "TCB info and QE identity signed under %s, fresh at %s", rootName, now.Format(time.RFC3339))
		checks.Pass("tdx.revocation", "PCK and root CA CRLs checked")
		checks.Pass("tdx.tcb_status", "TDX TCB %s, QE TCB %s (allowlisted)", tdxLvl.TcbStatus, qeLvl.TcbStatus)
		return &Verified{TCBStatus: string(tdxLvl.TcbStatus), QETCBStatus: string(qeLvl.TcbStatus), Simulated: simulated}, nil
	}
	return nil, checks.Fail(classify(msg), verr)
}

// verifyWithoutCollateral checks what needs no collateral — the quote and
// QE report signatures and the PCK chain to the pinned root — and then
// records the TCB status as unknown: the quote is refused (fail closed,
// check tdx.collateral) but only after the signature checks held, so a
// forged quote and a genuine one without collateral get different answers.
func verifyWithoutCollateral(ctx context.Context, ev *Evidence, opts VerifyOptions, checks *verdict.Checks) error {
	pool := x509.NewCertPool()
	pool.AddCert(intelRoot)
	rootName := "the pinned Intel SGX Root CA"
	if ev.Chain != nil && simroots.IsTDXSimulatedRoot(ev.Chain.RootCertificate) {
		if !opts.AllowSimulated {
			return checks.Failf("tdx.simulated", "quote's PCK chain ends at the SIMULATED test root; the policy does not allow simulated evidence")
		}
		sp, err := simroots.TDXPool()
		if err != nil {
			return checks.Fail("tdx.simulated", err)
		}
		pool, rootName = sp, "the SIMULATED test root (allow_simulated)"
	}
	now := opts.Now
	o := &verify.Options{
		TrustedRoots: pool,
		Now:          &verify.TimeSet{PckCertChain: now, TcbInfo: now, QeIdentity: now, PckCrl: now, RootCaCrl: now},
	}
	if err := verify.TdxQuoteContext(ctx, ev.Quote, o); err != nil {
		return checks.Fail(classify(err.Error()), err)
	}
	checks.Pass("tdx.signature", "quote and QE report signatures verify")
	checks.Pass("tdx.chain", "PCK chain to %s at %s", rootName, now.Format(time.RFC3339))
	msg := fmt.Sprintf("TCB status unknown: no collateral for FMSPC %s (TCB info, QE identity, CRLs); revocation not checked", ev.FMSPC)
	checks.Unknown("tdx.collateral", "%s", msg)
	return &verdict.Refusal{Check: "tdx.collateral", Err: fmt.Errorf("%s (fail closed)", msg)}
}

// classify names the failed check from the library's error text (it wraps
// with %v, so there is nothing to errors.Is against).
func classify(msg string) string {
	switch {
	case strings.Contains(msg, "unable to verify message digest"), strings.Contains(msg, "QE report's signature"),
		strings.Contains(msg, "QE Report Data does not match"):
		return "tdx.signature"
	case strings.Contains(msg, "revoked"):
		return "tdx.revocation"
	case strings.Contains(msg, "tcbInfo has expired"), strings.Contains(msg, "QeIdentity has expired"),
		strings.Contains(msg, "CRL has expired"), strings.Contains(msg, "signing certificate has expired"),
		strings.Contains(msg, "root certificate has expired"):
		return "tdx.collateral.expired"
	case strings.Contains(msg, "PCK Certificate Chain has expired"), strings.Contains(msg, "in PCK certificate chain has expired"),
		strings.Contains(msg, "certificate has expired or is not yet valid"):
		return "tdx.chain.validity"
	case strings.Contains(msg, "no matching TCB level"), strings.Contains(msg, "TCB status"), strings.Contains(msg, "TCB Level"):
		return "tdx.tcb_status"
	case strings.Contains(msg, "PCK Certificate"), strings.Contains(msg, "PCK leaf certificate"), strings.Contains(msg, "certificate signed by unknown authority"),
		strings.Contains(msg, "validate root cert"), strings.Contains(msg, "Intermediate CA"):
		return "tdx.chain"
	case strings.Contains(msg, "tcbInfo"), strings.Contains(msg, "QeIdentity"), strings.Contains(msg, "collateral"), strings.Contains(msg, "CRL"):
		return "tdx.collateral"
	}
	return "tdx.verify"
}

// qeIdentityCheck repeats the QE report checks go-tdx-guest skips when the
// TDX TCB status check (which runs first) fails: MISCSELECT, ATTRIBUTES,
// MRSIGNER and ISVPRODID against the (already signature-checked) identity.
func qeIdentityCheck(ev *Evidence, c *Collateral) error {
	var id pcs.EnclaveIdentity
	if err := json.Unmarshal([]byte(c.QEIdentity), &id); err != nil {
		return fmt.Errorf("qe_identity: %w", err)
	}
	sd, ok := ev.Quote.(interface {
		GetSignedData() *pb.Ecdsa256BitQuoteV4AuthData
	})
	if !ok {
		return fmt.Errorf("quote type %T has no signed data", ev.Quote)
	}
	rep := sd.GetSignedData().GetCertificationData().GetQeReportCertificationData().GetQeReport()
	if len(id.Miscselect.Bytes) != 4 || len(id.MiscselectMask.Bytes) != 4 {
		return fmt.Errorf("qe_identity MISCSELECT fields are not 4 bytes")
	}
	if rep.GetMiscSelect()&binary.LittleEndian.Uint32(id.MiscselectMask.Bytes) != binary.LittleEndian.Uint32(id.Miscselect.Bytes) {
		return fmt.Errorf("QE MISCSELECT does not match the QE identity")
	}
	attrs := rep.GetAttributes()
	if len(attrs) != len(id.AttributesMask.Bytes) {
		return fmt.Errorf("QE ATTRIBUTES size mismatch")
	}
	masked := make([]byte, len(attrs))
	for i := range attrs {
		masked[i] = attrs[i] & id.AttributesMask.Bytes[i]
	}
	if !bytes.Equal(masked, id.Attributes.Bytes) {
		return fmt.Errorf("QE ATTRIBUTES do not match the QE identity")
	}
	if !bytes.Equal(rep.GetMrSigner(), id.Mrsigner.Bytes) {
		return fmt.Errorf("QE MRSIGNER does not match the QE identity")
	}
	if rep.GetIsvProdId() != uint32(id.IsvProdID) {
		return fmt.Errorf("QE ISVPRODID does not match the QE identity")
	}
	return nil
}
