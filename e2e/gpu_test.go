//go:build !production

package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/enclave"
	"github.com/tenzro/train/wire"
)

// gpuClaim is trainer i's composite evidence (simulated CPU + simulated
// GPU) for its current binding; other, when set, takes the GPU part from
// evidence bound to another binding (another CPU quote).
func (r *tierRun) gpuClaim(task string, i int, gpu bool, other bool) json.RawMessage {
	n, err := r.node.AttestNonce(r.ctx, wire.NonceParams{TaskID: task, DID: r.tr[i].DID.String()})
	if err != nil {
		r.t.Fatal(err)
	}
	prog := wire.SHA256([]byte(program))
	rd := wire.AttestReportData(prog, n.Shard, n.ModelHash, r.tr[i].DID.String(), n.Nonce)
	var ev []byte
	g := enclave.NewSimulatedGPU(r.clock)
	dp := r.encl[i].(enclave.DataProvider)
	switch {
	case !gpu:
		ev, err = r.encl[i].Evidence(r.ctx, rd)
	case other:
		ev, err = enclave.CompositeEvidence(r.ctx, dp, g, rd)
		if err == nil {
			var elsewhere []byte
			elsewhere, err = enclave.CompositeEvidence(r.ctx, dp, g, wire.SHA256([]byte("another quote")))
			var a, b map[string]json.RawMessage
			_ = json.Unmarshal(ev, &a)
			_ = json.Unmarshal(elsewhere, &b)
			a["gpu"] = b["gpu"]
			ev, _ = json.Marshal(a)
		}
	default:
		ev, err = enclave.CompositeEvidence(r.ctx, dp, g, rd)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	raw, _ := json.Marshal(wire.AttestationClaim{Envelope: ev, Nonce: n.Nonce, ProgramHash: prog})
	return raw
}

// TestVerifiedRunWithGPUEvidence (issue 16): a Verified run whose policy
// asks for nvidia_cc; every trainer sends simulated SEV-SNP + simulated
// NVIDIA CC evidence bound together. Evidence without the GPU report, or
// with the GPU report of another CPU quote, is refused by the right check.
// The receipt's attestation digests name the GPU evidence.
func TestVerifiedRunWithGPUEvidence(t *testing.T) {
	r := newTierRun(t, "snp")
	var pol map[string]any
	_ = json.Unmarshal([]byte(simPolicy(wire.TierVerified, true)), &pol)
	pol["nvidia_cc"] = map[string]any{"cc_mode": "on", "architectures": []string{"HOPPER"}, "min_driver_version": "550.54.14"}
	b, _ := json.Marshal(pol)
	r.policy = string(b)
	const task = "verified-gpu-run"
	r.post(task, wire.TierVerified, true)
	if err := r.enroll(task, 0, r.gpuClaim(task, 0, false, false)); err == nil || !strings.Contains(err.Error(), "nvidia.missing") {
		t.Fatalf("enrolment without GPU evidence: %v", err)
	}
	if err := r.enroll(task, 0, r.gpuClaim(task, 0, true, true)); err == nil || !strings.Contains(err.Error(), "binding.gpu_report") {
		t.Fatalf("enrolment with another quote's GPU evidence: %v", err)
	}
	for i := 0; i < 4; i++ {
		if err := r.enroll(task, i, r.gpuClaim(task, i, true, false)); err != nil {
			t.Fatalf("enrol %d: %v", i, err)
		}
	}
	var gpuDigests []wire.Hash
	for round := uint64(0); round < 2; round++ {
		for f := uint64(0); f < 2; f++ {
			if err := r.submit(task, 0, round, f, r.gpuClaim(task, 0, false, false)); err == nil || !strings.Contains(err.Error(), "nvidia.missing") {
				t.Fatalf("submission without GPU evidence: %v", err)
			}
			if err := r.submit(task, 1, round, f, r.gpuClaim(task, 1, true, true)); err == nil || !strings.Contains(err.Error(), "binding.gpu_report") {
				t.Fatalf("submission with another quote's GPU evidence: %v", err)
			}
			for i := 0; i < 4; i++ {
				c := r.gpuClaim(task, i, true, false)
				if err := r.submit(task, i, round, f, c); err != nil {
					t.Fatalf("round %d fragment %d trainer %d: %v", round, f, i, err)
				}
				var claim wire.AttestationClaim
				_ = json.Unmarshal(c, &claim)
				env, err := attest.ParseEnvelope(claim.Envelope)
				if err != nil || env.GPU == nil {
					t.Fatalf("claim: %v", err)
				}
				gpuDigests = append(gpuDigests, attest.EnvelopeDigest(env))
			}
		}
	}
	rc, err := r.node.GetReceipt(r.ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(rc)
	if audit.VerifyReceipt(raw, nil) != 1 {
		t.Fatal(audit.CheckReceipt(raw, nil))
	}
	list, err := r.node.GetPayload(r.ctx, rc.AttestationsHash) // the list is a blob, by its hash
	if err != nil {
		t.Fatal(err)
	}
	digests, err := audit.CheckAttestations(rc, list)
	if err != nil {
		t.Fatal(err)
	}
	in := map[wire.Hash]bool{}
	for _, d := range digests {
		in[d] = true
	}
	for i, d := range gpuDigests {
		if !in[d] {
			t.Fatalf("receipt lacks the digest of submission %d's GPU evidence", i)
		}
	}
}
