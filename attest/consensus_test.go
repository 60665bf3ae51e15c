package attest

import (
	"context"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/wire"
)

// recordedBinding is the first half of the recorded evidence's report data:
// the binding a chain would have to expect for the evidence to bind.
func recordedBinding(t *testing.T, envelope []byte, at time.Time) wire.Hash {
	t.Helper()
	res, err := NewChecker(Options{CacheEntries: -1}).Verify(context.Background(), envelope, nil, at, nil)
	if err != nil {
		t.Fatalf("authenticity of the recorded evidence at %s: %v", at, err)
	}
	rd, err := hex.DecodeString(res.ReportData)
	if err != nil || len(rd) < 32 {
		t.Fatalf("report data %q", res.ReportData)
	}
	var h wire.Hash
	copy(h[:], rd)
	return h
}

// TestConsensusVerifierJudgesRecordedEvidenceAtBlockTime: the verifier
// every validator runs judges recorded TDX and SEV-SNP evidence at the
// time it is given (the block's), not the wall clock, and uses only the
// collateral the envelope carries. Inside the certificates' and
// collateral's validity every authenticity and time check passes (the
// recorded report data's first half is given as the expected binding, its
// second half is not the 32 zero bytes the Verified binding needs, so the
// verdict stops at binding.report_data, which comes after them); at a block time outside it the refusal
// names the validity check. The same TDX quote without collateral in the
// envelope is refused even though the node's collateral directory has it:
// no node-local input enters consensus.
func TestConsensusVerifierJudgesRecordedEvidenceAtBlockTime(t *testing.T) {
	col, err := os.ReadFile("testdata/tdx/phala_tdx_quote_collateral.json")
	if err != nil {
		t.Fatal(err)
	}
	tdxRaw, err := os.ReadFile("testdata/tdx/phala_tdx_quote")
	if err != nil {
		t.Fatal(err)
	}
	tdxWith := (&Envelope{Vendor: VendorTDX, Evidence: tdxRaw, Collateral: col}).Marshal()
	tdxWithout := (&Envelope{Vendor: VendorTDX, Evidence: tdxRaw}).Marshal()
	snpEnv := env(t, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der")
	const tdxPolicy = `{"version":1,"tier":"Verified","tdx":{"tcb_status":["UpToDate"]}}`
	const snpPolicy = `{"version":1,"tier":"Verified","snp":{"smt_allowed":true,"allow_provisional_firmware":true}}`
	v := NewConsensusVerifier()
	tdxRD, snpRD := recordedBinding(t, tdxWith, day(2025, 7, 1)), recordedBinding(t, snpEnv, day(2025, 6, 1))
	for _, tc := range []struct {
		name, policy string
		envelope     []byte
		rd           wire.Hash
		at           time.Time
		// wantPrefix: the check the refusal names.
		wantPrefix string
	}{
		{"tdx inside validity", tdxPolicy, tdxWith, tdxRD, day(2025, 7, 1), "binding.report_data"},
		{"tdx collateral expired at block time", tdxPolicy, tdxWith, tdxRD, day(2026, 6, 1), "tdx.collateral.expired"},
		{"tdx without collateral in the envelope", tdxPolicy, tdxWithout, tdxRD, day(2025, 7, 1), "tdx.collateral"},
		{"snp inside validity", snpPolicy, snpEnv, snpRD, day(2025, 6, 1), "binding.report_data"},
		{"snp certificate expired at block time", snpPolicy, snpEnv, snpRD, day(2026, 6, 1), "snp.chain.validity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.VerifyEvidence(context.Background(), wire.TierVerified, []byte(tc.policy), tc.envelope, tc.at, tc.rd)
			if err == nil {
				t.Fatal("accepted")
			}
			// The refusal is a machine.Error carrying the Refusal's text.
			if !strings.Contains(err.Error(), "check "+tc.wantPrefix+" failed") {
				t.Fatalf("refused with %v, want check %s", err, tc.wantPrefix)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}

// TestAttachCollateral: the recorded TDX quote without collateral is
// refused by the consensus verifier (tdx.collateral); with the collateral
// of its FMSPC attached from a cache directory it passes every authenticity
// and time check (stopping at the binding, as above). An SEV-SNP envelope
// is returned unchanged; a directory without the FMSPC's file is an error.
func TestAttachCollateral(t *testing.T) {
	raw, err := os.ReadFile("testdata/tdx/phala_tdx_quote")
	if err != nil {
		t.Fatal(err)
	}
	bare := (&Envelope{Vendor: VendorTDX, Evidence: raw}).Marshal()
	with, err := AttachCollateral(bare, "testdata/tdx/collateral")
	if err != nil {
		t.Fatal(err)
	}
	rd := recordedBinding(t, with, day(2025, 7, 1))
	const policy = `{"version":1,"tier":"Verified","tdx":{"tcb_status":["UpToDate"]}}`
	v := NewConsensusVerifier()
	if _, err := v.VerifyEvidence(context.Background(), wire.TierVerified, []byte(policy), bare, day(2025, 7, 1), rd); err == nil || !strings.Contains(err.Error(), "check tdx.collateral failed") {
		t.Fatalf("bare quote: %v", err)
	}
	if _, err := v.VerifyEvidence(context.Background(), wire.TierVerified, []byte(policy), with, day(2025, 7, 1), rd); err == nil || !strings.Contains(err.Error(), "check binding.report_data failed") {
		t.Fatalf("quote with collateral attached: %v", err)
	}
	snpEnv := env(t, "snp", "trustee_test-report.bin", "trustee_test-vcek.der")
	if out, err := AttachCollateral(snpEnv, "testdata/tdx/collateral"); err != nil || string(out) != string(snpEnv) {
		t.Fatalf("snp envelope changed: %v", err)
	}
	if _, err := AttachCollateral(bare, t.TempDir()); err == nil || !strings.Contains(err.Error(), "FMSPC") {
		t.Fatalf("missing collateral: %v", err)
	}
}
