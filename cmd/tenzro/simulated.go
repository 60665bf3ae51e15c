//go:build !production

package main

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/tenzro/train/attest"
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

// simulatedPolicy turns a policy template into one that accepts the
// simulated enclave (development only): allow_simulated on, and the
// simulated evidence's measurements (enclave.SimulatedMeasurement and, for
// TDX, its RTMRs and MRSEAM) in place of the template's zeros.
func simulatedPolicy(p *attest.Policy) error {
	m := hex.EncodeToString(enclave.SimulatedMeasurement)
	p.AllowSimulated = true
	if p.SNP != nil {
		p.SNP.Measurements = []string{m}
	}
	if p.Nitro != nil {
		p.Nitro.PCR0, p.Nitro.PCR1, p.Nitro.PCR2 = []string{m}, []string{m}, []string{m}
	}
	if p.TDX != nil {
		p.TDX.MRTD = []string{m}
		p.TDX.RTMR0 = []string{hex.EncodeToString(enclave.SimulatedRTMR(0))}
		p.TDX.RTMR1 = []string{hex.EncodeToString(enclave.SimulatedRTMR(1))}
		p.TDX.RTMR2 = []string{hex.EncodeToString(enclave.SimulatedRTMR(2))}
		p.TDX.MRSEAM = []string{hex.EncodeToString(enclave.SimulatedMRSEAM())}
	}
	return nil
}
