package nvidia

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/beevik/etree"
	dsig "github.com/russellhaering/goxmldsig"
)

// MaxRIM bounds one RIM document (NVIDIA's are about 20 KiB).
const MaxRIM = 256 << 10

// Namespaces of NVIDIA's SWID tags.
const (
	nsSWID   = "http://standards.iso.org/iso/19770/-2/2015/schema.xsd"
	nsSHA384 = "http://www.w3.org/2001/04/xmlenc#sha384"
	nsDSig   = "http://www.w3.org/2000/09/xmldsig#"
)

// Golden is one measurement of a RIM: its index (0-based: golden index i
// is compared with the report's measurement block i+1), whether it is
// compared, its size and the accepted alternatives.
type Golden struct {
	Index        int      `json:"index"`
	Active       bool     `json:"active"`
	Size         int      `json:"size"`
	Alternatives [][]byte `json:"alternatives"`
}

// RIM is a verified reference integrity manifest.
type RIM struct {
	// Version is the Meta colloquialVersion, lower-cased ("550.90.07",
	// "96.00.9f.00.01").
	Version   string
	Product   string
	Golden    map[int]Golden
	Signer    *x509.Certificate // the verified signing certificate
	NotBefore time.Time         // the latest start along the signing chain
	NotAfter  time.Time         // the earliest expiry along the signing chain
}

// VerifyRIM verifies a RIM at now: its signing chain (from KeyInfo) to the
// RIM root, then its enveloped XML signature with goxmldsig, and returns the
// golden measurements read from the signed bytes only (never from the
// unsigned document, so nothing outside the signature can be substituted).
// The error names the failing step: "chain", "signature" or "parse".
func VerifyRIM(doc []byte, root *x509.Certificate, now time.Time) (*RIM, string, error) {
	if len(doc) > MaxRIM {
		return nil, "parse", fmt.Errorf("RIM is %d bytes, limit %d", len(doc), MaxRIM)
	}
	d := etree.NewDocument()
	d.ReadSettings.Permissive = false
	if err := d.ReadFromBytes(doc); err != nil {
		return nil, "parse", fmt.Errorf("RIM XML: %w", err)
	}
	el := d.Root()
	if el == nil || el.Tag != "SoftwareIdentity" || el.NamespaceURI() != nsSWID {
		return nil, "parse", fmt.Errorf("RIM root element is not a SWID SoftwareIdentity")
	}
	sigs := findAllNS(el, nsDSig, "Signature")
	if len(sigs) != 1 || sigs[0].Parent() != el {
		return nil, "parse", fmt.Errorf("RIM has %d XML signatures, want exactly one enveloped in the root", len(sigs))
	}
	sig := sigs[0]
	certs, err := keyInfoCerts(sig)
	if err != nil {
		return nil, "parse", err
	}
	chain, err := VerifyChain(certs, root, now)
	if err != nil {
		return nil, "chain", fmt.Errorf("RIM signing chain: %w", err)
	}
	notBefore, notAfter := window(chain)
	// XML-DSig ECDSA signatures are r ‖ s (RFC 4050); goxmldsig hands the
	// value to x509.CheckSignature, which wants ASN.1. Re-encode the
	// SignatureValue in place: it is outside SignedInfo and removed by the
	// enveloped-signature transform, so the signed bytes are unchanged.
	if err := derSignatureValue(sig); err != nil {
		return nil, "parse", err
	}
	vc := dsig.NewDefaultValidationContext(&dsig.MemoryX509CertificateStore{Roots: []*x509.Certificate{chain[0]}})
	vc.Clock = dsig.NewFakeClockAt(now)
	signed, err := vc.Validate(el)
	if err != nil {
		return nil, "signature", fmt.Errorf("RIM XML signature: %w", err)
	}
	r, err := readRIM(signed)
	if err != nil {
		return nil, "parse", err
	}
	r.Signer, r.NotBefore, r.NotAfter = chain[0], notBefore, notAfter
	return r, "", nil
}

func findAllNS(el *etree.Element, ns, tag string) []*etree.Element {
	var out []*etree.Element
	for _, c := range el.ChildElements() {
		if c.Tag == tag && c.NamespaceURI() == ns {
			out = append(out, c)
		}
		out = append(out, findAllNS(c, ns, tag)...)
	}
	return out
}

var wsRE = regexp.MustCompile(`\s+`)

