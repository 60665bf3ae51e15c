package vcache

import (
	"crypto/x509"
	"time"
)

// Chains is what the certificate-chain verifiers (SEV-SNP, Nitro) keep: the
// chains they verified, each with a value V (what the verification found),
// and beside them the certificates they parsed (keyed by the SHA-256 of
// their DER; parsing is not trusting). A vendor's Cache is a defined type
// over it (type Cache vcache.Chains[V]) and converts its receiver to reach
// these methods, so a nil vendor *Cache stays usable. Every method takes a
// nil *Chains as a cache that holds nothing.
type Chains[V any] struct {
	chains *Cache[V]
	certs  *Cache[*x509.Certificate]
}

// NewChains returns a cache of at most max chains (max 0: defaultMax;
// max < 0: nil, no caching) and certs parsed certificates.
func NewChains[V any](max, defaultMax, certs int) *Chains[V] {
	if max < 0 {
		return nil
	}
	if max == 0 {
		max = defaultMax
	}
	return &Chains[V]{chains: New[V](max), certs: New[*x509.Certificate](certs)}
}

// Len is the number of chains held.
func (c *Chains[V]) Len() int {
	if c == nil {
		return 0
	}
	return c.chains.Len()
}

// Stats returns the chain lookups' counters.
func (c *Chains[V]) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	return c.chains.Stats()
}

// Get returns the value of the chain under k if at lies inside its window.
func (c *Chains[V]) Get(k Key, at time.Time) (v V, ok bool) {
	if c == nil {
		return v, false
	}
	return c.chains.Get(k, at)
}

// Put records that the chain under k verified, for verification times in
// [from, until].
func (c *Chains[V]) Put(k Key, v V, from, until time.Time) {
	if c != nil {
		c.chains.Put(k, v, from, until)
	}
}

// ParseCert is x509.ParseCertificate through the parsed certificates.
func (c *Chains[V]) ParseCert(der []byte) (*x509.Certificate, error) {
	if c == nil {
		return x509.ParseCertificate(der)
	}
	return ParseCertificate(c.certs, der)
}
