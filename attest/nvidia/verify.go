package nvidia

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha512"
	"crypto/x509"
	_ "embed"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	"github.com/tenzro/train/attest/verdict"
)

//go:embed nvidia_device_root.pem
var deviceRootPEM []byte

//go:embed nvidia_rim_root.pem
var rimRootPEM []byte

var deviceRoot, rimRoot = mustPEM(deviceRootPEM, "device"), mustPEM(rimRootPEM, "RIM")

func mustPEM(b []byte, what string) *x509.Certificate {
	blk, _ := pem.Decode(b)
	if blk == nil {
		panic("nvidia: pinned " + what + " root is not PEM")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		panic("nvidia: pinned " + what + " root: " + err.Error())
	}
	return c
}

// DeviceRoot returns NVIDIA's pinned device identity root (P-384).
func DeviceRoot() *x509.Certificate { return deviceRoot }

// RIMRoot returns NVIDIA's pinned RIM signing root.
func RIMRoot() *x509.Certificate { return rimRoot }

// OIDTCGDiceFWID is the DICE FWID extension of the attestation key
// certificate; on Hopper its last 48 bytes are the FWID.
var (
	OIDTCGDiceFWID    = asn1.ObjectIdentifier{2, 23, 133, 5, 4, 1}
	OIDTCGDiceFWIDAlt = asn1.ObjectIdentifier{2, 23, 133, 5, 4, 1, 1}
)

// Roots are the trust anchors Verify uses. The zero value means NVIDIA's
// pinned roots; tests and the simulated provider substitute their own (only
// through attest/simroots, absent from production builds).
type Roots struct {
	Device *x509.Certificate
	RIM    *x509.Certificate
	// Label names the roots in check details.
	Label string
}

func (r Roots) device() *x509.Certificate {
	if r.Device != nil {
		return r.Device
	}
	return deviceRoot
}

func (r Roots) rim() *x509.Certificate {
	if r.RIM != nil {
		return r.RIM
	}
	return rimRoot
}

func (r Roots) label() string {
	if r.Label != "" {
		return r.Label
	}
	return "NVIDIA's pinned root"
}

// VerifyOptions configures Verify.
type VerifyOptions struct {
	Now   time.Time // pinned verification time (required)
	Roots Roots
	Cache *Cache // verified chains (nil: none)
}

// Verify checks, in this order: the device certificate chain to the pinned
// device root at opts.Now (nvidia.chain), the leaf's FWID against the
// report's (nvidia.fwid), and the report's ECDSA P-384 signature over the
// SPDM transcript with the leaf's key (nvidia.signature). It returns the
// verified chain, leaf first.
func Verify(r *Report, chain []*x509.Certificate, opts VerifyOptions, checks *verdict.Checks) ([]*x509.Certificate, error) {
	if opts.Now.IsZero() {
		return nil, checks.Failf("nvidia.clock", "no pinned verification time")
	}
	verified, err := opts.Cache.VerifyChain(chain, opts.Roots.device(), opts.Now)
	if err != nil {
		return nil, checks.Fail("nvidia.chain", err)
	}
	checks.Pass("nvidia.chain", "%d certificates to %s (%s) at %s", len(verified), opts.Roots.label(), opts.Roots.device().Subject.CommonName, opts.Now.UTC().Format(time.RFC3339))
	leaf := verified[0]
	if len(r.FWID) > 0 {
		fw, err := CertFWID(leaf)
		if err != nil {
			return nil, checks.Fail("nvidia.fwid", err)
		}
		if !bytes.Equal(fw, r.FWID) {
			return nil, checks.Failf("nvidia.fwid", "attestation certificate FWID %x is not the report's %x", fw, r.FWID)
		}
		checks.Pass("nvidia.fwid", "certificate and report FWID %x", r.FWID)
	} else {
		checks.Pass("nvidia.fwid", "report carries no FWID (not compared)")
	}
	if err := VerifySignature(r, leaf); err != nil {
		return nil, checks.Fail("nvidia.signature", err)
	}
	checks.Pass("nvidia.signature", "ECDSA P-384/SHA-384 over the SPDM transcript (%d bytes) by %s", len(r.SignedBytes()), leaf.Subject.CommonName)
	return verified, nil
}

// VerifyChain verifies chain (leaf first) to root at now. A trailing copy of
// the root (same subject and key) is ignored; every other certificate is
// only an intermediate. Every certificate must use ECDSA.
func VerifyChain(chain []*x509.Certificate, root *x509.Certificate, now time.Time) ([]*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, fmt.Errorf("empty certificate chain")
	}
	// A trailing copy of the root — same name and key as the pinned root
	// (the trust anchor is the key, not one rendering of its self-signed
	// certificate) — is dropped.
	if last := chain[len(chain)-1]; len(chain) > 1 && bytes.Equal(last.RawSubject, root.RawSubject) &&
		bytes.Equal(last.RawSubjectPublicKeyInfo, root.RawSubjectPublicKeyInfo) {
		chain = chain[:len(chain)-1]
	}
	for i, c := range chain {
		if _, ok := c.PublicKey.(*ecdsa.PublicKey); !ok {
			return nil, fmt.Errorf("certificate %d (%s) has a %T key, want ECDSA", i, c.Subject.CommonName, c.PublicKey)
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	paths, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return nil, fmt.Errorf("certificate chain of %q: %w", chain[0].Subject.CommonName, err)
	}
	// The path must use every certificate given: a chain with extra,
	// unrelated certificates is refused rather than silently pruned.
	if len(paths[0]) != len(chain)+1 {
		return nil, fmt.Errorf("certificate chain has %d certificates but the verified path uses %d", len(chain), len(paths[0])-1)
	}
	return paths[0], nil
}

// VerifySignature checks the report's raw r ‖ s ECDSA P-384 signature over
// SHA-384 of the transcript with leaf's key.
func VerifySignature(r *Report, leaf *x509.Certificate) error {
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P384() {
		return fmt.Errorf("attestation key is %T, want ECDSA P-384", leaf.PublicKey)
	}
	if len(r.Signature) != SignatureSize {
		return fmt.Errorf("signature is %d bytes, want %d", len(r.Signature), SignatureSize)
	}
	h := sha512.Sum384(r.SignedBytes())
	rr := new(big.Int).SetBytes(r.Signature[:48])
	ss := new(big.Int).SetBytes(r.Signature[48:])
	if !ecdsa.Verify(pub, h[:], rr, ss) {
		return fmt.Errorf("report signature does not verify under the attestation certificate's key")
	}
	return nil
}

// CertFWID returns the FWID the attestation certificate carries (the last 48
// bytes of its TCG DICE FWID extension, as on Hopper).
func CertFWID(c *x509.Certificate) ([]byte, error) {
	for _, e := range c.Extensions {
		if e.Id.Equal(OIDTCGDiceFWID) || e.Id.Equal(OIDTCGDiceFWIDAlt) {
			if len(e.Value) < 48 {
				return nil, fmt.Errorf("FWID extension is %d bytes, want at least 48", len(e.Value))
			}
			return e.Value[len(e.Value)-48:], nil
		}
	}
	return nil, fmt.Errorf("attestation certificate %q has no FWID extension", c.Subject.CommonName)
}
