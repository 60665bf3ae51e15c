//go:build !production

package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/tenzro/train/enclave"
)

// simulatedCPU makes a labelled simulated CPU enclave (absent from
// production builds).
func simulatedCPU(mode, dir string) (enclave.Provider, error) {
	vendor, ok := strings.CutPrefix(mode, "simulated-")
	if !ok {
		return nil, usagef("--enclave %q: want auto, configfs-tsm, configfs-tsm-snp, sev-guest, nsm, simulated-snp, simulated-tdx or simulated-nitro", mode)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("simulated enclave dir: %w", err)
	}
	p, err := enclave.NewSimulated(vendor, dir, nil)
	if err != nil {
		return nil, usageError{err}
	}
	return p, nil
}

// simulatedGPU makes the labelled simulated GPU provider.
func simulatedGPU() (enclave.GPUProvider, error) { return enclave.NewSimulatedGPU(nil), nil }
