//go:build production

package simroots

import (
	"crypto/ecdsa"
	"crypto/x509"

	sevtest "github.com/google/go-sev-guest/testing"
	sevtrust "github.com/google/go-sev-guest/verify/trust"
)

// Available reports whether this build carries the simulated test roots.
func Available() bool { return false }

// Nitro returns the simulated Nitro root. Production builds have none.
func Nitro() (*x509.Certificate, *ecdsa.PrivateKey, error) { return nil, nil, ErrProduction }

// NitroPool returns the simulated Nitro root pool. Production builds have none.
func NitroPool() (*x509.CertPool, error) { return nil, ErrProduction }

// SNPSigner returns the simulated AMD signer. Production builds have none.
func SNPSigner(productName string) (*sevtest.AmdSigner, error) { return nil, ErrProduction }

// SNPRoots returns the simulated AMD roots. Production builds have none.
func SNPRoots() (map[string][]*sevtrust.AMDRootCerts, error) { return nil, ErrProduction }

// SNPRootsFor returns the simulated roots of one product line. Production builds have none.
func SNPRootsFor(string) (map[string][]*sevtrust.AMDRootCerts, error) { return nil, ErrProduction }

// TDXPool returns the simulated Intel SGX root pool. Production builds have none.
func TDXPool() (*x509.CertPool, error) { return nil, ErrProduction }

// TDXRoot returns the simulated Intel SGX root. Production builds have none.
func TDXRoot() (*x509.Certificate, error) { return nil, ErrProduction }

// IsTDXSimulatedRoot reports whether root is the simulated Intel SGX root (never, here).
func IsTDXSimulatedRoot(*x509.Certificate) bool { return false }

// IsSNPSimulatedArk reports whether ark is a simulated ARK (never, here).
func IsSNPSimulatedArk(*x509.Certificate) bool { return false }

// NvidiaAuthority is a simulated NVIDIA root; production builds have none.
type NvidiaAuthority struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Nvidia returns the simulated NVIDIA roots. Production builds have none.
func Nvidia() (device, rim *NvidiaAuthority, err error) { return nil, nil, ErrProduction }

// IsNvidiaSimulatedRoot reports whether c is the simulated device root (never, here).
func IsNvidiaSimulatedRoot(*x509.Certificate) bool { return false }
