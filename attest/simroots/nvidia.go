//go:build !production

package simroots

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"sync"
)

// NvidiaAuthority is a simulated NVIDIA root (device identity or RIM
// signing) with its key: P-384, labelled SIMULATED.
type NvidiaAuthority struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

var (
	nvOnce          sync.Once
	nvDevice, nvRIM *NvidiaAuthority
	nvErr           error
)

func nvRoot(label, cn string, serial int64) (*NvidiaAuthority, error) {
	k := DeriveKey(label)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: []string{Label}},
		NotBefore: epoch, NotAfter: epoch.AddDate(30, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature, SignatureAlgorithm: x509.ECDSAWithSHA384,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	if err != nil {
		return nil, fmt.Errorf("simulated NVIDIA root: %w", err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &NvidiaAuthority{Cert: c, Key: k}, nil
}

// Nvidia returns the simulated NVIDIA device identity root and RIM root.
func Nvidia() (device, rim *NvidiaAuthority, err error) {
	nvOnce.Do(func() {
		if nvDevice, nvErr = nvRoot("nvidia-device-root", "NVIDIA Device Identity CA SIMULATED", 0x6e01); nvErr != nil {
			return
		}
		nvRIM, nvErr = nvRoot("nvidia-rim-root", "NVIDIA CoRIM signing Root CA SIMULATED", 0x6e02)
	})
	return nvDevice, nvRIM, nvErr
}

// IsNvidiaSimulatedRoot reports whether c is the simulated device root.
func IsNvidiaSimulatedRoot(c *x509.Certificate) bool {
	d, _, err := Nvidia()
	return err == nil && c != nil && c.Equal(d.Cert)
}
