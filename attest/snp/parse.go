package snp

import (
	"encoding/hex"
	"fmt"

	"github.com/google/go-sev-guest/abi"
	spb "github.com/google/go-sev-guest/proto/sevsnp"
	"github.com/google/uuid"
)

// Size limits on external input.
const (
	MaxCertTable = 64 << 10 // a GHCB certificate table
	MaxCert      = 8 << 10  // one DER certificate
	MaxCerts     = 8        // loose certificates
)

// Evidence is a parsed, not yet verified, SEV-SNP report with the
// certificates that came with it.
type Evidence struct {
	Raw    []byte // the 1184-byte report
	Report *spb.Report
	Chain  *spb.CertificateChain
	Signer abi.ReportSigner
}

// Parse parses a raw report, an optional GHCB certificate table (as returned
// by SNP_GET_EXT_REPORT) and optional loose DER certificates (a VCEK or VLEK
// fetched separately). Loose certificates fill only slots the table left
// empty; their role is decided by their subject common name.
func Parse(report, certTable []byte, certs [][]byte) (*Evidence, error) {
	return (*Cache)(nil).Parse(report, certTable, certs)
}

// Parse is Parse with the loose certificates parsed through the cache.
func (pc *Cache) Parse(report, certTable []byte, certs [][]byte) (*Evidence, error) {
	if len(report) != abi.ReportSize {
		return nil, fmt.Errorf("snp report is %d bytes, want %d", len(report), abi.ReportSize)
	}
	if len(certTable) > MaxCertTable {
		return nil, fmt.Errorf("snp certificate table is %d bytes, limit %d", len(certTable), MaxCertTable)
	}
	if len(certs) > MaxCerts {
		return nil, fmt.Errorf("snp: %d loose certificates, limit %d", len(certs), MaxCerts)
	}
	rep, err := abi.ReportToProto(report)
	if err != nil {
		return nil, fmt.Errorf("snp report: %w", err)
	}
	info, err := abi.ParseSignerInfo(rep.GetSignerInfo())
	if err != nil {
		return nil, fmt.Errorf("snp report signer info: %w", err)
	}
	if info.SigningKey != abi.VcekReportSigner && info.SigningKey != abi.VlekReportSigner {
		return nil, fmt.Errorf("snp report signed by %v, want VCEK or VLEK", info.SigningKey)
	}
	chain := &spb.CertificateChain{Extras: map[string][]byte{}}
	if len(certTable) > 0 {
		var tbl abi.CertTable
		if err := tbl.Unmarshal(certTable); err != nil {
			return nil, fmt.Errorf("snp certificate table: %w", err)
		}
		// Sorted into the proto by hand: abi.CertTable.Proto logs to stdout
		// when a table lacks an endorsement key.
		for _, e := range tbl.Entries {
			if len(e.RawCert) > MaxCert {
				return nil, fmt.Errorf("snp certificate table entry %v is %d bytes, limit %d", e.GUID, len(e.RawCert), MaxCert)
			}
			switch e.GUID {
			case uuid.MustParse(abi.VcekGUID):
				chain.VcekCert = e.RawCert
			case uuid.MustParse(abi.VlekGUID):
				chain.VlekCert = e.RawCert
			case uuid.MustParse(abi.AskGUID):
				chain.AskCert = e.RawCert
			case uuid.MustParse(abi.ArkGUID):
				chain.ArkCert = e.RawCert
			default:
				chain.Extras[e.GUID.String()] = e.RawCert
			}
		}
	}
	for i, der := range certs {
		if len(der) > MaxCert {
			return nil, fmt.Errorf("snp certificate %d is %d bytes, limit %d", i, len(der), MaxCert)
		}
		c, err := pc.parseCert(der)
		if err != nil {
			return nil, fmt.Errorf("snp certificate %d: %w", i, err)
		}
		switch c.Subject.CommonName {
		case "SEV-VCEK":
			if len(chain.VcekCert) == 0 {
				chain.VcekCert = der
			}
		case "SEV-VLEK":
			if len(chain.VlekCert) == 0 {
				chain.VlekCert = der
			}
		}
	}
	return &Evidence{Raw: append([]byte(nil), report...), Report: rep, Chain: chain, Signer: info.SigningKey}, nil
}

