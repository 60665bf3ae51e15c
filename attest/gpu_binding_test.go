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
	rd := ReportData(wire.SHA256([]byte("program")), 3, wire.SHA256([]byte("model")), "did:tenzro:machine:example", nonce, wire.ContentHash([]byte("payload")))
	b, err := os.ReadFile("nvidia/testdata/hopperAttestationReport.txt")
	if err != nil {
		t.Fatal(err)
	}
	report, _ := hex.DecodeString(strings.TrimSpace(string(b)))
	gn := GPUNonce(rd)
	gh := GPUReportHash(report)
	crd := CompositeReportData(rd, report)
	for _, v := range []struct{ name, got, want string }{
		{"report_data", rd.String(), "c6c5065633e22898add22747474388d8235fe4aa024893640f6fd4310376b37f"},
		{"gpu_nonce", gn.String(), "97af4b0e418fcd09c3f5dc6a8250afc50ce41d9f74d0fb7fb28d2274a0d11d71"},
		{"gpu_report_hash", gh.String(), "a0a1b8879d1000c2a93b6285a19912f3f867c910295c07dabfa7b7e19bee55b1"},
		{"cpu_report_data", hex.EncodeToString(crd[:]), "c6c5065633e22898add22747474388d8235fe4aa024893640f6fd4310376b37fa0a1b8879d1000c2a93b6285a19912f3f867c910295c07dabfa7b7e19bee55b1"},
	} {
		if v.got != v.want {
			t.Errorf("%s = %s, want %s", v.name, v.got, v.want)
		}
	}
}
