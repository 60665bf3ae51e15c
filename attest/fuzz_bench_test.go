package attest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	_ "crypto/sha256"
	_ "crypto/sha512"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/tenzro/train/attest/nitro"
	"github.com/tenzro/train/attest/snp"
	"github.com/tenzro/train/attest/tdx"
)

func seed(f *testing.F, p string) {
	if b, err := os.ReadFile(p); err == nil {
		f.Add(b)
	}
}

func FuzzTDXParse(f *testing.F) {
	seed(f, "testdata/tdx/phala_tdx_quote")
	seed(f, "testdata/tdx/phala_tdx_quote_outdated")
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = tdx.Parse(b) })
}

func FuzzSNPParse(f *testing.F) {
	seed(f, "testdata/snp/trustee_test-report.bin")
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = snp.Parse(b, b, nil) })
}

func FuzzNitroParse(f *testing.F) {
	seed(f, "testdata/nitro/blocky_nitro_attestation.cbor")
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = nitro.Parse(b) })
}

func FuzzEnvelopeAndPolicy(f *testing.F) {
	f.Add([]byte(`{"vendor":"snp","evidence":"AAAA"}`))
	f.Add([]byte(`{"version":1,"snp":{"smt_allowed":true}}`))
	f.Add([]byte(`{"vendor":"snp","evidence":"AAAA","gpu":{"vendor":"nvidia","report":"AAAA","certs":["AAAA"]}}`))
	f.Add([]byte(`{"version":1,"nvidia_cc":{"cc_mode":"on","min_vbios_version":"96.00.9f.00.01","measurements":{"2":["00"]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseEnvelope(b)
		_, _ = ParsePolicy(b, "Verified")
		_, _ = tdx.ParseCollateral(b)
	})
}

// The verification benchmarks run on one goroutine (go test -cpu 1 gives
// verifications per core per second) and report, beside ns/op, the ratio
// to one ECDSA P-384 verification measured in the same process
// (BenchmarkP384Verify; bench/results/attestation.md).
//
// cached: the steady state of a node that has seen the machine before —
// the chain (and TDX collateral) verified at the first call, every check
// particular to the evidence run on each. uncached: CacheEntries -1,
// everything verified on every call.

func benchVerify(b *testing.B, envelope []byte, p *Policy, at time.Time) {
	for _, mode := range []struct {
		name    string
		entries int
	}{{"cached", 0}, {"uncached", -1}} {
		b.Run(mode.name, func(b *testing.B) {
			c := NewChecker(Options{CollateralDir: "testdata/tdx/collateral", CacheEntries: mode.entries})
			ctx := context.Background()
			if _, err := c.Verify(ctx, envelope, p, at, nil); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Verify(ctx, envelope, p, at, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyTDX: Phala's TDX quote v4 with its collateral from the
// cache directory (authenticity: signatures, PCK chain, collateral, CRLs,
// TCB status, debug).
func BenchmarkVerifyTDX(b *testing.B) {
	benchVerify(b, env(b, "tdx", "phala_tdx_quote"), nil, mustTime("2025-07-01T00:00:00Z"))
}

// BenchmarkVerifySNP: trustee's VLEK-signed SEV-SNP report (authenticity:
// report signature, VLEK → ASVK → ARK chain, debug).
func BenchmarkVerifySNP(b *testing.B) {
	benchVerify(b, env(b, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der"), nil, mustTime("2025-06-01T00:00:00Z"))
}

// BenchmarkVerifyNitro: blocky's AWS Nitro document at its own timestamp
// (authenticity: document checks, COSE signature, chain to the AWS root,
// debug).
func BenchmarkVerifyNitro(b *testing.B) {
	raw, _ := os.ReadFile("testdata/nitro/blocky_nitro_attestation.cbor")
	benchVerify(b, (&Envelope{Vendor: "nitro", Evidence: raw}).Marshal(), nil, nitroTime(b, raw))
}

// BenchmarkVerifyPolicy is the cached verifications with a policy that
// accepts them (SNP: TCB and guest policy through go-sev-guest's validate;
// Nitro: PCR0 and age; TDX: TCB status, debug and measurements).
func BenchmarkVerifyPolicy(b *testing.B) {
	smt := true
	raw, _ := os.ReadFile("testdata/nitro/blocky_nitro_attestation.cbor")
	nitroEv, _ := nitro.Parse(raw)
	for _, tc := range []struct {
		vendor string
		env    []byte
		p      *Policy
		at     time.Time
	}{
		{"tdx", env(b, "tdx", "phala_tdx_quote"), &Policy{Version: 1, TDX: &tdx.Policy{TCBStatus: []string{"UpToDate"}}}, mustTime("2025-07-01T00:00:00Z")},
		{"snp", env(b, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der"), &Policy{Version: 1, SNP: &snp.Policy{SMTAllowed: &smt, AllowProvisionalFirmware: true}}, mustTime("2025-06-01T00:00:00Z")},
		{"nitro", (&Envelope{Vendor: "nitro", Evidence: raw}).Marshal(), &Policy{Version: 1, Nitro: &nitro.Policy{PCR0: []string{hex.EncodeToString(nitroEv.Doc.PCRs[0])}, MaxAge: "10m"}}, nitroEv.IssuedAt},
	} {
		b.Run(tc.vendor, func(b *testing.B) {
			c := NewChecker(Options{CollateralDir: "testdata/tdx/collateral"})
			ctx := context.Background()
			if _, err := c.Verify(ctx, tc.env, tc.p, tc.at, nil); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Verify(ctx, tc.env, tc.p, tc.at, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkP384Verify is the floor of SNP and Nitro: one ECDSA P-384
// verification of a SHA-384 digest (the SNP report signature, the Nitro
// COSE signature).
func BenchmarkP384Verify(b *testing.B) { benchECDSA(b, elliptic.P384(), crypto.SHA384) }

// BenchmarkP256Verify is one ECDSA P-256 verification of a SHA-256 digest
// (TDX: the quote and the QE report signatures).
func BenchmarkP256Verify(b *testing.B) { benchECDSA(b, elliptic.P256(), crypto.SHA256) }

func benchECDSA(b *testing.B, curve elliptic.Curve, h crypto.Hash) {
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	d := h.New()
	d.Write([]byte("tenzro attestation baseline"))
	digest := d.Sum(nil)
	sig, err := ecdsa.SignASN1(rand.Reader, k, digest)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if !ecdsa.VerifyASN1(&k.PublicKey, digest, sig) {
			b.Fatal("signature does not verify")
		}
	}
}
