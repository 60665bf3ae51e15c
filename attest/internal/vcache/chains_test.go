package vcache

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
)

func selfSigned(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vcache test"}, NotBefore: t0, NotAfter: t0.AddDate(1, 0, 0)}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// Chains is the SEV-SNP and Nitro caches' shared body: a bound with a
// default, nil-safe counters, and parsed certificates kept beside the
// chains (issue 21: one copy instead of two).
func TestChains(t *testing.T) {
	der := selfSigned(t)
	var none *Chains[bool]
	if NewChains[bool](-1, 4, 2) != nil {
		t.Fatal("NewChains(-1) is not nil")
	}
	none.Put(key(1), true, t0, t0)
	if _, ok := none.Get(key(1), t0); ok || none.Len() != 0 || none.Stats() != (Stats{}) {
		t.Fatal("a nil Chains holds something")
	}
	if c, err := none.ParseCert(der); err != nil || c.Subject.CommonName != "vcache test" {
		t.Fatalf("nil Chains ParseCert: %v", err)
	}

	c := NewChains[bool](0, 3, 2) // 0: the default bound, 3
	if c.chains.Max() != 3 || c.certs.Max() != 2 {
		t.Fatalf("bounds %d chains, %d certificates; want 3 and 2", c.chains.Max(), c.certs.Max())
	}
	for i := range 5 {
		c.Put(key(i), i%2 == 0, t0, t0.AddDate(0, 1, 0))
	}
	if c.Len() != 3 || c.Stats().Evictions != 2 {
		t.Fatalf("len %d, stats %+v", c.Len(), c.Stats())
	}
	if v, ok := c.Get(key(4), t0); !ok || !v || c.Stats().Hits != 1 {
		t.Fatalf("get: %v %v %+v", v, ok, c.Stats())
	}
	if _, ok := c.Get(key(4), t0.AddDate(0, 2, 0)); ok || c.Stats().Expired != 1 {
		t.Fatalf("outside the window: %v %+v", ok, c.Stats())
	}
	a, err := c.ParseCert(der)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := c.ParseCert(der); err != nil || b != a {
		t.Fatalf("the second parse of the same DER is not the kept certificate: %v", err)
	}
	if _, err := c.ParseCert(der[:len(der)-1]); err == nil {
		t.Fatal("a truncated certificate parsed")
	}
	if c.Stats().Hits != 1 {
		t.Fatalf("certificate lookups counted as chain lookups: %+v", c.Stats())
	}
}
