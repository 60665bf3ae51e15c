//go:build !production

package attest_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/attest/nitro"
	"github.com/tenzro/train/attest/simroots"
	"github.com/tenzro/train/attest/snp"
	"github.com/tenzro/train/enclave"
	"github.com/tenzro/train/wire"
)

// simAt is the pinned time simulated evidence is made and checked at.
var simAt = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func simEvidence(t *testing.T, vendor string, opts enclave.SimulatedOptions, at time.Time) []byte {
	t.Helper()
	p, err := enclave.NewSimulatedWith(vendor, t.TempDir(), func() time.Time { return at }, opts)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := p.Evidence(context.Background(), wire.SHA256([]byte("binding")))
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// simPolicy accepts simulated evidence of every vendor (allowSim) or is a
// production policy (no allow_simulated).
func simPolicy(t *testing.T, allowSim bool) *attest.Policy {
	m := hex.EncodeToString(enclave.SimulatedMeasurement)
	smt := true
	b, _ := json.Marshal(map[string]any{"version": 1, "allow_simulated": allowSim,
		"tdx":   map[string]any{"mrtd": []string{m}, "tcb_status": []string{"UpToDate"}},
		"snp":   map[string]any{"measurement": []string{m}, "smt_allowed": smt},
		"nitro": map[string]any{"pcr0": []string{m}, "max_age": "5m"}})
	p, err := attest.ParsePolicy(b, "Verified")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func raw(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withEvidence returns the envelope with its evidence replaced by f(evidence).
func withEvidence(t *testing.T, envelope []byte, f func([]byte) []byte) []byte {
	t.Helper()
	e, err := attest.ParseEnvelope(envelope)
	if err != nil {
		t.Fatal(err)
	}
	e.Evidence = f(append([]byte(nil), e.Evidence...))
	return e.Marshal()
}

func flip(off int) func([]byte) []byte {
	return func(b []byte) []byte {
		if off < 0 {
			off += len(b)
		}
		b[off] ^= 0x01
		return b
	}
}

func pin(y, m, d int) time.Time { return time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC) }

func envFiles(t *testing.T, vendor, file string, certs ...string) []byte {
	e := &attest.Envelope{Vendor: vendor, Evidence: raw(t, "testdata/"+vendor+"/"+file)}
	for _, c := range certs {
		e.Certs = append(e.Certs, raw(t, "testdata/"+vendor+"/"+c))
	}
	return e.Marshal()
}

func envelope(vendor string, evidence []byte) []byte {
	return (&attest.Envelope{Vendor: vendor, Evidence: evidence}).Marshal()
}

func nitroIssued(t *testing.T, doc []byte) time.Time {
	ev, err := nitro.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	return ev.IssuedAt
}

// flipInModuleID flips a bit of the module_id text inside the signed
// payload (the CBOR stays well formed).
func flipInModuleID(t *testing.T, doc []byte) func([]byte) []byte {
	ev, err := nitro.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(doc, []byte(ev.Doc.ModuleID))
	if i < 0 {
		t.Fatal("module_id not found")
	}
	return flip(i + 2)
}

func TestSimulatedTDXThroughLibrary(t *testing.T) {
	c := attest.NewChecker(attest.Options{})
	res, err := c.Verify(context.Background(), simEvidence(t, "tdx", enclave.SimulatedOptions{}, simAt), simPolicy(t, true), simAt, nil)
	if err != nil {
		t.Fatalf("simulated TDX refused: %v", err)
	}
	if !res.Simulated || res.TCBStatus != "UpToDate" {
		t.Fatalf("simulated=%v tcb=%q", res.Simulated, res.TCBStatus)
	}
	ran := map[string]bool{}
	for _, ch := range res.Checks {
		ran[ch.Name] = ch.OK
	}
	for _, name := range []string{"tdx.parse", "tdx.signature", "tdx.chain", "tdx.collateral", "tdx.revocation", "tdx.tcb_status", "tdx.debug", "tdx.attributes", "tdx.mrtd"} {
		if !ran[name] {
			t.Errorf("check %s did not run or failed: %+v", name, res.Checks)
		}
	}
}

func TestNegativeNamedChecks(t *testing.T) {
	tdxEnv := envelope("tdx", raw(t, "testdata/tdx/phala_tdx_quote"))
	nitroDoc := raw(t, "testdata/nitro/blocky_nitro_attestation.cbor")
	nitroEnv := envelope("nitro", nitroDoc)
	nitroTS := nitroIssued(t, nitroDoc)
	selfSigned := raw(t, "testdata/nitro/blocky_selfsigned_attestation.cbor")
	simTDX := simEvidence(t, "tdx", enclave.SimulatedOptions{}, simAt)
	simNitro := simEvidence(t, "nitro", enclave.SimulatedOptions{}, simAt)
	simNitroDoc, _ := attest.ParseEnvelope(simNitro)
	allow, prod := simPolicy(t, true), simPolicy(t, false)
	smt := true
	snpOnly := &attest.Policy{Version: 1, SNP: &snp.Policy{SMTAllowed: &smt, AllowProvisionalFirmware: true}}

	for _, tc := range []struct {
		name     string
		envelope []byte
		policy   *attest.Policy
		at       time.Time
		want     string
	}{
		// Tampered signed body and signature.
		{"tdx real: tampered MRTD in the body", withEvidence(t, tdxEnv, flip(0x30+0x88)), nil, pin(2025, 7, 1), "tdx.signature"},
		{"tdx real: tampered REPORTDATA", withEvidence(t, tdxEnv, flip(0x30+0x208)), nil, pin(2025, 7, 1), "tdx.signature"},
		{"tdx real: tampered quote signature", withEvidence(t, tdxEnv, flip(0x27c+5)), nil, pin(2025, 7, 1), "tdx.signature"},
		{"tdx real: tampered QE report", withEvidence(t, tdxEnv, flip(0x27c+128+6+0x140)), nil, pin(2025, 7, 1), "tdx.signature"},
		{"tdx sim: tampered body", withEvidence(t, simTDX, flip(0x30+0x10)), allow, simAt, "tdx.signature"},
		{"tdx sim: tampered signature", withEvidence(t, simTDX, flip(0x27c+40)), allow, simAt, "tdx.signature"},
		{"nitro real: tampered payload", withEvidence(t, nitroEnv, flipInModuleID(t, nitroDoc)), nil, nitroTS, "nitro.signature"},
		{"nitro real: tampered signature", withEvidence(t, nitroEnv, flip(-5)), nil, nitroTS, "nitro.signature"},
		{"nitro sim: tampered payload", withEvidence(t, simNitro, flipInModuleID(t, simNitroDoc.Evidence)), allow, simAt, "nitro.signature"},
		{"nitro sim: tampered signature", withEvidence(t, simNitro, flip(-5)), allow, simAt, "nitro.signature"},
		// Debug enclaves.
		{"tdx sim: debug TD", simEvidence(t, "tdx", enclave.SimulatedOptions{Debug: true}, simAt), allow, simAt, "tdx.debug"},
		{"tdx sim: debug TD, no policy", simEvidence(t, "tdx", enclave.SimulatedOptions{Debug: true}, simAt), &attest.Policy{Version: 1, AllowSimulated: true, TDX: allow.TDX}, simAt, "tdx.debug"},
		{"snp sim: debug guest policy", simEvidence(t, "snp", enclave.SimulatedOptions{Debug: true}, simAt), allow, simAt, "snp.guest_policy.debug"},
		{"nitro sim: debug enclave (PCR0 zero)", simEvidence(t, "nitro", enclave.SimulatedOptions{Debug: true}, simAt), allow, simAt, "nitro.debug"},
		// Self-signed Nitro document, at its own time and today.
		{"nitro: self-signed document", envelope("nitro", selfSigned), nil, nitroIssued(t, selfSigned), "nitro.chain"},
		{"nitro: self-signed document today", envelope("nitro", selfSigned), nil, pin(2026, 6, 1), "nitro.chain"},
		// Simulated evidence under a production policy (and with no policy).
		{"tdx sim: production policy", simTDX, prod, simAt, "tdx.simulated"},
		{"snp sim: production policy", simEvidence(t, "snp", enclave.SimulatedOptions{}, simAt), prod, simAt, "snp.simulated"},
		{"nitro sim: production policy", simNitro, prod, simAt, "nitro.simulated"},
		{"tdx sim: authenticity only", simTDX, nil, simAt, "tdx.simulated"},
		{"snp sim: authenticity only", simEvidence(t, "snp", enclave.SimulatedOptions{}, simAt), nil, simAt, "snp.simulated"},
		{"nitro sim: authenticity only", simNitro, nil, simAt, "nitro.simulated"},
		// Expired certificates at pinned dates.
		{"tdx sim: PCK certificate expired (7 years on)", simTDX, allow, simAt.AddDate(8, 0, 0), "tdx.chain.validity"},
		{"snp real: VLEK expired", envFiles(t, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der"), snpOnly, pin(2026, 6, 1), "snp.chain.validity"},
		{"snp real: VCEK expired", envFiles(t, "snp", "trustee_test-report.bin", "trustee_test-vcek.der"), snpOnly, pin(2033, 1, 1), "snp.chain.validity"},
		{"nitro real: leaf expired 4h after issue", nitroEnv, nil, nitroTS.Add(4 * time.Hour), "nitro.chain.validity"},
		{"nitro sim: leaf expired 4h after issue", simNitro, allow, simAt.Add(4 * time.Hour), "nitro.chain.validity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := attest.NewChecker(attest.Options{CollateralDir: "testdata/tdx/collateral"})
			res, err := c.Verify(context.Background(), tc.envelope, tc.policy, tc.at, nil)
			if got := attest.FailedCheck(err); got != tc.want {
				t.Fatalf("failed check %q, want %q (err: %v)", got, tc.want, err)
			}
			if res == nil || res.Accepted || res.FailedAt != tc.want || len(res.Checks) == 0 || res.Checks[len(res.Checks)-1].OK {
				t.Fatalf("result does not name the failure: %+v", res)
			}
		})
	}
}

// TestSNPProductRoots: simulated reports of each product line chain to
// their own line's simulated roots and to no other line's.
func TestSNPProductRoots(t *testing.T) {
	ctx := context.Background()
	lines := []string{"Milan", "Genoa", "Turin"}
	for _, line := range lines {
		e, err := attest.ParseEnvelope(simEvidence(t, "snp", enclave.SimulatedOptions{SNPProductLine: line}, simAt))
		if err != nil {
			t.Fatal(err)
		}
		ev, err := snp.Parse(e.Evidence, e.CertTable, e.Certs)
		if err != nil {
			t.Fatal(err)
		}
		for _, rootsOf := range lines {
			roots, err := simroots.SNPRootsFor(rootsOf)
			if err != nil {
				t.Fatal(err)
			}
			err = snp.VerifyChain(ctx, ev, roots, simAt)
			if (err == nil) != (line == rootsOf) {
				t.Errorf("%s report against %s roots: %v", line, rootsOf, err)
			}
		}
		// Every line's roots together: only its own matter.
		all, _ := simroots.SNPRoots()
		delete(all, line)
		if err := snp.VerifyChain(ctx, ev, all, simAt); err == nil {
			t.Errorf("%s report verified without %s roots", line, line)
		}
		// Never against AMD's real roots.
		real, err := snp.DefaultRoots()
		if err != nil {
			t.Fatal(err)
		}
		if err := snp.VerifyChain(ctx, ev, real, simAt); err == nil {
			t.Errorf("%s simulated report verified against AMD's roots", line)
		}
		// End to end: accepted under allow_simulated, product named.
		res, err := attest.NewChecker(attest.Options{}).Verify(ctx, e.Marshal(), simPolicy(t, true), simAt, nil)
		if err != nil || !res.Simulated || res.Product != line {
			t.Errorf("%s end to end: simulated=%v product=%q err=%v", line, res.Simulated, res.Product, err)
		}
	}
}