func keyInfoCerts(sig *etree.Element) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for _, c := range findAllNS(sig, nsDSig, "X509Certificate") {
		der, err := base64.StdEncoding.DecodeString(wsRE.ReplaceAllString(c.Text(), ""))
		if err != nil {
			return nil, fmt.Errorf("RIM KeyInfo certificate: %w", err)
		}
		x, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("RIM KeyInfo certificate: %w", err)
		}
		certs = append(certs, x)
	}
	if len(certs) == 0 || len(certs) > MaxChainCert {
		return nil, fmt.Errorf("RIM KeyInfo has %d certificates, want 1..%d", len(certs), MaxChainCert)
	}
	return certs, nil
}

func derSignatureValue(sig *etree.Element) error {
	vals := findAllNS(sig, nsDSig, "SignatureValue")
	if len(vals) != 1 {
		return fmt.Errorf("RIM signature has %d SignatureValue elements", len(vals))
	}
	raw, err := base64.StdEncoding.DecodeString(wsRE.ReplaceAllString(vals[0].Text(), ""))
	if err != nil {
		return fmt.Errorf("RIM SignatureValue: %w", err)
	}
	if len(raw) != 96 {
		return fmt.Errorf("RIM SignatureValue is %d bytes, want a 96-byte P-384 r ‖ s", len(raw))
	}
	der, err := asn1.Marshal(struct{ R, S *big.Int }{new(big.Int).SetBytes(raw[:48]), new(big.Int).SetBytes(raw[48:])})
	if err != nil {
		return fmt.Errorf("RIM SignatureValue: %w", err)
	}
	vals[0].SetText(base64.StdEncoding.EncodeToString(der))
	return nil
}

// readRIM reads version and golden measurements from the signed element.
func readRIM(el *etree.Element) (*RIM, error) {
	metas := findAllNS(el, nsSWID, "Meta")
	if len(metas) != 1 {
		return nil, fmt.Errorf("RIM has %d Meta elements, want 1", len(metas))
	}
	ver := metas[0].SelectAttrValue("colloquialVersion", "")
	if ver == "" {
		return nil, fmt.Errorf("RIM Meta has no colloquialVersion")
	}
	r := &RIM{Version: strings.ToLower(ver), Product: metas[0].SelectAttrValue("product", ""), Golden: map[int]Golden{}}
	payloads := findAllNS(el, nsSWID, "Payload")
	if len(payloads) != 1 {
		return nil, fmt.Errorf("RIM has %d Payload elements, want 1", len(payloads))
	}
	for _, res := range payloads[0].ChildElements() {
		if res.Tag != "Resource" {
			continue
		}
		idx, err := strconv.Atoi(res.SelectAttrValue("index", ""))
		if err != nil || idx < 0 || idx >= MaxBlocks {
			return nil, fmt.Errorf("RIM resource index %q", res.SelectAttrValue("index", ""))
		}
		if _, dup := r.Golden[idx]; dup {
			return nil, fmt.Errorf("RIM measurement index %d repeated", idx)
		}
		alts, err := strconv.Atoi(res.SelectAttrValue("alternatives", ""))
		if err != nil || alts < 1 || alts > 16 {
			return nil, fmt.Errorf("RIM measurement %d: alternatives %q", idx, res.SelectAttrValue("alternatives", ""))
		}
		size, err := strconv.Atoi(res.SelectAttrValue("size", ""))
		if err != nil || size < 1 || size > 64 {
			return nil, fmt.Errorf("RIM measurement %d: size %q", idx, res.SelectAttrValue("size", ""))
		}
		g := Golden{Index: idx, Active: !strings.EqualFold(res.SelectAttrValue("active", ""), "false"), Size: size}
		for i := 0; i < alts; i++ {
			var v string
			for _, a := range res.Attr {
				if a.Key == "Hash"+strconv.Itoa(i) && a.NamespaceURI() == nsSHA384 {
					v = a.Value
				}
			}
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != size {
				return nil, fmt.Errorf("RIM measurement %d: alternative %d is not %d bytes of hex", idx, i, size)
			}
			g.Alternatives = append(g.Alternatives, b)
		}
		r.Golden[idx] = g
	}
	if len(r.Golden) == 0 {
		return nil, fmt.Errorf("RIM has no measurements")
	}
	return r, nil
}
