//go:build !production

package enclave

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/wire"
)

func gpuPolicy(allowSim bool) []byte {
	var p map[string]any
	_ = json.Unmarshal(simPolicy(allowSim), &p)
	p["nvidia_cc"] = map[string]any{"cc_mode": "on", "architectures": []string{"HOPPER"}, "min_driver_version": "550.54.14"}
	b, _ := json.Marshal(p)
	return b
}

// Composite CPU + GPU evidence from the simulated providers: accepted with a
// policy that asks for nvidia_cc; refused by the right check when the GPU
// evidence is missing, bound to another CPU quote, or carries another nonce.
func TestCompositeEvidence(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	gpu := NewSimulatedGPU(clock)
	for _, vendor := range []string{"snp", "tdx"} {
		t.Run(vendor, func(t *testing.T) {
			cpu, err := NewSimulated(vendor, t.TempDir(), clock)
			if err != nil {
				t.Fatal(err)
			}
			check := func(ev []byte, rd wire.Hash, policy []byte) error {
				_, err := attest.NewChecker(attest.Options{Clock: clock}).CheckEvidence(ctx, wire.TierVerified, policy, ev, rd)
				return err
			}
			rd := wire.SHA256([]byte("binding 1 " + vendor))
			ev, err := CompositeEvidence(ctx, cpu, gpu, rd)
			if err != nil {
				t.Fatal(err)
			}
			if err := check(ev, rd, gpuPolicy(true)); err != nil {
				t.Fatalf("composite evidence refused: %v", err)
			}
			if err := check(ev, rd, gpuPolicy(false)); !refusedAs(err, vendor+".simulated") {
				t.Fatalf("without allow_simulated: %v", err)
			}
			// CPU evidence alone under a policy with nvidia_cc.
			cpuOnly, _ := cpu.Evidence(ctx, rd)
			if err := check(cpuOnly, rd, gpuPolicy(true)); !refusedAs(err, "nvidia.missing") {
				t.Fatalf("missing GPU evidence: %v", err)
			}
			// The GPU part of another composite (bound to another CPU quote).
			rd2 := wire.SHA256([]byte("binding 2 " + vendor))
			other, _ := CompositeEvidence(ctx, cpu, gpu, rd2)
			var a, b map[string]json.RawMessage
			_ = json.Unmarshal(ev, &a)
			_ = json.Unmarshal(other, &b)
			a["gpu"] = b["gpu"]
			swapped, _ := json.Marshal(a)
			if err := check(swapped, rd, gpuPolicy(true)); !refusedAs(err, "binding.gpu_report") {
				t.Fatalf("GPU evidence of another quote: %v", err)
			}
			// A GPU report for the right CPU hash but a nonce not derived from rd.
			g, _ := gpu.GPUEvidence(ctx, wire.SHA256([]byte("stale nonce")))
			raw, _ := cpu.EvidenceData(ctx, attest.CompositeReportData(rd, g.Report))
			stale, _ := AttachGPU(raw, g)
			if err := check(stale, rd, gpuPolicy(true)); !refusedAs(err, "nvidia.nonce") {
				t.Fatalf("stale GPU nonce: %v", err)
			}
			// A GPU whose measurements differ from its RIMs.
			bad := NewSimulatedGPU(clock)
			bad.Measurements = map[int][]byte{25: make([]byte, 48)}
			mism, _ := CompositeEvidence(ctx, cpu, bad, rd)
			if err := check(mism, rd, gpuPolicy(true)); !refusedAs(err, "nvidia.measurements") {
				t.Fatalf("mismatching measurements: %v", err)
			}
		})
	}
}

func TestCompositeDigestNamesGPUEvidence(t *testing.T) {
	ctx := context.Background()
	cpu, _ := NewSimulated("snp", t.TempDir(), nil)
	rd := wire.SHA256([]byte("x"))
	ev, err := CompositeEvidence(ctx, cpu, NewSimulatedGPU(nil), rd)
	if err != nil {
		t.Fatal(err)
	}
	env, err := attest.ParseEnvelope(ev)
	if err != nil {
		t.Fatal(err)
	}
	d := attest.EnvelopeDigest(env)
	if d == attest.Digest(env.Vendor, env.Evidence) {
		t.Fatal("composite digest ignores the GPU report")
	}
	env.GPU.Report[100] ^= 1
	if attest.EnvelopeDigest(env) == d {
		t.Fatal("digest does not change with the GPU report")
	}
}
