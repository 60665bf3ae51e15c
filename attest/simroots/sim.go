//go:build !production

package simroots

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"sync"
	"time"

	sevtest "github.com/google/go-sev-guest/testing"
	sevtrust "github.com/google/go-sev-guest/verify/trust"
)

// Available reports whether this build carries the simulated test roots.
func Available() bool { return true }

// epoch is the fixed NotBefore of every simulated certificate.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// DeriveKey derives a deterministic P-384 key from a public label. Test use
// only: anyone can derive the same key.
func DeriveKey(label string) *ecdsa.PrivateKey {
	for ctr := byte(0); ; ctr++ {
		d := sha512.Sum384(append([]byte("tenzro/simroots/v1/"+label+"/"), ctr))
		k, err := ecdsa.ParseRawPrivateKey(elliptic.P384(), d[:])
		if err == nil {
			return k
		}
	}
}

var (
	nitroOnce sync.Once
	nitroCert *x509.Certificate
	nitroKey  *ecdsa.PrivateKey
	nitroErr  error
)

// Nitro returns the simulated Nitro root certificate and its key.
func Nitro() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	nitroOnce.Do(func() {
		nitroKey = DeriveKey("nitro-root")
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(0x5111),
			Subject:               pkix.Name{CommonName: "aws.nitro-enclaves SIMULATED", Organization: []string{Label}},
			NotBefore:             epoch,
			NotAfter:              epoch.AddDate(30, 0, 0),
			IsCA:                  true,
			BasicConstraintsValid: true,
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
			SignatureAlgorithm:    x509.ECDSAWithSHA384,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, nitroKey.Public(), nitroKey)
		if err != nil {
			nitroErr = fmt.Errorf("simulated nitro root: %w", err)
			return
		}
		nitroCert, nitroErr = x509.ParseCertificate(der)
	})
	return nitroCert, nitroKey, nitroErr
}

// NitroPool returns a pool holding only the simulated Nitro root.
func NitroPool() (*x509.CertPool, error) {
	c, _, err := Nitro()
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	p.AddCert(c)
	return p, nil
}

var (
	snpMu      sync.Mutex
	snpSigners = map[string]*sevtest.AmdSigner{}
)

// SNPSigner returns go-sev-guest's test-only AMD signer (ARK, ASK, ASVK,
// VCEK, VLEK with the library's fixed test keys) for a product name such as
// "Milan", "Genoa" or "Turin".
func SNPSigner(productName string) (*sevtest.AmdSigner, error) {
	snpMu.Lock()
	defer snpMu.Unlock()
	if s, ok := snpSigners[productName]; ok {
		return s, nil
	}
	s, err := sevtest.DefaultTestOnlyCertChain(productName, epoch)
	if err != nil {
		return nil, fmt.Errorf("simulated SNP signer for %s: %w", productName, err)
	}
	snpSigners[productName] = s
	return s, nil
}

// SNPProductName is the product the simulated SNP signer certifies by
// default.
const SNPProductName = "Milan-B0"

// SNPProductNames maps each AMD product line with simulated roots to the
// product name (line and stepping) its simulated signer certifies.
var SNPProductNames = map[string]string{"Milan": "Milan-B0", "Genoa": "Genoa-B0", "Turin": "Turin-B0"}

// SNPRoots returns trusted roots for the simulated AMD chains (VCEK and
// VLEK) of every product line in SNPProductNames, keyed by product line.
func SNPRoots() (map[string][]*sevtrust.AMDRootCerts, error) {
	out := map[string][]*sevtrust.AMDRootCerts{}
	for line := range SNPProductNames {
		r, err := SNPRootsFor(line)
		if err != nil {
			return nil, err
		}
		out[line] = r[line]
	}
	return out, nil
}

// SNPRootsFor returns the simulated roots of one product line only.
func SNPRootsFor(productLine string) (map[string][]*sevtrust.AMDRootCerts, error) {
	name, ok := SNPProductNames[productLine]
	if !ok {
		return nil, fmt.Errorf("simulated SNP roots: product line %q (want Milan, Genoa or Turin)", productLine)
	}
	s, err := SNPSigner(name)
	if err != nil {
		return nil, err
	}
	r := sevtrust.AMDRootCertsProduct(productLine)
	r.ProductCerts = &sevtrust.ProductCerts{Ark: s.Ark, Ask: s.Ask, Asvk: s.Asvk}
	return map[string][]*sevtrust.AMDRootCerts{productLine: {r}}, nil
}

// IsSNPSimulatedArk reports whether ark carries a simulated ARK key.
func IsSNPSimulatedArk(ark *x509.Certificate) bool {
	if ark == nil {
		return false
	}
	s, err := SNPSigner(SNPProductName)
	if err != nil {
		return false
	}
	return bytes.Equal(ark.RawSubjectPublicKeyInfo, s.Ark.RawSubjectPublicKeyInfo)
}
