//go:build !production

package simroots

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// The common names go-tdx-guest requires of the Intel SGX PKI. The
// simulated certificates use them too (the library checks them), and carry
// Label in their subject's organization.
const (
	tdxRootCN       = "Intel SGX Root CA"
	tdxPlatformCACN = "Intel SGX PCK Platform CA"
	tdxTCBSigningCN = "Intel SGX TCB Signing"
)

// TDXRootCRLURL is the CRL distribution point of the simulated Intel root
// (go-tdx-guest asks its getter for the root CA CRL at this address; the
// verifier's getter serves the cached CRL instead and never fetches it).
const TDXRootCRLURL = "https://simulated.invalid/IntelSGXRootCA.der"

// DeriveKeyP256 derives a deterministic P-256 key from a public label (the
// Intel SGX PKI is P-256 throughout). Test use only.
func DeriveKeyP256(label string) *ecdsa.PrivateKey {
	for ctr := byte(0); ; ctr++ {
		d := sha256.Sum256(append([]byte("tenzro/simroots/v1/p256/"+label+"/"), ctr))
		k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d[:])
		if err == nil {
			return k
		}
	}
}

// TDXAuthority is the simulated Intel SGX PKI: a root CA, the PCK Platform
// CA that issues PCK certificates, and the TCB signing certificate that
// signs TCB info and QE identity collateral.
type TDXAuthority struct {
	Root, PlatformCA, TCBSigning          *x509.Certificate
	RootKey, PlatformCAKey, TCBSigningKey *ecdsa.PrivateKey
}

var (
	tdxOnce sync.Once
	tdxAuth *TDXAuthority
	tdxErr  error
)

// TDX returns the simulated Intel SGX PKI (built once per process from
// deterministic keys, so evidence made in one process verifies in another).
func TDX() (*TDXAuthority, error) {
	tdxOnce.Do(func() { tdxAuth, tdxErr = buildTDX() })
	return tdxAuth, tdxErr
}

func tdxName(cn string) pkix.Name {
	return pkix.Name{CommonName: cn, Organization: []string{Label}, Country: []string{"US"}}
}

func buildTDX() (*TDXAuthority, error) {
	a := &TDXAuthority{RootKey: DeriveKeyP256("tdx-root"), PlatformCAKey: DeriveKeyP256("tdx-pck-platform-ca"), TCBSigningKey: DeriveKeyP256("tdx-tcb-signing")}
	mk := func(tmpl, parent *x509.Certificate, pub, signer *ecdsa.PrivateKey) (*x509.Certificate, error) {
		tmpl.NotBefore, tmpl.NotAfter = epoch, epoch.AddDate(30, 0, 0)
		tmpl.SignatureAlgorithm = x509.ECDSAWithSHA256
		tmpl.BasicConstraintsValid = true
		if parent == nil {
			parent = tmpl
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub.Public(), signer)
		if err != nil {
			return nil, fmt.Errorf("simulated TDX %q: %w", tmpl.Subject.CommonName, err)
		}
		return x509.ParseCertificate(der)
	}
	var err error
	a.Root, err = mk(&x509.Certificate{SerialNumber: big.NewInt(0x7d1), Subject: tdxName(tdxRootCN), IsCA: true, MaxPathLen: 1,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, CRLDistributionPoints: []string{TDXRootCRLURL}}, nil, a.RootKey, a.RootKey)
	if err != nil {
		return nil, err
	}
	a.PlatformCA, err = mk(&x509.Certificate{SerialNumber: big.NewInt(0x7d2), Subject: tdxName(tdxPlatformCACN), IsCA: true, MaxPathLen: 0, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, CRLDistributionPoints: []string{TDXRootCRLURL}}, a.Root, a.PlatformCAKey, a.RootKey)
	if err != nil {
		return nil, err
	}
	a.TCBSigning, err = mk(&x509.Certificate{SerialNumber: big.NewInt(0x7d3), Subject: tdxName(tdxTCBSigningCN),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageContentCommitment, CRLDistributionPoints: []string{TDXRootCRLURL}}, a.Root, a.TCBSigningKey, a.RootKey)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// CRLs returns the root CA CRL (issued by the root) and the PCK CRL (issued
// by the Platform CA), both empty, in DER, valid from an hour before now
// for 30 days.
func (a *TDXAuthority) CRLs(now time.Time) (rootCRL, pckCRL []byte, err error) {
	mk := func(issuer *x509.Certificate, key *ecdsa.PrivateKey) ([]byte, error) {
		return x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
			Number: big.NewInt(now.Unix()), ThisUpdate: now.Add(-time.Hour), NextUpdate: now.AddDate(0, 0, 30),
			SignatureAlgorithm: x509.ECDSAWithSHA256,
		}, issuer, key)
	}
	if rootCRL, err = mk(a.Root, a.RootKey); err != nil {
		return nil, nil, fmt.Errorf("simulated TDX root CRL: %w", err)
	}
	if pckCRL, err = mk(a.PlatformCA, a.PlatformCAKey); err != nil {
		return nil, nil, fmt.Errorf("simulated TDX PCK CRL: %w", err)
	}
	return rootCRL, pckCRL, nil
}

// TDXRoot returns the simulated Intel SGX root.
func TDXRoot() (*x509.Certificate, error) {
	a, err := TDX()
	if err != nil {
		return nil, err
	}
	return a.Root, nil
}

// TDXPool returns a pool holding only the simulated Intel SGX root.
func TDXPool() (*x509.CertPool, error) {
	a, err := TDX()
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	p.AddCert(a.Root)
	return p, nil
}

// IsTDXSimulatedRoot reports whether root carries the simulated label and
// the simulated Intel root key (any copy of it, from any process).
func IsTDXSimulatedRoot(root *x509.Certificate) bool {
	if !IsSimulated(root) {
		return false
	}
	a, err := TDX()
	if err != nil {
		return false
	}
	return bytes.Equal(root.RawSubjectPublicKeyInfo, a.Root.RawSubjectPublicKeyInfo)
}
