package enclave

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/attest/nvidia"
	"github.com/tenzro/train/wire"
)

// GPUProvider produces GPU attestation evidence for a nonce. On a CC-mode
// NVIDIA GPU the reference trainer collects it through NVML (Python,
// nvidia-ml-py) and hands it over as files (FileGPU); SimulatedGPU serves
// development machines in non-production builds.
type GPUProvider interface {
	GPUEvidence(ctx context.Context, nonce wire.Hash) (*attest.GPUEvidence, error)
	Simulated() bool
}

// CompositeEvidence is a Verified trainer's evidence on a GPU: the GPU
// report for nonce attest.GPUNonce(rd), then CPU evidence whose REPORTDATA
// is attest.CompositeReportData(rd, report), with the GPU evidence attached
// as the envelope's gpu part.
func CompositeEvidence(ctx context.Context, cpu DataProvider, gpu GPUProvider, rd wire.Hash) ([]byte, error) {
	g, err := gpu.GPUEvidence(ctx, attest.GPUNonce(rd))
	if err != nil {
		return nil, fmt.Errorf("gpu evidence: %w", err)
	}
	raw, err := cpu.EvidenceData(ctx, attest.CompositeReportData(rd, g.Report))
	if err != nil {
		return nil, fmt.Errorf("cpu evidence: %w", err)
	}
	return AttachGPU(raw, g)
}

// AttachGPU adds GPU evidence to a CPU envelope (JSON).
func AttachGPU(envelope []byte, g *attest.GPUEvidence) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(envelope, &m); err != nil {
		return nil, fmt.Errorf("cpu envelope: %w", err)
	}
	b, err := json.Marshal(g)
	if err != nil {
		return nil, err
	}
	m["gpu"] = b
	return json.Marshal(m)
}

// FileGPU is GPU evidence collected elsewhere — by the reference trainer
// through NVML (nvmlDeviceGetConfComputeGpuAttestationReport with the nonce
// `tenzro attest quote --gpu-nonce-only` printed, and
// nvmlDeviceGetConfComputeGpuCertificate) — and handed over as files.
type FileGPU struct {
	Report []byte // binary or hex report
	Chain  []byte // PEM or DER device chain, leaf first
}

// Simulated reports false: the files come from a real GPU (or fail to verify).
func (FileGPU) Simulated() bool { return false }

// GPUEvidence implements GPUProvider: the report must carry nonce.
func (f FileGPU) GPUEvidence(ctx context.Context, nonce wire.Hash) (*attest.GPUEvidence, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := nvidia.Parse(f.Report)
	if err != nil {
		return nil, err
	}
	if r.Nonce != nonce {
		return nil, fmt.Errorf("the GPU report carries nonce %x, this binding needs %x (collect it with the nonce --gpu-nonce-only prints)", r.Nonce[:], nonce[:])
	}
	chain, err := nvidia.ParseChain(f.Chain)
	if err != nil {
		return nil, err
	}
	g := &attest.GPUEvidence{Vendor: attest.VendorNvidia, Report: r.Raw}
	for _, c := range chain {
		g.Certs = append(g.Certs, c.Raw)
	}
	return g, nil
}
