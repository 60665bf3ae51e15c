//go:build production

package main

import (
	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/enclave"
)

// simulatedCPU: a production build has no simulated enclave.
func simulatedCPU(mode, _ string) (enclave.Provider, error) {
	return nil, usagef("--enclave %q: this is a production build; it has no simulated enclave (want auto, configfs-tsm, configfs-tsm-snp, sev-guest or nsm)", mode)
}

// simulatedGPU: a production build has no simulated GPU.
func simulatedGPU() (enclave.GPUProvider, error) {
	return nil, usagef("--gpu simulated: this is a production build; it has no simulated GPU")
}

// simulatedPolicy: a production build accepts no simulated evidence.
func simulatedPolicy(*attest.Policy) error {
	return usagef("--simulated: this is a production build; it never accepts simulated evidence")
}
