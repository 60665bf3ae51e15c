package enclave

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/go-sev-guest/abi"
	"github.com/google/go-sev-guest/client"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/attest/snp"
	"github.com/tenzro/train/wire"
)

// SEVGuestProvider gets SEV-SNP extended reports through the sev-guest
// driver's ioctls on /dev/sev-guest (SNP_GET_EXT_REPORT, through
// go-sev-guest's client), for guests whose kernel has no configfs-tsm.
// Its envelopes are the ones TSMProvider makes: the 1184-byte report and
// the GHCB certificate table the host supplied.
type SEVGuestProvider struct {
	// Path is the device; "" is SEVGuestDev.
	Path string
	// VMPL is the privilege level reports and sealing keys are requested
	// at: the VMPL the guest runs at (0 without an SVSM).
	VMPL uint32

	// open opens the device (tests inject go-sev-guest's fake device);
	// nil opens Path with client.LinuxDevice.
	open func(path string) (client.Device, error)
	// mu keeps one request at a time on the device: the driver's message
	// sequence numbers are per guest, and a throttled request locks the
	// guest out on some kernels.
	mu sync.Mutex
}

// Vendor implements Provider.
func (*SEVGuestProvider) Vendor() string { return attest.VendorSNP }

// Simulated implements Provider.
func (*SEVGuestProvider) Simulated() bool { return false }

func (p *SEVGuestProvider) device() (client.Device, error) {
	path := p.Path
	if path == "" {
		path = SEVGuestDev
	}
	open := p.open
	if open == nil {
		open = openSEVGuest
	}
	d, err := open(path)
	if err != nil {
		return nil, fmt.Errorf("sev-guest %s: %w", path, err)
	}
	return d, nil
}

// Evidence implements Provider: an extended report whose 64-byte
// REPORT_DATA is reportData ‖ 32 zero bytes, with the host's certificate
// table (VCEK or VLEK, ASK, ARK). When the host supplies no table the
// plain report is returned, without certificates: a verifier then needs
// the endorsement key from elsewhere (the envelope's certs) and otherwise
// refuses it.
func (p *SEVGuestProvider) Evidence(ctx context.Context, rd wire.Hash) ([]byte, error) {
	var in [64]byte
	copy(in[:], rd[:])
	return p.EvidenceData(ctx, in)
}

// EvidenceData implements DataProvider: REPORT_DATA is data.
func (p *SEVGuestProvider) EvidenceData(ctx context.Context, in [64]byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	d, err := p.device()
	if err != nil {
		return nil, err
	}
	defer d.Close()
	//lint:ignore SA1019 the Device-level call is the one that takes an injected device; the QuoteProvider replacement always opens the default path.
	report, table, err := client.GetRawExtendedReportAtVmpl(d, in, int(p.VMPL))
	if err != nil || len(report) == 0 {
		// No certificate table from the host (or an extended request the
		// host refuses): the plain report, as go-sev-guest's own ioctl
		// quote provider does.
		plain, perr := client.GetRawReportAtVmpl(d, in, int(p.VMPL))
		if perr != nil {
			return nil, fmt.Errorf("sev-guest report: %w", errors.Join(err, perr))
		}
		report, table = plain, nil
	}
	if len(report) != abi.ReportSize {
		return nil, fmt.Errorf("sev-guest report is %d bytes, want %d", len(report), abi.ReportSize)
	}
	if table = trimCertTable(table); len(table) > snp.MaxCertTable {
		return nil, fmt.Errorf("sev-guest certificate table is %d bytes, limit %d", len(table), snp.MaxCertTable)
	}
	// The device signs what it was asked; a report binding anything else
	// is a driver or firmware fault and must not leave the enclave.
	rep, err := abi.ReportToProto(report)
	if err != nil {
		return nil, fmt.Errorf("sev-guest report: %w", err)
	}
	if !bytes.Equal(rep.GetReportData(), in[:]) {
		return nil, errors.New("sev-guest report: REPORT_DATA differs from the request")
	}
	env := &attest.Envelope{Vendor: attest.VendorSNP, Evidence: report, CertTable: table}
	return env.Marshal(), nil
}

// trimCertTable drops the zero padding after a GHCB certificate table's
// entries: the driver returns the whole page-sized buffer, the table and
// its certificates end earlier. A table that does not parse is returned
// as is, for the verifier to refuse.
func trimCertTable(table []byte) []byte {
	if len(table) == 0 {
		return nil
	}
	hdr, err := abi.ParseSnpCertTableHeader(table)
	if err != nil {
		return table
	}
	// The header ends with an all-zero entry.
	end := (len(hdr) + 1) * abi.CertTableEntrySize
	for _, e := range hdr {
		if n := int(e.Offset) + int(e.Length); n > end {
			end = n
		}
	}
	if end > len(table) {
		return table
	}
	return table[:end]
}

// SealingKey implements Provider: SNPSealingKey on the device at VMPL.
func (p *SEVGuestProvider) SealingKey(ctx context.Context, label string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	d, err := p.device()
	if err != nil {
		return nil, fmt.Errorf("sealing key: %w", err)
	}
	defer d.Close()
	return SNPSealingKey(ctx, d, p.VMPL, label)
}
