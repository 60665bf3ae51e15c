package enclave

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/tenzro/train/wire"
)

// TSMProvider gets TDX quotes or SEV-SNP reports through the Linux
// configfs-tsm interface (/sys/kernel/config/tsm/report).
type TSMProvider struct {
	vendor string
	dir    string
	// SealVMPL is the VMPL SEV-SNP sealing keys are derived for: the VMPL
	// the guest runs at (0 without an SVSM; MSG_KEY_REQ refuses a VMPL
	// more privileged than the caller's).
	SealVMPL uint32
}

// Vendor implements Provider.
func (p *TSMProvider) Vendor() string { return p.vendor }

// Simulated implements Provider.
func (p *TSMProvider) Simulated() bool { return false }

// Evidence implements Provider: it creates a report entry, writes the
// 64-byte inblob, reads outblob (and auxblob, SNP's certificate table).
func (p *TSMProvider) Evidence(ctx context.Context, rd wire.Hash) ([]byte, error) {
	var in [64]byte
	copy(in[:], rd[:])
	return p.EvidenceData(ctx, in)
}

// EvidenceData implements DataProvider: the whole 64-byte inblob.
func (p *TSMProvider) EvidenceData(ctx context.Context, data [64]byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entry, err := os.MkdirTemp(p.dir, "tenzro-")
	if err != nil {
		return nil, fmt.Errorf("configfs-tsm: %w", err)
	}
	defer os.Remove(entry)
	in := data[:]
	if err := os.WriteFile(filepath.Join(entry, "inblob"), in, 0o600); err != nil {
		return nil, fmt.Errorf("configfs-tsm inblob: %w", err)
	}
	gen0, _ := os.ReadFile(filepath.Join(entry, "generation"))
	out, err := os.ReadFile(filepath.Join(entry, "outblob"))
	if err != nil {
		return nil, fmt.Errorf("configfs-tsm outblob: %w", err)
	}
	gen1, _ := os.ReadFile(filepath.Join(entry, "generation"))
	if g0, _ := strconv.Atoi(string(trim(gen0))); string(gen0) != "" && string(gen1) != "" {
		if g1, _ := strconv.Atoi(string(trim(gen1))); g1 != g0+1 && g1 != g0 {
			return nil, fmt.Errorf("configfs-tsm: report entry changed concurrently")
		}
	}
	env := map[string]any{"vendor": p.vendor, "evidence": out}
	if p.vendor == "snp" {
		if aux, err := os.ReadFile(filepath.Join(entry, "auxblob")); err == nil && len(aux) > 0 {
			env["cert_table"] = aux
		}
	}
	return json.Marshal(env)
}

// SealingKey implements Provider. SEV-SNP: a key the secure processor
// derives from the VM root key, the launch measurement, guest policy, image
// and family IDs (SNPSealingKey, MSG_KEY_REQ on /dev/sev-guest). TDX has no
// local sealing primitive: ErrNoLocalSealing (use the key broker).
func (p *TSMProvider) SealingKey(ctx context.Context, label string) ([]byte, error) {
	if p.vendor != "snp" {
		return nil, fmt.Errorf("%s sealing key: %w", p.vendor, ErrNoLocalSealing)
	}
	return snpDeviceSealingKey(ctx, SEVGuestDev, p.SealVMPL, label)
}

func trim(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// NewTSMProvider returns the configfs-tsm provider for vendor "tdx" or
// "snp" at TSMReportDir.
func NewTSMProvider(vendor string) (*TSMProvider, error) {
	if vendor != "tdx" && vendor != "snp" {
		return nil, fmt.Errorf("configfs-tsm: vendor %q (want tdx or snp)", vendor)
	}
	return &TSMProvider{vendor: vendor, dir: TSMReportDir}, nil
}
