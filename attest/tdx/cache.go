package tdx

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"time"

	"github.com/google/go-tdx-guest/pcs"
	pb "github.com/google/go-tdx-guest/proto/tdx"
	"github.com/google/go-tdx-guest/verify"

	"github.com/tenzro/train/attest/internal/vcache"
)

// Cache bounds.
const (
	// DefaultCacheEntries bounds the verified PCK chains of a Cache made
	// with NewCache(0).
	DefaultCacheEntries = 1024
	// CollateralEntries bounds the parsed collateral documents (each at most
	// MaxCollateral bytes of JSON) and, separately, their decoded form.
	CollateralEntries = 32
	// ParsedChainEntries bounds the parsed PCK chains.
	ParsedChainEntries = 256
)

// Cache keeps what go-tdx-guest verified so it is not verified again for
// every quote, and the collateral parsed once per content:
//
//   - verified: a PCK chain with the collateral it was checked against —
//     PCK certificate chain to the pinned root, CRLs (signatures, PCK and
//     intermediate not revoked), TCB info and QE identity (signatures and
//     issuer chains). Keyed by SHA-256 over the pinned root's DER, the PCK
//     chain exactly as the quote carries it, and every field of the
//     collateral; stored only after the library accepted a quote with
//     them; used only for verification times inside the validity of every
//     certificate involved and not after the next update of the TCB info,
//     the QE identity or either CRL. A hit still checks everything that is
//     particular to the quote: the TEE type, the quote's signature by its
//     attestation key, the QE report's signature by the PCK key, the QE
//     report data's binding of the attestation key, the TD quote body
//     against the TCB info (FMSPC, PCEID, MRSIGNERSEAM, SEAM attributes,
//     TCB level and status) and the QE report against the QE identity.
//   - parsed: collateral JSON (an envelope's, or a cache-directory file's
//     current content, read on every call) → Collateral, keyed by SHA-256
//     of the bytes, and its decoded TCB info and QE identity (up to
//     CollateralEntries each).
//   - chains: a quote's PCK chain (PEM as carried) → parsed certificates,
//     FMSPC and CA, keyed by SHA-256 of the PEM (up to ParsedChainEntries).
//
// Nothing parsed is trusted until verified. Safe for concurrent use; a nil
// *Cache caches nothing.
type Cache struct {
	verified *vcache.Cache[*verifiedEntry]
	parsed   *vcache.Cache[*parsedCollateral]
	decoded  *vcache.Cache[*decodedCollateral]
	chains   *vcache.Cache[*parsedChain]
}

// NewCache returns a cache of at most max verified chains (0:
// DefaultCacheEntries; < 0: nil, no caching), CollateralEntries parsed
// collateral documents and ParsedChainEntries parsed PCK chains.
func NewCache(max int) *Cache {
	if max < 0 {
		return nil
	}
	if max == 0 {
		max = DefaultCacheEntries
	}
	return &Cache{
		verified: vcache.New[*verifiedEntry](max),
		parsed:   vcache.New[*parsedCollateral](CollateralEntries),
		decoded:  vcache.New[*decodedCollateral](CollateralEntries),
		chains:   vcache.New[*parsedChain](ParsedChainEntries),
	}
}

// Len is the number of verified chains held.
func (c *Cache) Len() int {
	if c == nil {
		return 0
	}
	return c.verified.Len()
}

// Stats returns the lookup counters of the verified chains.
func (c *Cache) Stats() vcache.Stats {
	if c == nil {
		return vcache.Stats{}
	}
	return c.verified.Stats()
}

// ParseCollateral is ParseCollateral through the cache. The result is
// shared: it must not be modified.
func (c *Cache) ParseCollateral(b []byte) (*Collateral, error) {
	pc, err := c.parse(b)
	if err != nil {
		return nil, err
	}
	return pc.c, nil
}

// Load is d.Load(fmspc) through the cache: the file is read on every call
// and parsed only when its content is new. The result is shared: it must
// not be modified.
func (c *Cache) Load(d CacheDir, fmspc string) (*Collateral, error) {
	return d.load(fmspc, c)
}

type parsedCollateral struct {
	c        *Collateral
	fmspc    string
	fmspcErr error
}

func (c *Cache) parse(b []byte) (*parsedCollateral, error) {
	if len(b) > MaxCollateral {
		return nil, fmt.Errorf("tdx collateral is %d bytes, limit %d", len(b), MaxCollateral)
	}
	var k vcache.Key
	if c != nil {
		k = vcache.Key(sha256.Sum256(b))
		if pc, ok := c.parsed.Get(k, time.Time{}); ok {
			return pc, nil
		}
	}
	col, err := ParseCollateral(b)
	if err != nil {
		return nil, err
	}
	pc := &parsedCollateral{c: col}
	pc.fmspc, pc.fmspcErr = col.FMSPC()
	if c != nil {
		from, until := vcache.Always()
		c.parsed.Put(k, pc, from, until)
	}
	return pc, nil
}

// collateralMemo remembers the content key of a Collateral's fields.
type collateralMemo struct {
	fields Collateral // memo nil
	key    vcache.Key
}

// contentKey is the SHA-256 over every field of the collateral: memoized
// for a Collateral from ParseCollateral whose fields are still the ones
// parsed (comparing them costs next to nothing while they are: the
// strings are the same), computed otherwise.
func contentKey(col *Collateral) vcache.Key {
	if m := col.memo; m != nil {
		f := *col
		f.memo = nil
		if f == m.fields {
			return m.key
		}
	}
	return hashCollateral(col)
}

func hashCollateral(col *Collateral) vcache.Key {
	return vcache.NewBuilder("tenzro/attest/tdx/collateral/v1").
		String(col.PCKCRLIssuerChain).String(col.RootCACRL).String(col.PCKCRL).
		String(col.TCBInfoIssuerChain).String(col.TCBInfo).String(col.TCBInfoSignature).
		String(col.QEIdentityIssuerChain).String(col.QEIdentity).String(col.QEIdentitySignature).Sum()
}

// decodedCollateral is the collateral as go-tdx-guest decodes it (through
// the same getter), with what bounds the time it can be trusted at.
type decodedCollateral struct {
	fmspc      string
	tcbInfo    pcs.TdxTcbInfo
	qeIdentity pcs.QeIdentity
	// from, until: the intersection of the validity of the issuer chains'
	// certificates, ending no later than the next update of the TCB info,
	// the QE identity and both CRLs.
	from, until time.Time
}

func decodeCollateral(col *Collateral) (*decodedCollateral, error) {
	d := &decodedCollateral{}
	var err error
	if d.fmspc, err = col.FMSPC(); err != nil {
		return nil, err
	}
	g := getter{col}
	_, body, _ := g.Get(pcs.TcbInfoURL(d.fmspc))
	if err := json.Unmarshal(body, &d.tcbInfo); err != nil {
		return nil, fmt.Errorf("tcb_info: %w", err)
	}
	_, body, _ = g.Get(pcs.QeIdentityURL())
	if err := json.Unmarshal(body, &d.qeIdentity); err != nil {
		return nil, fmt.Errorf("qe_identity: %w", err)
	}
	var certs []*x509.Certificate
	for _, chain := range []string{col.TCBInfoIssuerChain, col.QEIdentityIssuerChain, col.PCKCRLIssuerChain} {
		rest := []byte(chain)
		for {
			var blk *pem.Block
			if blk, rest = pem.Decode(rest); blk == nil {
				break
			}
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("issuer chain: %w", err)
			}
			certs = append(certs, c)
		}
	}
	d.from, d.until = vcache.Window(certs...)
	next := []time.Time{d.tcbInfo.TcbInfo.NextUpdate, d.qeIdentity.EnclaveIdentity.NextUpdate}
	for _, h := range []string{col.RootCACRL, col.PCKCRL} {
		der, err := hex.DecodeString(h)
		if err != nil {
			return nil, fmt.Errorf("crl: %w", err)
		}
		crl, err := x509.ParseRevocationList(der)
		if err != nil {
			return nil, fmt.Errorf("crl: %w", err)
		}
		next = append(next, crl.NextUpdate)
	}
	for _, n := range next {
		if n.IsZero() {
			return nil, fmt.Errorf("collateral without a next update")
		}
		if n.Before(d.until) {
			d.until = n
		}
	}
	return d, nil
}

// verifiedEntry is a PCK chain and collateral the library accepted.
type verifiedEntry struct {
	col *decodedCollateral
	pck *x509.Certificate
	ext *pcs.PckExtensions
}

// entryKey is the key of the quote's PCK chain with col under the pinned
// root.
func entryKey(root *x509.Certificate, ev *Evidence, col *Collateral) (vcache.Key, bool) {
	sd, ok := ev.Quote.(interface {
		GetSignedData() *pb.Ecdsa256BitQuoteV4AuthData
	})
	if !ok || root == nil {
		return vcache.Key{}, false
	}
	chain := sd.GetSignedData().GetCertificationData().GetQeReportCertificationData().GetPckCertificateChainData().GetPckCertChain()
	ck := contentKey(col)
	return vcache.NewKey("tenzro/attest/tdx/verified/v1", root.Raw, chain, ck[:]), true
}

// store records that the library accepted a quote with ev's PCK chain and
// col under root.
func (c *Cache) store(k vcache.Key, root *x509.Certificate, ev *Evidence, col *Collateral) {
	if c == nil {
		return
	}
	// The chain the library verified: the quote's own (not ev.Chain, which
	// a caller could have set to something else).
	chain, err := verify.ExtractChainFromQuote(ev.Quote)
	if err != nil {
		return
	}
	ck := contentKey(col)
	d, ok := c.decoded.Get(ck, time.Time{})
	if !ok {
		var err error
		if d, err = decodeCollateral(col); err != nil {
			return
		}
		from, until := vcache.Always()
		c.decoded.Put(ck, d, from, until)
	}
	ext, err := pcs.PckCertificateExtensions(chain.PCKCertificate)
	if err != nil {
		return
	}
	from, until := vcache.Window(root, chain.RootCertificate, chain.IntermediateCertificate, chain.PCKCertificate)
	from, until = vcache.Narrow(from, until, d.from, d.until)
	c.verified.Put(k, &verifiedEntry{col: d, pck: chain.PCKCertificate, ext: ext}, from, until)
}
