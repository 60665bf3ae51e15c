//go:build linux

package enclave

import (
	"context"
	"fmt"

	"github.com/google/go-sev-guest/client"
)

// snpDeviceSealingKey opens the SEV guest device at path and derives the
// sealing key for vmpl (at least the VMPL the guest runs at).
func snpDeviceSealingKey(ctx context.Context, path string, vmpl uint32, label string) ([]byte, error) {
	dev := &client.LinuxDevice{}
	if err := dev.Open(path); err != nil {
		return nil, fmt.Errorf("sealing key: %w", err)
	}
	defer dev.Close()
	return SNPSealingKey(ctx, dev, vmpl, label)
}
