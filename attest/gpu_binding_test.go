package attest

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// The vectors of docs/protocol/attestation-gpu.md: change them only with
// the document.
func TestGPUBindingVectors(t *testing.T) {
	nonce := make([]byte, 32)
	for i := range nonce {
		nonce[i] = byte(i)
	}
	rd := ReportData(wire.SHA256([]byte("program")), 3, wire.SHA256([]byte("model")), "did:tenzro:machine:example", nonce)
	b, err := os.ReadFile("nvidia/testdata/hopperAttestationReport.txt")
	if err != nil {
		t.Fatal(err)
	}
	report, _ := hex.DecodeString(strings.TrimSpace(string(b)))
	gn := GPUNonce(rd)
	gh := GPUReportHash(report)
	crd := CompositeReportData(rd, report)
	for _, v := range []struct{ name, got, want string }{
		{"report_data", rd.String(), "df06e78083c21072dede74d926ade7b10b09ba8267fa0f13f2bfe9ef6ce14bc5"},
		{"gpu_nonce", gn.String(), "ddfb44e7331e0ade38fadf5b3d002f14fa3324cd0821d521626a5918bc0d52d3"},
		{"gpu_report_hash", gh.String(), "a0a1b8879d1000c2a93b6285a19912f3f867c910295c07dabfa7b7e19bee55b1"},
		{"cpu_report_data", hex.EncodeToString(crd[:]), "df06e78083c21072dede74d926ade7b10b09ba8267fa0f13f2bfe9ef6ce14bc5a0a1b8879d1000c2a93b6285a19912f3f867c910295c07dabfa7b7e19bee55b1"},
	} {
		if v.got != v.want {
			t.Errorf("%s = %s, want %s", v.name, v.got, v.want)
		}
	}
}