// Attestation returns the library's view of the evidence (a fresh value:
// the library may write into it).
func (e *Evidence) Attestation() *spb.Attestation {
	ch := &spb.CertificateChain{
		VcekCert: e.Chain.GetVcekCert(), VlekCert: e.Chain.GetVlekCert(),
		AskCert: e.Chain.GetAskCert(), ArkCert: e.Chain.GetArkCert(), Extras: map[string][]byte{},
	}
	for k, v := range e.Chain.GetExtras() {
		ch.Extras[k] = v
	}
	return &spb.Attestation{Report: e.Report, CertificateChain: ch}
}

// EndorsementKeyDER returns the VCEK or VLEK certificate matching the signer.
func (e *Evidence) EndorsementKeyDER() []byte {
	if e.Signer == abi.VlekReportSigner {
		return e.Chain.GetVlekCert()
	}
	return e.Chain.GetVcekCert()
}

// Claims are what the report says, for printing and policy.
type Claims struct {
	Version        uint32 `json:"version"`
	Signer         string `json:"signer"`
	Measurement    string `json:"measurement"`
	HostData       string `json:"host_data"`
	ReportData     string `json:"report_data"`
	GuestPolicy    string `json:"guest_policy"`
	Debug          bool   `json:"debug"`
	MigrateMA      bool   `json:"migrate_ma"`
	SMT            bool   `json:"smt"`
	VMPL           uint32 `json:"vmpl"`
	GuestSVN       uint32 `json:"guest_svn"`
	CurrentTCB     string `json:"current_tcb"`
	CommittedTCB   string `json:"committed_tcb"`
	ReportedTCB    string `json:"reported_tcb"`
	LaunchTCB      string `json:"launch_tcb"`
	ChipID         string `json:"chip_id"`
	ProvisionalFW  bool   `json:"provisional_firmware"`
	ParsePolicyErr string `json:"policy_error,omitempty"`
}

// Claims extracts the claims of the report.
func (e *Evidence) Claims() Claims {
	r := e.Report
	c := Claims{
		Version:      r.GetVersion(),
		Signer:       e.Signer.String(),
		Measurement:  hex.EncodeToString(r.GetMeasurement()),
		HostData:     hex.EncodeToString(r.GetHostData()),
		ReportData:   hex.EncodeToString(r.GetReportData()),
		GuestPolicy:  fmt.Sprintf("0x%x", r.GetPolicy()),
		VMPL:         r.GetVmpl(),
		GuestSVN:     r.GetGuestSvn(),
		CurrentTCB:   fmt.Sprintf("0x%016x", r.GetCurrentTcb()),
		CommittedTCB: fmt.Sprintf("0x%016x", r.GetCommittedTcb()),
		ReportedTCB:  fmt.Sprintf("0x%016x", r.GetReportedTcb()),
		LaunchTCB:    fmt.Sprintf("0x%016x", r.GetLaunchTcb()),
		ChipID:       hex.EncodeToString(r.GetChipId()),
	}
	c.ProvisionalFW = r.GetCommittedTcb() != r.GetCurrentTcb() || r.GetCommittedBuild() != r.GetCurrentBuild() ||
		r.GetCommittedMajor() != r.GetCurrentMajor() || r.GetCommittedMinor() != r.GetCurrentMinor()
	if p, err := abi.ParseSnpPolicy(r.GetPolicy()); err == nil {
		c.Debug, c.MigrateMA, c.SMT = p.Debug, p.MigrateMA, p.SMT
	} else {
		c.ParsePolicyErr = err.Error()
		c.Debug = true // unparseable policy is treated as the worst case
	}
	return c
}
