package nitro

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"time"

	"github.com/hf/nitrite"

	"github.com/tenzro/train/attest/simroots"
	"github.com/tenzro/train/attest/verdict"
)

// AWSRootFingerprint is the SHA-256 of the DER of the AWS Nitro Enclaves
// root (G1), as published by AWS. The root nitrite embeds is asserted to
// match it, and so is the root of every verified chain.
const AWSRootFingerprint = "641a0321a3e244efe456463195d606317ed7cdcc3c1756e09893f3c68f79bb5b"

var awsRoot *x509.Certificate

func init() {
	b, _ := pem.Decode([]byte(nitrite.DefaultCARoots))
	if b == nil {
		panic("nitro: nitrite's embedded AWS root is not PEM")
	}
	fp := sha256.Sum256(b.Bytes)
	if hex.EncodeToString(fp[:]) != AWSRootFingerprint {
		panic("nitro: nitrite's embedded AWS root does not have the pinned fingerprint")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		panic("nitro: AWS root: " + err.Error())
	}
	awsRoot = c
}

// AWSRoot returns the pinned AWS Nitro root certificate.
func AWSRoot() *x509.Certificate { return awsRoot }

// VerifyOptions configures authenticity checks.
type VerifyOptions struct {
	Now time.Time // pinned verification time (required)
	// AllowSimulated also accepts documents chaining to the simulated root.
	AllowSimulated bool
}

// Verified is the outcome of Verify.
type Verified struct{ Simulated bool }

// Verify checks the COSE signature and the chain to the AWS root at
// opts.Now.
func Verify(ev *Evidence, opts VerifyOptions, checks *verdict.Checks) (*Verified, error) {
	if opts.Now.IsZero() {
		return nil, checks.Failf("nitro.clock", "no pinned verification time")
	}
	// nitrite panics on curves it does not know; AWS uses P-384 only.
	pub, ok := ev.Leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve.Params().Name != "P-384" {
		return nil, checks.Failf("nitro.certificate", "leaf key is not ECDSA P-384")
	}
	// A self-signed document certificate, or one without a CA bundle, can
	// never chain to the AWS root: refuse it as such before the library
	// (which would report a missing field or an unknown authority).
	selfSigned := bytes.Equal(ev.Leaf.RawIssuer, ev.Leaf.RawSubject) &&
		ev.Leaf.CheckSignature(ev.Leaf.SignatureAlgorithm, ev.Leaf.RawTBSCertificate, ev.Leaf.Signature) == nil
	if selfSigned || len(ev.Bundle) == 0 {
		return nil, checks.Failf("nitro.chain", "document certificate %q is self-signed or comes without a CA bundle: not chained to the AWS Nitro root", ev.Leaf.Subject.CommonName)
	}
	pool := x509.NewCertPool()
	pool.AddCert(awsRoot)
	res, err := nitrite.Verify(ev.Raw, nitrite.VerifyOptions{Roots: pool, CurrentTime: opts.Now})
	if res != nil && !res.SignatureOK {
		return nil, checks.Failf("nitro.signature", "COSE_Sign1 signature does not verify under the document's certificate")
	}
	if res == nil && err != nil {
		return nil, checks.Fail("nitro.parse", err)
	}
	if err == nil {
		if err := assertRoot(ev, opts.Now, pool, awsRoot); err != nil {
			return nil, checks.Fail("nitro.root", err)
		}
		checks.Pass("nitro.signature", "ES384 COSE_Sign1 signature verifies")
		checks.Pass("nitro.chain", "chains to the AWS Nitro root (sha256 %s) at %s", AWSRootFingerprint[:16]+"…", opts.Now.Format(time.RFC3339))
		return &Verified{}, nil
	}
	// Not chained to AWS at opts.Now: simulated, expired or untrusted.
	if simRoot, _, serr := simroots.Nitro(); serr == nil {
		sp := x509.NewCertPool()
		sp.AddCert(simRoot)
		if sres, serr := nitrite.Verify(ev.Raw, nitrite.VerifyOptions{Roots: sp, CurrentTime: opts.Now}); serr == nil && sres != nil && sres.SignatureOK {
			if !opts.AllowSimulated {
				return nil, checks.Failf("nitro.simulated", "document chains to the SIMULATED test root; the policy does not allow simulated evidence")
			}
			checks.Pass("nitro.signature", "ES384 COSE_Sign1 signature verifies")
			checks.Pass("nitro.chain", "chains to the SIMULATED test root (allow_simulated)")
			return &Verified{Simulated: true}, nil
		}
	}
	checks.Pass("nitro.signature", "ES384 COSE_Sign1 signature verifies")
	for _, c := range append([]*x509.Certificate{ev.Leaf}, ev.Bundle...) {
		if opts.Now.After(c.NotAfter) || opts.Now.Before(c.NotBefore) {
			return nil, checks.Failf("nitro.chain.validity", "certificate %q valid %s to %s, not at %s: %v", c.Subject.CommonName,
				c.NotBefore.Format(time.RFC3339), c.NotAfter.Format(time.RFC3339), opts.Now.Format(time.RFC3339), err)
		}
	}
	return nil, checks.Failf("nitro.chain", "not chained to the AWS Nitro root: %v", err)
}

// assertRoot rebuilds the chain and requires its root to be root.
func assertRoot(ev *Evidence, now time.Time, pool *x509.CertPool, root *x509.Certificate) error {
	inter := x509.NewCertPool()
	for _, c := range ev.Bundle {
		inter.AddCert(c)
	}
	chains, err := ev.Leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return err
	}
	for _, ch := range chains {
		if !bytes.Equal(ch[len(ch)-1].Raw, root.Raw) {
			return fmt.Errorf("chain ends at %q, not the pinned root", ch[len(ch)-1].Subject.CommonName)
		}
	}
	return nil
}
