package nvidia

import (
	"crypto/sha256"
	"crypto/x509"
	"sync"
	"time"
)

// Cache remembers verified device chains and RIMs, so a verifier that sees
// the same GPU (and the same RIMs) every round checks only what changes:
// the report's signature, nonce and measurements. An entry is used only
// inside the validity window of every certificate it was verified with,
// and only for the same root; the cache holds at most maxCache entries of
// each kind (then it starts over).
type Cache struct {
	mu     sync.Mutex
	chains map[[32]byte]cachedChain
	rims   map[[32]byte]cachedRIM
}

const maxCache = 1024

type cachedChain struct {
	path        []*x509.Certificate
	from, until time.Time
	root        *x509.Certificate
}

type cachedRIM struct {
	rim         *RIM
	from, until time.Time
	root        *x509.Certificate
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{chains: map[[32]byte]cachedChain{}, rims: map[[32]byte]cachedRIM{}}
}

func window(certs []*x509.Certificate) (from, until time.Time) {
	for i, c := range certs {
		if i == 0 || c.NotBefore.After(from) {
			from = c.NotBefore
		}
		if i == 0 || c.NotAfter.Before(until) {
			until = c.NotAfter
		}
	}
	return from, until
}

func inWindow(now, from, until time.Time) bool { return !now.Before(from) && !now.After(until) }

// VerifyChain is VerifyChain with the cache (c nil: no cache).
func (c *Cache) VerifyChain(chain []*x509.Certificate, root *x509.Certificate, now time.Time) ([]*x509.Certificate, error) {
	if c == nil {
		return VerifyChain(chain, root, now)
	}
	h := sha256.New()
	for _, x := range chain {
		h.Write(x.Raw)
	}
	var k [32]byte
	copy(k[:], h.Sum(nil))
	c.mu.Lock()
	e, ok := c.chains[k]
	c.mu.Unlock()
	if ok && e.root.Equal(root) && inWindow(now, e.from, e.until) {
		return e.path, nil
	}
	path, err := VerifyChain(chain, root, now)
	if err != nil {
		return nil, err
	}
	from, until := window(path)
	c.mu.Lock()
	if len(c.chains) >= maxCache {
		c.chains = map[[32]byte]cachedChain{}
	}
	c.chains[k] = cachedChain{path: path, from: from, until: until, root: root}
	c.mu.Unlock()
	return path, nil
}

// VerifyRIM is VerifyRIM with the cache (c nil: no cache).
func (c *Cache) VerifyRIM(doc []byte, root *x509.Certificate, now time.Time) (*RIM, string, error) {
	if c == nil {
		return VerifyRIM(doc, root, now)
	}
	k := sha256.Sum256(doc)
	c.mu.Lock()
	e, ok := c.rims[k]
	c.mu.Unlock()
	if ok && e.root.Equal(root) && inWindow(now, e.from, e.until) {
		return e.rim, "", nil
	}
	r, step, err := VerifyRIM(doc, root, now)
	if err != nil {
		return nil, step, err
	}
	c.mu.Lock()
	if len(c.rims) >= maxCache {
		c.rims = map[[32]byte]cachedRIM{}
	}
	c.rims[k] = cachedRIM{rim: r, from: r.NotBefore, until: r.NotAfter, root: root}
	c.mu.Unlock()
	return r, "", nil
}
