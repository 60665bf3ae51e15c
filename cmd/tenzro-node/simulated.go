//go:build !production

package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/tenzro/train/enclave"
)

// simulatedProvider makes a labelled simulated enclave (absent from
// production builds).
func simulatedProvider(mode, dir string) (enclave.Provider, error) {
	vendor, ok := strings.CutPrefix(mode, "simulated-")
	if !ok {
		return nil, fmt.Errorf("--enclave %q: want auto, none, simulated-snp, simulated-tdx or simulated-nitro", mode)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("simulated enclave dir: %w", err)
	}
	return enclave.NewSimulated(vendor, dir, nil)
}
