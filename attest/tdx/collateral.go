package tdx

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/go-tdx-guest/pcs"
)

// MaxCollateral bounds one collateral file.
const MaxCollateral = 256 << 10

// Collateral is one FMSPC's cached Intel PCS responses, in the JSON layout
// DCAP tooling uses (QuoteCollateralV3): issuer chains in PEM, CRLs in hex
// DER, TCB info and QE identity as the exact signed JSON text, signatures in
// hex.
type Collateral struct {
	PCKCRLIssuerChain     string `json:"pck_crl_issuer_chain"`
	RootCACRL             string `json:"root_ca_crl"`
	PCKCRL                string `json:"pck_crl"`
	TCBInfoIssuerChain    string `json:"tcb_info_issuer_chain"`
	TCBInfo               string `json:"tcb_info"`
	TCBInfoSignature      string `json:"tcb_info_signature"`
	QEIdentityIssuerChain string `json:"qe_identity_issuer_chain"`
	QEIdentity            string `json:"qe_identity"`
	QEIdentitySignature   string `json:"qe_identity_signature"`

	// memo is the content key of the fields as ParseCollateral found them;
	// it is used only while the fields are still those (contentKey).
	memo *collateralMemo
}

// ParseCollateral decodes and sanity-checks collateral JSON.
func ParseCollateral(b []byte) (*Collateral, error) {
	if len(b) > MaxCollateral {
		return nil, fmt.Errorf("tdx collateral is %d bytes, limit %d", len(b), MaxCollateral)
	}
	var c Collateral
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("tdx collateral: %w", err)
	}
	for name, v := range map[string]string{"tcb_info": c.TCBInfo, "qe_identity": c.QEIdentity, "pck_crl": c.PCKCRL, "root_ca_crl": c.RootCACRL,
		"tcb_info_issuer_chain": c.TCBInfoIssuerChain, "qe_identity_issuer_chain": c.QEIdentityIssuerChain, "pck_crl_issuer_chain": c.PCKCRLIssuerChain} {
		if v == "" {
			return nil, fmt.Errorf("tdx collateral: %s missing", name)
		}
	}
	c.memo = &collateralMemo{fields: c, key: hashCollateral(&c)}
	return &c, nil
}

// FMSPC returns the FMSPC the TCB info is for (lower-case hex).
func (c *Collateral) FMSPC() (string, error) {
	var t struct {
		Fmspc string `json:"fmspc"`
	}
	if err := json.Unmarshal([]byte(c.TCBInfo), &t); err != nil {
		return "", fmt.Errorf("tdx collateral tcb_info: %w", err)
	}
	return strings.ToLower(t.Fmspc), nil
}

var fmspcRE = regexp.MustCompile(`^[0-9a-f]{12}$`)

// ErrNoCollateral is returned when no collateral is cached for an FMSPC.
var ErrNoCollateral = errors.New("no collateral cached")

// CacheDir is a directory of collateral files, one per FMSPC, named
// "<fmspc>.json" (lower-case hex, e.g. b0c06f000000.json).
type CacheDir string

// Load returns the collateral for fmspc, or an error wrapping
// ErrNoCollateral.
func (d CacheDir) Load(fmspc string) (*Collateral, error) {
	return d.load(fmspc, nil)
}

// load is Load, parsing through c (nil: no cache).
func (d CacheDir) load(fmspc string, c *Cache) (*Collateral, error) {
	fmspc = strings.ToLower(fmspc)
	if !fmspcRE.MatchString(fmspc) {
		return nil, fmt.Errorf("tdx collateral: bad FMSPC %q", fmspc)
	}
	if d == "" {
		return nil, fmt.Errorf("tdx collateral for FMSPC %s: %w (no cache directory)", fmspc, ErrNoCollateral)
	}
	p := filepath.Join(string(d), fmspc+".json")
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("tdx collateral for FMSPC %s: %w (%v)", fmspc, ErrNoCollateral, err)
	}
	if fi.Size() > MaxCollateral {
		return nil, fmt.Errorf("tdx collateral %s: %d bytes, limit %d", p, fi.Size(), MaxCollateral)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("tdx collateral: %w", err)
	}
	pc, err := c.parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if got, err := pc.fmspc, pc.fmspcErr; err != nil || got != fmspc {
		return nil, fmt.Errorf("%s: tcb_info is for FMSPC %q, not %s", p, got, fmspc)
	}
	return pc.c, nil
}

// getter serves the collateral to go-tdx-guest in place of the Intel PCS.
// It answers only the four requests the library makes and never touches
// the network.
type getter struct{ c *Collateral }

func (g getter) Get(u string) (map[string][]string, []byte, error) {
	return g.GetContext(context.Background(), u)
}

func (g getter) GetContext(_ context.Context, u string) (map[string][]string, []byte, error) {
	c := g.c
	switch {
	case strings.HasPrefix(u, pcs.TdxBaseURL+"/tcb?fmspc="):
		body := fmt.Sprintf(`{"tcbInfo":%s,"signature":%q}`, c.TCBInfo, c.TCBInfoSignature)
		return map[string][]string{pcs.TcbInfoIssuerChainPhrase: {url.QueryEscape(c.TCBInfoIssuerChain)}}, []byte(body), nil
	case u == pcs.QeIdentityURL():
		body := fmt.Sprintf(`{"enclaveIdentity":%s,"signature":%q}`, c.QEIdentity, c.QEIdentitySignature)
		return map[string][]string{pcs.SgxQeIdentityIssuerChainPhrase: {url.QueryEscape(c.QEIdentityIssuerChain)}}, []byte(body), nil
	case strings.HasPrefix(u, pcs.SgxBaseURL+"/pckcrl?"):
		der, err := hex.DecodeString(c.PCKCRL)
		if err != nil {
			return nil, nil, fmt.Errorf("cached pck_crl: %w", err)
		}
		return map[string][]string{pcs.SgxPckCrlIssuerChainPhrase: {url.QueryEscape(c.PCKCRLIssuerChain)}}, der, nil
	default:
		// The only other request is the root CA CRL, at the distribution
		// point named in the (verified) root certificate.
		der, err := hex.DecodeString(c.RootCACRL)
		if err != nil {
			return nil, nil, fmt.Errorf("cached root_ca_crl: %w", err)
		}
		return nil, der, nil
	}
}
