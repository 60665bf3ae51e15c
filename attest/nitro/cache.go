package nitro

import (
	"crypto/x509"
	"time"

	"github.com/tenzro/train/attest/internal/vcache"
)

// DefaultCacheEntries bounds a Cache made with NewCache(0).
const DefaultCacheEntries = 1024

// Cache remembers document certificate chains (leaf → cabundle → root)
// that verified, so documents of one enclave — whose leaf certificate is
// the same for hours — cost only their COSE signature (one ECDSA P-384
// verification) instead of that plus four for the chain.
//
// An entry is keyed by SHA-256 over the exact DER of the trusted root, the
// leaf and every cabundle certificate, in order; it is stored only after
// crypto/x509 built a chain from them to the root, and it is used only for
// verification times inside the validity of every certificate of that
// chain (outside it is a miss: the chain is verified again, and refused as
// it would be without a cache). At most the bound given to NewCache,
// least recently used first out. Safe for concurrent use; a nil *Cache
// caches nothing.
//
// Beside the chains it keeps up to ParsedCertEntries parsed certificates
// (keyed by the SHA-256 of their DER; parsing is not trusting).
type Cache vcache.Chains[struct{}]

// ParsedCertEntries bounds the parsed certificates a Cache keeps.
const ParsedCertEntries = 256

// NewCache returns a cache of at most max chains (max 0:
// DefaultCacheEntries; max < 0: nil, no caching).
func NewCache(max int) *Cache {
	return (*Cache)(vcache.NewChains[struct{}](max, DefaultCacheEntries, ParsedCertEntries))
}

// chains is c as the shared chain cache (nil stays nil: caches nothing).
func (c *Cache) chains() *vcache.Chains[struct{}] { return (*vcache.Chains[struct{}])(c) }

// Len is the number of chains held.
func (c *Cache) Len() int { return c.chains().Len() }

// Stats returns the lookup counters.
func (c *Cache) Stats() vcache.Stats { return c.chains().Stats() }

// parseCert parses a certificate through the parsed certificates.
func (c *Cache) parseCert(der []byte) (*x509.Certificate, error) { return c.chains().ParseCert(der) }

func chainKey(ev *Evidence, root *x509.Certificate) vcache.Key {
	b := vcache.NewBuilder("tenzro/attest/nitro/chain/v1").Bytes(root.Raw).Bytes(ev.Leaf.Raw)
	for _, c := range ev.Bundle {
		b.Bytes(c.Raw)
	}
	return b.Sum()
}

// verifyChain verifies ev's chain to root at now (crypto/x509, with the
// cabundle as intermediates), through the cache.
func (c *Cache) verifyChain(ev *Evidence, root *x509.Certificate, now time.Time) error {
	var k vcache.Key
	if c != nil {
		k = chainKey(ev, root)
		if _, hit := c.chains().Get(k, now); hit {
			return nil
		}
	}
	chain, err := chainTo(ev, root, now)
	if err != nil {
		return err
	}
	if c != nil {
		from, until := vcache.Window(chain...)
		c.chains().Put(k, struct{}{}, from, until)
	}
	return nil
}
