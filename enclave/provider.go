package enclave

import (
	"context"
	"errors"
	"os"

	"github.com/tenzro/train/wire"
)

// Provider produces attestation evidence from the TEE it runs in.
type Provider interface {
	// Vendor is "tdx", "snp" or "nitro".
	Vendor() string
	// Simulated reports a provider without a real TEE.
	Simulated() bool
	// Evidence returns an attest.Envelope (JSON) whose report data binds
	// reportData (first 32 bytes of REPORTDATA; Nitro user_data and nonce).
	Evidence(ctx context.Context, reportData wire.Hash) ([]byte, error)
	// SealingKey derives a 32-byte key bound to this TEE and label.
	SealingKey(ctx context.Context, label string) ([]byte, error)
}

// DataProvider is a Provider whose evidence can carry all 64 bytes of
// REPORTDATA (TDX and SEV-SNP; not Nitro): composite CPU + GPU evidence
// puts the GPU report's hash in the second half (attest.CompositeReportData).
type DataProvider interface {
	Provider
	EvidenceData(ctx context.Context, reportData [64]byte) ([]byte, error)
}

// Device paths probed by Detect.
var (
	TSMReportDir = "/sys/kernel/config/tsm/report"
	TDXGuestDev  = "/dev/tdx_guest"
	SEVGuestDev  = "/dev/sev-guest"
	NSMDev       = "/dev/nsm"
)

// ErrNoTEE is returned by Detect on a machine without a supported TEE.
var ErrNoTEE = errors.New("no TEE found (no /dev/nsm, /dev/tdx_guest, /dev/sev-guest or configfs-tsm)")

// Detect chooses the provider of the TEE this process runs in: Nitro
// (/dev/nsm), then TDX (configfs-tsm), then SEV-SNP: through configfs-tsm
// when the kernel has it (TSMReportDir exists), else through the
// /dev/sev-guest ioctls (SEVGuestProvider).
func Detect(ctx context.Context) (Provider, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if exists(NSMDev) {
		return &NitroProvider{}, nil
	}
	if exists(TDXGuestDev) {
		return &TSMProvider{vendor: "tdx", dir: TSMReportDir}, nil
	}
	if exists(SEVGuestDev) {
		if exists(TSMReportDir) {
			return &TSMProvider{vendor: "snp", dir: TSMReportDir}, nil
		}
		return &SEVGuestProvider{Path: SEVGuestDev}, nil
	}
	return nil, ErrNoTEE
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }
