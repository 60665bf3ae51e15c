package snp

import (
	"bytes"
	"crypto/x509"
	"time"

	"github.com/google/go-sev-guest/abi"
	"github.com/google/go-sev-guest/kds"
	"github.com/google/go-sev-guest/verify/trust"

	"github.com/tenzro/train/attest/internal/vcache"
)

// DefaultCacheEntries bounds a Cache made with NewCache(0).
const DefaultCacheEntries = 1024

// Cache remembers endorsement-key chains (VCEK → ASK → ARK, VLEK → ASVK →
// ARK) that go-sev-guest verified, so a verifier that sees the same machine
// again checks only the report's own signature (one ECDSA P-384
// verification) and not the two RSA-4096 signatures of the chain.
//
// An entry is keyed by SHA-256 over the signer kind, the product line, the
// exact DER of the endorsement-key certificate and the exact DER of every
// trusted root certificate (ARK, ASK, ASVK) of that product line; it is
// stored only after the library accepted the chain, and it is used only
// for verification times inside the validity of every one of those
// certificates (a time outside is a miss: the chain is verified again, and
// refused as it would be without a cache). It holds at most the bound given
// to NewCache, least recently used first out. Safe for concurrent use; a nil
// *Cache caches nothing.
//
// Beside the chains it keeps up to ParsedCertEntries parsed certificates
// (keyed by the SHA-256 of their DER; parsing is not trusting).
type Cache vcache.Chains[chainEntry]

// ParsedCertEntries bounds the parsed certificates a Cache keeps.
const ParsedCertEntries = 256

type chainEntry struct{ simulated bool }

// NewCache returns a cache of at most max chains (max 0:
// DefaultCacheEntries; max < 0: nil, no caching).
func NewCache(max int) *Cache {
	return (*Cache)(vcache.NewChains[chainEntry](max, DefaultCacheEntries, ParsedCertEntries))
}

// chains is c as the shared chain cache (nil stays nil: caches nothing).
func (c *Cache) chains() *vcache.Chains[chainEntry] { return (*vcache.Chains[chainEntry])(c) }

// Len is the number of chains held.
func (c *Cache) Len() int { return c.chains().Len() }

// Stats returns the lookup counters.
func (c *Cache) Stats() vcache.Stats { return c.chains().Stats() }

// parseCert parses a certificate through the parsed certificates.
func (c *Cache) parseCert(der []byte) (*x509.Certificate, error) { return c.chains().ParseCert(der) }

// chainKey is the key of ev's endorsement-key chain against roots, and the
// window of the certificates it covers. ok is false when the chain cannot
// be cached: no roots (the library would fall back to its own), or a
// product line that cannot be told (the library refuses those).
func chainKey(ev *Evidence, ek *x509.Certificate, ekDER []byte, roots map[string][]*trust.AMDRootCerts) (k vcache.Key, from, until time.Time, ok bool) {
	if len(roots) == 0 {
		return k, from, until, false
	}
	// The product line as go-sev-guest finds it: from the report's CPUID
	// (v3+), else from the certificate's product name.
	known := ""
	if fms := ev.Report.GetCpuid1EaxFms(); fms != 0 {
		known = kds.ProductLineFromFms(fms)
	}
	line := known
	if line == "" {
		ext, err := kds.CertificateExtensions(ek, ev.Signer)
		if err != nil {
			return k, from, until, false
		}
		p, err := kds.ParseProductName(ext.ProductName, ev.Signer)
		if err != nil {
			return k, from, until, false
		}
		line = kds.ProductLine(p)
	}
	rs := roots[line]
	if len(rs) == 0 {
		return k, from, until, false
	}
	b := vcache.NewBuilder("tenzro/attest/snp/chain/v1").String(ev.Signer.String()).String(known).String(line).Bytes(ekDER)
	certs := []*x509.Certificate{ek}
	for _, r := range rs {
		if r == nil || r.ProductCerts == nil {
			return k, from, until, false
		}
		b.String(r.GetProductLine())
		for _, c := range []*x509.Certificate{r.ProductCerts.Ark, r.ProductCerts.Ask, r.ProductCerts.Asvk} {
			if c == nil {
				b.Bytes(nil)
				continue
			}
			b.Bytes(c.Raw)
			certs = append(certs, c)
		}
	}
	from, until = vcache.Window(certs...)
	return b.Sum(), from, until, true
}

// canonical reports whether the report's bytes are what go-sev-guest
// verifies its signature over (it re-encodes the parsed report): only then
// does the one signature check here stand for the library's.
func canonical(ev *Evidence) bool {
	b, err := abi.ReportToAbiBytes(ev.Report)
	return err == nil && bytes.Equal(b, ev.Raw)
}

// lookup returns the cached outcome of ev's chain against roots at now.
func (c *Cache) lookup(ev *Evidence, ek *x509.Certificate, ekDER []byte, roots map[string][]*trust.AMDRootCerts, now time.Time) (entry chainEntry, hit bool) {
	if c == nil {
		return entry, false
	}
	k, _, _, ok := chainKey(ev, ek, ekDER, roots)
	if !ok {
		return entry, false
	}
	return c.chains().Get(k, now)
}

// store records that ev's chain verified against roots (at some time in its
// window).
func (c *Cache) store(ev *Evidence, ek *x509.Certificate, ekDER []byte, roots map[string][]*trust.AMDRootCerts, e chainEntry) {
	if c == nil {
		return
	}
	if k, from, until, ok := chainKey(ev, ek, ekDER, roots); ok {
		c.chains().Put(k, e, from, until)
	}
}
