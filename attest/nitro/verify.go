package nitro

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/fxamacker/cbor/v2"
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
	// Cache holds certificate chains verified before (nil: none). The
	// document's signature is checked on every call either way.
	Cache *Cache
}

// Verified is the outcome of Verify.
type Verified struct{ Simulated bool }

// Verify checks the document as nitrite.Verify does — COSE_Sign1 with an
// ES384 protected header, the document's mandatory fields and their sizes,
// the ES384 signature under the document's certificate — and the chain to
// the AWS root at opts.Now, built once by crypto/x509 (the root of the
// chain is asserted to be the pinned root). With opts.Cache, a chain
// verified before (same certificate bytes, opts.Now inside the validity of
// each of its certificates) is not built again; the signature is always
// verified.
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
	cose, err := checkDocument(ev)
	if err != nil {
		return nil, checks.Fail("nitro.parse", err)
	}
	if !checkSignature(pub, cose) {
		return nil, checks.Failf("nitro.signature", "COSE_Sign1 signature does not verify under the document's certificate")
	}
	err = opts.Cache.verifyChain(ev, awsRoot, opts.Now)
	if err == nil {
		checks.Pass("nitro.signature", "ES384 COSE_Sign1 signature verifies")
		checks.Pass("nitro.chain", "chains to the AWS Nitro root (sha256 %s) at %s", AWSRootFingerprint[:16]+"…", opts.Now.Format(time.RFC3339))
		return &Verified{}, nil
	}
	var re *rootError
	if errors.As(err, &re) {
		return nil, checks.Fail("nitro.root", err)
	}
	// Not chained to AWS at opts.Now: simulated, expired or untrusted.
	if simRoot, _, serr := simroots.Nitro(); serr == nil {
		if opts.Cache.verifyChain(ev, simRoot, opts.Now) == nil {
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

// rootError: a chain crypto/x509 built ends elsewhere than at the pinned
// root.
type rootError struct{ msg string }

func (e *rootError) Error() string { return e.msg }

// chainTo builds the chain from the document's certificate through its
// cabundle to root at now (as nitrite does: cabundle as intermediates, any
// extended key usage) and requires every chain found to end at root. It
// returns the first chain.
func chainTo(ev *Evidence, root *x509.Certificate, now time.Time) ([]*x509.Certificate, error) {
	pool := x509.NewCertPool()
	pool.AddCert(root)
	inter := x509.NewCertPool()
	for _, c := range ev.Bundle {
		inter.AddCert(c)
	}
	chains, err := ev.Leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return nil, err
	}
	for _, ch := range chains {
		if !bytes.Equal(ch[len(ch)-1].Raw, root.Raw) {
			return nil, &rootError{fmt.Sprintf("chain ends at %q, not the pinned root", ch[len(ch)-1].Subject.CommonName)}
		}
	}
	return chains[0], nil
}

// coseHeader is nitrite's view of the protected header.
type coseHeader struct {
	Alg interface{} `cbor:"1,keyasint,omitempty"`
}

// coseSignature is the COSE Sig_structure for COSE_Sign1 (RFC 8152 §4.4),
// encoded as nitrite encodes it.
type coseSignature struct {
	_           struct{} `cbor:",toarray"`
	Context     string
	Protected   []byte
	ExternalAAD []byte
	Payload     []byte
}

// checkDocument runs nitrite.Verify's checks of the COSE_Sign1 and of the
// document, in its order and with its errors: the protected header names
// ES384, the mandatory fields are present, digest SHA384, 1-32 PCRs of 32,
// 48 or 64 bytes at indexes 0-31, a non-empty cabundle of 1-1024-byte
// entries, public_key, user_data and nonce at most 1024 bytes, an ECDSA
// certificate signed with ECDSA-SHA384.
func checkDocument(ev *Evidence) (*coseSign1, error) {
	cose := ev.cose
	if cose == nil {
		cose = &coseSign1{}
		if err := cbor.Unmarshal(ev.Raw, cose); err != nil {
			return nil, nitrite.ErrBadCOSESign1Structure
		}
	}
	if len(cose.Protected) == 0 {
		return nil, nitrite.ErrCOSESign1EmptyProtectedSection
	}
	if len(cose.Payload) == 0 {
		return nil, nitrite.ErrCOSESign1EmptyPayloadSection
	}
	if len(cose.Signature) == 0 {
		return nil, nitrite.ErrCOSESign1EmptySignatureSection
	}
	var header coseHeader
	if err := cbor.Unmarshal(cose.Protected, &header); err != nil {
		return nil, nitrite.ErrBadCOSESign1Structure
	}
	switch alg := header.Alg.(type) {
	case int64:
		if alg != -35 {
			return nil, nitrite.ErrCOSESign1BadAlgorithm
		}
	case string:
		if alg != "ES384" {
			return nil, nitrite.ErrCOSESign1BadAlgorithm
		}
	default:
		return nil, nitrite.ErrCOSESign1BadAlgorithm
	}
	doc := &ev.Doc
	if doc.ModuleID == "" || doc.Digest == "" || doc.Timestamp == 0 || doc.PCRs == nil || doc.Certificate == nil || doc.CABundle == nil {
		return nil, nitrite.ErrMandatoryFieldsMissing
	}
	if doc.Digest != "SHA384" {
		return nil, nitrite.ErrBadDigest
	}
	if len(doc.PCRs) < 1 || len(doc.PCRs) > 32 {
		return nil, nitrite.ErrBadPCRs
	}
	for key, value := range doc.PCRs {
		if key > 31 {
			return nil, nitrite.ErrBadPCRIndex
		}
		if value == nil || !(len(value) == 32 || len(value) == 48 || len(value) == 64) {
			return nil, nitrite.ErrBadPCRValue
		}
	}
	if len(doc.CABundle) < 1 {
		return nil, nitrite.ErrBadCABundle
	}
	for _, item := range doc.CABundle {
		if len(item) < 1 || len(item) > 1024 {
			return nil, nitrite.ErrBadCABundleItem
		}
	}
	if len(doc.PublicKey) > 1024 {
		return nil, nitrite.ErrBadPublicKey
	}
	if len(doc.UserData) > 1024 {
		return nil, nitrite.ErrBadUserData
	}
	if len(doc.Nonce) > 1024 {
		return nil, nitrite.ErrBadNonce
	}
	if ev.Leaf.PublicKeyAlgorithm != x509.ECDSA {
		return nil, nitrite.ErrBadCertificatePublicKeyAlgorithm
	}
	if ev.Leaf.SignatureAlgorithm != x509.ECDSAWithSHA384 {
		return nil, nitrite.ErrBadCertificateSigningAlgorithm
	}
	return cose, nil
}

// checkSignature verifies the COSE_Sign1 signature (r ‖ s, 48 bytes each)
// over the Sig_structure with the P-384 key.
func checkSignature(pub *ecdsa.PublicKey, cose *coseSign1) bool {
	sigStruct, err := cbor.Marshal(&coseSignature{Context: "Signature1", Protected: cose.Protected, ExternalAAD: []byte{}, Payload: cose.Payload})
	if err != nil {
		return false
	}
	h := sha512.Sum384(sigStruct)
	if len(cose.Signature) != 2*len(h) {
		return false
	}
	r := new(big.Int).SetBytes(cose.Signature[:len(h)])
	s := new(big.Int).SetBytes(cose.Signature[len(h):])
	return ecdsa.Verify(pub, h[:], r, s)
}
