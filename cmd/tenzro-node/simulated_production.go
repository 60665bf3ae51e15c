//go:build production

package main

import (
	"fmt"

	"github.com/tenzro/train/enclave"
)

// simulatedProvider: a production build has no simulated enclave.
func simulatedProvider(mode, _ string) (enclave.Provider, error) {
	return nil, fmt.Errorf("--enclave %q: this is a production build; it has no simulated enclave (want auto or none)", mode)
}
