package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/attest/simroots"
	"github.com/tenzro/train/enclave"
	"github.com/tenzro/train/wire"
)

const nvTD = "../../attest/nvidia/testdata/"

func runCLI(args ...string) (int, string, string) {
	var o, e strings.Builder
	code := execute(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

// `attest verify --vendor nvidia` on NVIDIA's sample lists every check and
// names the first that failed.
func TestAttestVerifyNvidiaCLI(t *testing.T) {
	base := []string{"attest", "verify", "--vendor", "nvidia", "--evidence", nvTD + "hopperAttestationReport.txt",
		"--cert", nvTD + "hopperCertChain.txt", "--at", "2024-06-01T00:00:00Z", "--format", "json",
		"--driver-rim", nvTD + "Driver_RIM_test_no_gpu.swidtag", "--vbios-rim", nvTD + "1010_0200_882_96005E0001_test_no_gpu.swidtag"}
	for _, tc := range []struct {
		nonce, want string
	}{
		// The shipped RIMs are for other versions than the sample's (SOURCES.md).
		{"931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb", "nvidia.rim.driver.version"},
		{"031d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb", "nvidia.nonce"},
	} {
		code, out, errOut := runCLI(append(base, "--nonce", tc.nonce)...)
		var res attest.Result
		if err := json.Unmarshal([]byte(out), &res); err != nil || code != exitFailed {
			t.Fatalf("code %d err %v out %q stderr %q", code, err, out, errOut)
		}
		if res.FailedAt != tc.want {
			t.Errorf("nonce %s: failed at %q, want %q", tc.nonce[:8], res.FailedAt, tc.want)
		}
		names := map[string]bool{}
		for _, c := range res.Checks {
			names[c.Name] = c.OK || c.Unknown
		}
		for _, n := range []string{"nvidia.parse", "nvidia.chain", "nvidia.fwid", "nvidia.signature"} {
			if !names[n] {
				t.Errorf("check %s missing or failed: %+v", n, res.Checks)
			}
		}
		if tc.want == "nvidia.rim.driver.version" && (!names["nvidia.rim.driver.signature"] || names["nvidia.revocation"] != true) {
			t.Errorf("RIM checks did not run after unknown revocation: %+v", res.Checks)
		}
	}
	if code, _, _ := runCLI("attest", "verify", "--vendor", "nvidia", "--evidence", nvTD+"hopperAttestationReport.txt"); code != exitUsage {
		t.Errorf("missing --cert: exit %d", code)
	}
}

// Issue 11 item 5: a TDX quote with one byte changed names a signature
// check, not collateral; the genuine one without collateral says "TCB status
// unknown" after its signatures held.
func TestAttestVerifyTDXShowsItsWork(t *testing.T) {
	raw, err := os.ReadFile("../../attest/testdata/tdx/phala_tdx_quote")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bad := append([]byte{}, raw...)
	bad[0x30+0x208] ^= 1 // a REPORTDATA byte
	for _, tc := range []struct {
		b          []byte
		want, text string
	}{
		{raw, "tdx.collateral", "TCB status unknown"},
		{bad, "tdx.signature", ""},
	} {
		p := dir + "/q"
		if err := os.WriteFile(p, tc.b, 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, _ := runCLI("attest", "verify", "--vendor", "tdx", "--evidence", p, "--at", "2025-07-01T00:00:00Z")
		if code != exitFailed || !strings.Contains(out, "REFUSED (check "+tc.want+")") || !strings.Contains(out, tc.text) {
			t.Errorf("want %s: exit %d\n%s", tc.want, code, out)
		}
		if tc.want == "tdx.collateral" && (!strings.Contains(out, "[ok  ] tdx.signature") || !strings.Contains(out, "[??  ] tdx.collateral")) {
			t.Errorf("signatures not listed before unknown collateral:\n%s", out)
		}
	}
}

// `attest quote` with the simulated CPU and GPU providers prints composite
// evidence that the checker accepts for the binding, under allow_simulated.
func TestAttestQuoteSimulatedComposite(t *testing.T) {
	if !simroots.Available() {
		t.Skip("a production build has no simulated providers")
	}
	nonce := strings.Repeat("ab", 32)
	prog, model := wire.SHA256([]byte("p")), wire.ContentHash([]byte("m"))
	did := "did:tenzro:machine:test"
	bind := "program=" + prog.String() + ",shard=2,model=" + model.String() + ",did=" + did
	code, out, errOut := runCLI("attest", "quote", "--enclave", "simulated-snp", "--gpu", "simulated", "--nonce", nonce, "--bind", bind, "--format", "claim")
	if code != 0 || !strings.Contains(errOut, "SIMULATED") {
		t.Fatalf("quote: %d %q", code, errOut)
	}
	var claim wire.AttestationClaim
	if err := json.Unmarshal([]byte(out), &claim); err != nil {
		t.Fatal(err)
	}
	n, _ := hex.DecodeString(nonce)
	rd := attest.ReportData(prog, 2, model, did, n)
	pol := `{"version":1,"allow_simulated":true,"snp":{"smt_allowed":true},"nvidia_cc":{"cc_mode":"on"}}`
	if _, err := attest.NewChecker(attest.Options{Clock: time.Now}).CheckEvidence(context.Background(), wire.TierVerified, []byte(pol), claim.Envelope, rd); err != nil {
		t.Fatalf("composite evidence from the CLI refused: %v", err)
	}
	code, out, _ = runCLI("attest", "quote", "--gpu-nonce-only", "--nonce", nonce, "--bind", bind)
	g := attest.GPUNonce(rd)
	if code != 0 || strings.TrimSpace(out) != hex.EncodeToString(g[:]) {
		t.Fatalf("gpu nonce: %d %q", code, out)
	}
	if code, _, _ := runCLI("attest", "quote", "--enclave", "simulated-snp", "--bind", "program=zz"); code != exitUsage {
		t.Fatalf("bad bind: exit %d", code)
	}
}

// `attest policy init --simulated` writes a development policy that accepts
// the simulated enclave's evidence as `attest verify` checks it, for every
// CPU vendor; the plain template (all-zero measurements) refuses the same
// evidence on its measurement.
func TestAttestPolicyInitSimulated(t *testing.T) {
	if !simroots.Available() {
		t.Skip("a production build has no simulated providers")
	}
	dir := t.TempDir()
	for _, vendor := range []string{"snp", "tdx", "nitro"} {
		t.Run(vendor, func(t *testing.T) {
			ev := filepath.Join(dir, vendor+".json")
			code, out, errOut := runCLI("attest", "quote", "--enclave", "simulated-"+vendor, "--bind", strings.Repeat("5a", 32))
			if code != 0 {
				t.Fatalf("quote: %d %q", code, errOut)
			}
			if err := os.WriteFile(ev, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			dev, tmpl := filepath.Join(dir, vendor+"-dev.json"), filepath.Join(dir, vendor+"-tmpl.json")
			code, _, errOut = runCLI("attest", "policy", "init", "--tier", "verified", "--vendor", vendor, "--simulated", "--out", dev)
			if code != 0 || !strings.Contains(errOut, "DEVELOPMENT ONLY") {
				t.Fatalf("policy init --simulated: %d %q", code, errOut)
			}
			b, err := os.ReadFile(dev)
			if err != nil || !strings.Contains(string(b), `"allow_simulated": true`) || !strings.Contains(string(b), hex.EncodeToString(enclave.SimulatedMeasurement)) {
				t.Fatalf("dev policy: %v\n%s", err, b)
			}
			if code, out, errOut = runCLI("attest", "verify", "--evidence", ev, "--policy", dev); code != 0 {
				t.Fatalf("simulated evidence refused under the --simulated policy: %d\n%s\n%s", code, out, errOut)
			}
			if code, _, _ = runCLI("attest", "policy", "init", "--tier", "verified", "--vendor", vendor, "--out", tmpl); code != 0 {
				t.Fatalf("policy init: %d", code)
			}
			if code, out, _ = runCLI("attest", "verify", "--evidence", ev, "--policy", tmpl); code != 1 {
				t.Fatalf("simulated evidence accepted by the plain template: %d\n%s", code, out)
			}
		})
	}
	if code, _, _ := runCLI("attest", "policy", "init", "--tier", "open"); code != exitUsage {
		t.Fatalf("--tier open: exit %d", code)
	}
}
