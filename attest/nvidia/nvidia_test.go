package nvidia

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ocsp"

	"github.com/tenzro/train/attest/verdict"
)

// The sample is NVIDIA's own (nv-local-gpu-verifier 2.7.3, testdata/SOURCES.md).
// Its device chain is valid from 2021 to 9999; the RIMs' signing
// certificates from mid-2023 to June 2025: tests pin a time inside both.
var pinned = time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC)

const sampleNonce = "931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb"

func readTD(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sample(t testing.TB) (*Report, []*x509.Certificate) {
	t.Helper()
	r, err := Parse(readTD(t, "hopperAttestationReport.txt"))
	if err != nil {
		t.Fatal(err)
	}
	chain, err := ParseChain(readTD(t, "hopperCertChain.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return r, chain
}

func TestSampleParses(t *testing.T) {
	r, chain := sample(t)
	if r.DriverVersion != "550.90.07" || r.VBIOSVersion != "96.00.9f.00.01" || len(r.Blocks) != 64 || hex.EncodeToString(r.Nonce[:]) != sampleNonce {
		t.Fatalf("parsed %q %q %d blocks nonce %x", r.DriverVersion, r.VBIOSVersion, len(r.Blocks), r.Nonce)
	}
	if len(chain) != 5 || Architecture(chain[0]) != "HOPPER" {
		t.Fatalf("chain %d certs, arch %s", len(chain), Architecture(chain[0]))
	}
}

// TestSampleVerifies: signature, chain and nonce of NVIDIA's sample. This is
// the verdict NVIDIA's own verifier reaches offline; run once by hand:
//
//	python -m verifier.cc_admin --test_no_gpu --driver_rim Driver_RIM_test_no_gpu.swidtag \
//	    --vbios_rim 1010_0200_882_96005E0001_test_no_gpu.swidtag --verbose
//
// printed (2026-11-25, nv-local-gpu-verifier 2.7.3, no network):
//
//	Driver version fetched : 550.90.07
//	VBIOS version fetched : 96.00.9f.00.01
//	The firmware ID in the device certificate chain is matching with the one in the attestation report.
//	GPU attestation report certificate chain validation successful.
//	OCSP request failed
//
// Ours: chain and FWID hold, and revocation without OCSP collateral is
// "unknown" (refused unless the policy allows it), never a pass.
func TestSampleVerifies(t *testing.T) {
	r, chain := sample(t)
	var checks verdict.Checks
	v, err := Verify(r, chain, VerifyOptions{Now: pinned}, &checks)
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateNonce(r, mustHex(sampleNonce), &checks); err != nil {
		t.Fatal(err)
	}
	claims := ClaimsOf(r, v)
	err = CheckCollateral(r, v, CollateralOptions{Now: pinned}, claims, &checks)
	if verdict.FailedCheck(err) != "nvidia.revocation" || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("no OCSP collateral: got %v", err)
	}
	last := checks.List[len(checks.List)-1]
	if !last.Unknown || last.OK {
		t.Fatalf("revocation must be recorded as unknown, got %+v", last)
	}
	for _, want := range []string{"nvidia.chain", "nvidia.fwid", "nvidia.signature", "nvidia.nonce"} {
		found := false
		for _, c := range checks.List {
			found = found || (c.Name == want && c.OK)
		}
		if !found {
			t.Errorf("check %s did not pass: %+v", want, checks.List)
		}
	}
}

// The sample's driver (550.90.07) and VBIOS (96.00.9f.00.01) differ from the
// versions of the RIMs the wheel ships for --test_no_gpu (545.00,
// 96.00.5e.00.01): the RIMs verify, and the version check refuses; the
// measurements themselves differ too.
func TestSampleAgainstShippedRIMs(t *testing.T) {
	r, chain := sample(t)
	col := &Collateral{DriverRIM: readTD(t, "Driver_RIM_test_no_gpu.swidtag"), VBIOSRIM: readTD(t, "1010_0200_882_96005E0001_test_no_gpu.swidtag")}
	var checks verdict.Checks
	err := CheckCollateral(r, chain, CollateralOptions{Now: pinned, Collateral: col, AllowUnknownRevocation: true}, ClaimsOf(r, chain), &checks)
	if got := verdict.FailedCheck(err); got != "nvidia.rim.driver.version" {
		t.Fatalf("failed check %q (%v)", got, err)
	}
	drv, _, err := VerifyRIM(col.DriverRIM, RIMRoot(), pinned)
	if err != nil {
		t.Fatal(err)
	}
	vb, _, err := VerifyRIM(col.VBIOSRIM, RIMRoot(), pinned)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CompareMeasurements(r, drv, vb); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Fatalf("measurements: %v", err)
	}
}

// A report whose blocks are the real RIMs' golden values matches them: the
// positive path of the comparison against NVIDIA's signed RIMs.
func TestMeasurementsMatchRealRIMs(t *testing.T) {
	drv, _, err := VerifyRIM(readTD(t, "Driver_RIM_test_no_gpu.swidtag"), RIMRoot(), pinned)
	if err != nil {
		t.Fatal(err)
	}
	vb, _, err := VerifyRIM(readTD(t, "1010_0200_882_96005E0001_test_no_gpu.swidtag"), RIMRoot(), pinned)
	if err != nil {
		t.Fatal(err)
	}
	r := reportMatching(t, drv, vb, nil)
	n, err := CompareMeasurements(r, drv, vb)
	if err != nil || n == 0 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	r.Blocks[6].Value = append([]byte{}, r.Blocks[6].Value...)
	r.Blocks[6].Value[0] ^= 1
	if _, err := CompareMeasurements(r, drv, vb); err == nil {
		t.Fatal("changed measurement accepted")
	}
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestTamperRefusedByTheRightCheck(t *testing.T) {
	raw := readTD(t, "hopperAttestationReport.txt")
	chainPEM := readTD(t, "hopperCertChain.txt")
	raw = mustHex(strings.TrimSpace(string(raw)))
	run := func(rep, ch []byte, nonce []byte) string {
		r, err := Parse(rep)
		if err != nil {
			return "parse"
		}
		chain, err := ParseChain(ch)
		if err != nil {
			return "parse"
		}
		var checks verdict.Checks
		if _, err := Verify(r, chain, VerifyOptions{Now: pinned}, &checks); err != nil {
			return verdict.FailedCheck(err)
		}
		if err := ValidateNonce(r, nonce, &checks); err != nil {
			return verdict.FailedCheck(err)
		}
		return ""
	}
	good := mustHex(sampleNonce)
	if got := run(raw, chainPEM, good); got != "" {
		t.Fatalf("untouched sample: %s", got)
	}
	// One byte of the response (a measurement value): signature.
	resp := append([]byte{}, raw...)
	resp[RequestSize+8+10] ^= 0x01
	// One byte of the nonce in the request: signature (the transcript covers it).
	req := append([]byte{}, raw...)
	req[4] ^= 0x01
	// One byte in the signature of an intermediate certificate: chain.
	var blocks [][]byte
	rest := chainPEM
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		blocks = append(blocks, b.Bytes)
	}
	blocks[2] = append([]byte{}, blocks[2]...)
	blocks[2][len(blocks[2])-5] ^= 0x01
	var bad []byte
	for _, b := range blocks {
		bad = append(bad, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b})...)
	}
	wrongNonce := append([]byte{}, good...)
	wrongNonce[31] ^= 0xff
	for _, tc := range []struct {
		name       string
		rep, chain []byte
		nonce      []byte
		want       string
	}{
		{"response byte", resp, chainPEM, good, "nvidia.signature"},
		{"request nonce byte", req, chainPEM, good, "nvidia.signature"},
		{"chain byte", raw, bad, good, "nvidia.chain"},
		{"wrong nonce", raw, chainPEM, wrongNonce, "nvidia.nonce"},
	} {
		if got := run(tc.rep, tc.chain, tc.nonce); got != tc.want {
			t.Errorf("%s: failed check %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRIMTamperAndExpiry(t *testing.T) {
	doc := string(readTD(t, "Driver_RIM_test_no_gpu.swidtag"))
	if _, _, err := VerifyRIM([]byte(doc), RIMRoot(), pinned); err != nil {
		t.Fatal(err)
	}
	// One byte in the signed XML: an active golden value.
	i := strings.Index(doc, `index="7" active="True"`)
	j := i + strings.Index(doc[i:], `Hash0="`) + len(`Hash0="`)
	c := byte('0')
	if doc[j] == '0' {
		c = '1'
	}
	tampered := doc[:j] + string(c) + doc[j+1:]
	if _, step, err := VerifyRIM([]byte(tampered), RIMRoot(), pinned); step != "signature" {
		t.Fatalf("tampered RIM: step %q err %v", step, err)
	}
	// The version attribute (inside the signed Meta).
	tampered = strings.Replace(doc, `colloquialVersion="545.00"`, `colloquialVersion="550.00"`, 1)
	if _, step, err := VerifyRIM([]byte(tampered), RIMRoot(), pinned); step != "signature" {
		t.Fatalf("tampered version: step %q err %v", step, err)
	}
	// Not signed by the RIM root: the device root cannot stand in.
	if _, step, _ := VerifyRIM([]byte(doc), DeviceRoot(), pinned); step != "chain" {
		t.Fatalf("wrong root: step %q", step)
	}
	// Expired collateral: the RIM's signing certificate ended June 2025.
	r, chain := sample(t)
	var checks verdict.Checks
	late := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	err := CheckCollateral(r, chain, CollateralOptions{Now: late, Collateral: &Collateral{DriverRIM: []byte(doc)}, AllowUnknownRevocation: true}, ClaimsOf(r, chain), &checks)
	if got := verdict.FailedCheck(err); got != "nvidia.rim.driver.expired" {
		t.Fatalf("expired RIM: %q (%v)", got, err)
	}
}

// testGPU is a throwaway P-384 device chain for the revocation tests (the
// real chain's OCSP responses cannot be made without NVIDIA's keys).
type testGPU struct {
	root, leaf       *x509.Certificate
	rootKey, leafKey *ecdsa.PrivateKey
}

func newTestGPU(t testing.TB, fwid []byte) *testGPU {
	t.Helper()
	rk, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	lk, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rt := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test GPU root"}, NotBefore: pinned.Add(-time.Hour), NotAfter: pinned.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	rder, err := x509.CreateCertificate(rand.Reader, rt, rt, &rk.PublicKey, rk)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(rder)
	ext := append(make([]byte, 20), fwid...)
	lt := &x509.Certificate{SerialNumber: big.NewInt(77), Subject: pkix.Name{CommonName: "GH100 A01 GSP FMC LF"}, NotBefore: pinned.Add(-time.Hour), NotAfter: pinned.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtraExtensions: []pkix.Extension{{Id: OIDTCGDiceFWID, Value: ext}}}
	lder, err := x509.CreateCertificate(rand.Reader, lt, root, &lk.PublicKey, rk)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(lder)
	return &testGPU{root: root, leaf: leaf, rootKey: rk, leafKey: lk}
}

func (g *testGPU) ocsp(t testing.TB, status int, this, next time.Time) []byte {
	t.Helper()
	b, err := ocsp.CreateResponse(g.root, g.root, ocsp.Response{Status: status, SerialNumber: g.leaf.SerialNumber, ThisUpdate: this, NextUpdate: next, RevokedAt: this, RevocationReason: ocsp.KeyCompromise}, g.rootKey)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reportMatching builds a report whose blocks are the RIMs' golden values.
func reportMatching(t testing.TB, drv, vb *RIM, key *ecdsa.PrivateKey) *Report {
	t.Helper()
	spec := &ReportSpec{}
	for i := 0; i < 64; i++ {
		v := make([]byte, 48)
		if g, ok := drv.Golden[i]; ok && g.Active {
			v = g.Alternatives[0]
		} else if g, ok := vb.Golden[i]; ok && g.Active {
			v = g.Alternatives[0]
		}
		spec.Blocks = append(spec.Blocks, Block{Index: i + 1, ValueType: 0x01, Value: v})
	}
	vbf, _ := VBIOSField(vb.Version)
	spec.Opaque = []OpaqueField{{Type: OpaqueDriverVersion, Value: append([]byte(drv.Version), 0)}, {Type: OpaqueVBIOSVersion, Value: vbf}}
	if key == nil {
		key, _ = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	}
	raw, err := BuildReport(spec, key)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if r.DriverVersion != drv.Version || r.VBIOSVersion != vb.Version {
		t.Fatalf("round trip versions %q %q", r.DriverVersion, r.VBIOSVersion)
	}
	return r
}

func TestRevocationCollateral(t *testing.T) {
	fwid := make([]byte, 48)
	g := newTestGPU(t, fwid)
	drv, _, _ := VerifyRIM(readTD(t, "Driver_RIM_test_no_gpu.swidtag"), RIMRoot(), pinned)
	vb, _, _ := VerifyRIM(readTD(t, "1010_0200_882_96005E0001_test_no_gpu.swidtag"), RIMRoot(), pinned)
	r := reportMatching(t, drv, vb, g.leafKey)
	roots := Roots{Device: g.root, Label: "the test root"}
	var checks verdict.Checks
	chain, err := Verify(r, []*x509.Certificate{g.leaf, g.root}, VerifyOptions{Now: pinned, Roots: roots}, &checks)
	if err != nil {
		t.Fatal(err)
	}
	rims := [][]byte{readTD(t, "Driver_RIM_test_no_gpu.swidtag"), readTD(t, "1010_0200_882_96005E0001_test_no_gpu.swidtag")}
	serial := SerialHex(g.leaf)
	for _, tc := range []struct {
		name string
		ocsp []byte
		want string // failed check, "" accepted
		rev  string
	}{
		{"good", g.ocsp(t, ocsp.Good, pinned.Add(-time.Hour), pinned.Add(time.Hour)), "", "good"},
		{"revoked", g.ocsp(t, ocsp.Revoked, pinned.Add(-time.Hour), pinned.Add(time.Hour)), "nvidia.revocation", ""},
		{"expired response", g.ocsp(t, ocsp.Good, pinned.Add(-3*time.Hour), pinned.Add(-2*time.Hour)), "nvidia.revocation", ""},
		{"missing", nil, "nvidia.revocation", ""},
	} {
		col := &Collateral{RIMs: rims, OCSP: map[string][]byte{}}
		if tc.ocsp != nil {
			col.OCSP[serial] = tc.ocsp
		}
		var checks verdict.Checks
		claims := ClaimsOf(r, chain)
		err := CheckCollateral(r, chain, CollateralOptions{Now: pinned, Roots: roots, Collateral: col}, claims, &checks)
		if got := verdict.FailedCheck(err); got != tc.want {
			t.Errorf("%s: failed check %q (%v), want %q", tc.name, got, err, tc.want)
			continue
		}
		if err == nil && (claims.RevocationStatus != tc.rev || claims.MeasurementStatus != "matched") {
			t.Errorf("%s: claims %+v", tc.name, claims)
		}
	}
}

func TestPolicy(t *testing.T) {
	r, chain := sample(t)
	claims := ClaimsOf(r, chain)
	claims.MeasurementStatus = "matched"
	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{Policy{CCMode: "on", Architectures: []string{"HOPPER"}, MinDriverVersion: "550.54.14", MinVBIOSVersion: "96.00.5e.00.01"}, ""},
		{Policy{CCMode: "on", Architectures: []string{"BLACKWELL"}}, "nvidia.architecture"},
		{Policy{CCMode: "on", MinDriverVersion: "550.100"}, "nvidia.driver_version"},
		{Policy{CCMode: "on", MinVBIOSVersion: "96.00.a0.00.00"}, "nvidia.vbios_version"},
		{Policy{CCMode: "on", Measurements: map[string][]string{"2": {strings.Repeat("00", 48)}}}, "nvidia.policy.measurements"},
		{Policy{CCMode: "on", Measurements: map[string][]string{"2": {hex.EncodeToString(r.Measurement(2))}}}, ""},
	} {
		if err := tc.p.Check(); err != nil {
			t.Fatal(err)
		}
		var checks verdict.Checks
		if got := verdict.FailedCheck(Validate(r, claims, &tc.p, &checks)); got != tc.want {
			t.Errorf("%+v: %q want %q", tc.p, got, tc.want)
		}
	}
	claims.MeasurementStatus = "unknown"
	var checks verdict.Checks
	if got := verdict.FailedCheck(Validate(r, claims, &Policy{CCMode: "on"}, &checks)); got != "nvidia.cc_mode" {
		t.Errorf("unknown measurements under cc_mode on: %q", got)
	}
	if (&Policy{CCMode: "off"}).Check() == nil {
		t.Error("cc_mode off accepted")
	}
}

func TestParseRefuses(t *testing.T) {
	raw := mustHex(strings.TrimSpace(string(readTD(t, "hopperAttestationReport.txt"))))
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"truncated", raw[:len(raw)-1]},
		{"trailing", append(append([]byte{}, raw...), 0)},
		{"spdm 1.2", append([]byte{0x12}, raw[1:]...)},
		{"too large", make([]byte, MaxReport+1)},
	} {
		if _, err := Parse(tc.b); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func FuzzParse(f *testing.F) {
	raw := mustHex(strings.TrimSpace(string(readTD(f, "hopperAttestationReport.txt"))))
	f.Add(raw)
	f.Add(raw[:200])
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		if len(r.Signature) != SignatureSize || len(r.SignedBytes())+SignatureSize != len(r.Raw) {
			t.Fatalf("inconsistent parse")
		}
	})
}

func FuzzVerifyRIM(f *testing.F) {
	f.Add(readTD(f, "Driver_RIM_test_no_gpu.swidtag"))
	f.Add([]byte("<SoftwareIdentity/>"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = VerifyRIM(b, RIMRoot(), pinned)
	})
}

func BenchmarkVerifySample(b *testing.B) {
	raw := readTD(b, "hopperAttestationReport.txt")
	chainPEM := readTD(b, "hopperCertChain.txt")
	chain, _ := ParseChain(chainPEM)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r, err := Parse(raw)
		if err != nil {
			b.Fatal(err)
		}
		var checks verdict.Checks
		if _, err := Verify(r, chain, VerifyOptions{Now: pinned}, &checks); err != nil {
			b.Fatal(err)
		}
	}
}
