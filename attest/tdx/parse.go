package tdx

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/google/go-tdx-guest/abi"
	"github.com/google/go-tdx-guest/pcs"
	pb "github.com/google/go-tdx-guest/proto/tdx"
	"github.com/google/go-tdx-guest/verify"

	"github.com/tenzro/train/attest/internal/vcache"
)

// MaxQuote bounds a quote.
const MaxQuote = 32 << 10

// body is what QuoteV4 and V5 bodies share.
type body interface {
	GetTeeTcbSvn() []byte
	GetMrSeam() []byte
	GetMrSignerSeam() []byte
	GetTdAttributes() []byte
	GetXfam() []byte
	GetMrTd() []byte
	GetMrConfigId() []byte
	GetMrOwner() []byte
	GetRtmrs() [][]byte
	GetReportData() []byte
}

// Evidence is a parsed, not yet verified, quote.
type Evidence struct {
	Raw   []byte
	Quote any // *pb.QuoteV4 or *pb.QuoteV5
	Body  body
	FMSPC string // from the PCK certificate, lower-case hex
	CA    string // "platform" or "processor"
	// Chain is the PCK chain carried in the quote (not yet verified).
	Chain *verify.PCKCertificateChain
}

// Parse decodes a raw quote and reads the FMSPC of its PCK certificate.
func Parse(raw []byte) (*Evidence, error) {
	return (*Cache)(nil).Parse(raw)
}

// Parse is Parse with the PCK chain parsed through the cache (once per
// chain content).
func (c *Cache) Parse(raw []byte) (*Evidence, error) {
	if len(raw) == 0 || len(raw) > MaxQuote {
		return nil, fmt.Errorf("tdx quote is %d bytes, want 1..%d", len(raw), MaxQuote)
	}
	q, err := abi.QuoteToProto(raw)
	if err != nil {
		return nil, fmt.Errorf("tdx quote: %w", err)
	}
	if err := abi.CheckQuote(q); err != nil {
		return nil, fmt.Errorf("tdx quote: %w", err)
	}
	ev := &Evidence{Raw: append([]byte(nil), raw...), Quote: q}
	switch v := q.(type) {
	case *pb.QuoteV4:
		ev.Body = v.GetTdQuoteBody()
	case *pb.QuoteV5:
		b := v.GetTdQuoteBodyDescriptor().GetTdQuoteBodyV5()
		if b == nil {
			return nil, fmt.Errorf("tdx quote v5: body type %d is not a TD 1.5 report", v.GetTdQuoteBodyDescriptor().GetTdQuoteBodyType())
		}
		ev.Body = b
	default:
		return nil, fmt.Errorf("tdx quote: unsupported type %T", q)
	}
	pc, err := c.parseChain(q)
	if err != nil {
		return nil, err
	}
	ev.Chain, ev.FMSPC, ev.CA = pc.chain, pc.fmspc, pc.ca
	return ev, nil
}

// parsedChain is a quote's PCK chain, parsed (not verified).
type parsedChain struct {
	chain     *verify.PCKCertificateChain
	fmspc, ca string
}

func (c *Cache) parseChain(q any) (*parsedChain, error) {
	var k vcache.Key
	if c != nil {
		sd, ok := q.(interface {
			GetSignedData() *pb.Ecdsa256BitQuoteV4AuthData
		})
		if ok {
			k = vcache.NewKey("tenzro/attest/tdx/pck-chain/v1", sd.GetSignedData().GetCertificationData().GetQeReportCertificationData().GetPckCertificateChainData().GetPckCertChain())
			if pc, hit := c.chains.Get(k, time.Time{}); hit {
				return pc, nil
			}
		} else {
			c = nil
		}
	}
	chain, err := verify.ExtractChainFromQuote(q)
	if err != nil {
		return nil, fmt.Errorf("tdx quote PCK chain: %w", err)
	}
	ext, err := pcs.PckCertificateExtensions(chain.PCKCertificate)
	if err != nil {
		return nil, fmt.Errorf("tdx PCK certificate: %w", err)
	}
	pc := &parsedChain{chain: chain, fmspc: ext.FMSPC}
	switch chain.PCKCertificate.Issuer.CommonName {
	case "Intel SGX PCK Platform CA":
		pc.ca = "platform"
	case "Intel SGX PCK Processor CA":
		pc.ca = "processor"
	default:
		return nil, fmt.Errorf("tdx PCK certificate issuer %q unknown", chain.PCKCertificate.Issuer.CommonName)
	}
	if c != nil {
		from, until := vcache.Always()
		c.chains.Put(k, pc, from, until)
	}
	return pc, nil
}

// Claims are what the quote says.
type Claims struct {
	Version      uint32   `json:"version"`
	FMSPC        string   `json:"fmspc"`
	MRTD         string   `json:"mrtd"`
	RTMRs        []string `json:"rtmrs"`
	MRSEAM       string   `json:"mrseam"`
	MRConfigID   string   `json:"mrconfigid"`
	MROwner      string   `json:"mrowner"`
	TDAttributes string   `json:"td_attributes"`
	Debug        bool     `json:"debug"`
	TEETCBSVN    string   `json:"tee_tcb_svn"`
	ReportData   string   `json:"report_data"`
}

// Claims extracts the claims of the quote.
func (e *Evidence) Claims() Claims {
	b := e.Body
	c := Claims{FMSPC: e.FMSPC, MRTD: hex.EncodeToString(b.GetMrTd()), MRSEAM: hex.EncodeToString(b.GetMrSeam()),
		MRConfigID: hex.EncodeToString(b.GetMrConfigId()), MROwner: hex.EncodeToString(b.GetMrOwner()),
		TDAttributes: hex.EncodeToString(b.GetTdAttributes()), TEETCBSVN: hex.EncodeToString(b.GetTeeTcbSvn()),
		ReportData: hex.EncodeToString(b.GetReportData())}
	for _, r := range b.GetRtmrs() {
		c.RTMRs = append(c.RTMRs, hex.EncodeToString(r))
	}
	c.Debug = IsDebug(b.GetTdAttributes())
	if h, ok := e.Quote.(interface{ GetHeader() *pb.Header }); ok {
		c.Version = h.GetHeader().GetVersion()
	}
	return c
}

// IsDebug reports the TD DEBUG attribute (bit 0 of TDATTRIBUTES).
func IsDebug(attrs []byte) bool { return len(attrs) == 0 || attrs[0]&1 != 0 }
