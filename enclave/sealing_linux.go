//go:build linux

package enclave

import (
	"context"
	"fmt"

	"github.com/google/go-sev-guest/client"
)

// openSEVGuest opens the SEV guest device at path.
func openSEVGuest(path string) (client.Device, error) {
	dev := &client.LinuxDevice{}
	if err := dev.Open(path); err != nil {
		return nil, err
	}
	return dev, nil
}

// snpDeviceSealingKey opens the SEV guest device at path and derives the
// sealing key for vmpl (at least the VMPL the guest runs at).
func snpDeviceSealingKey(ctx context.Context, path string, vmpl uint32, label string) ([]byte, error) {
	dev, err := openSEVGuest(path)
	if err != nil {
		return nil, fmt.Errorf("sealing key: %w", err)
	}
	defer dev.Close()
	return SNPSealingKey(ctx, dev, vmpl, label)
}
