package attest

import (
	"context"
	"os"
	"testing"

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

func benchVerify(b *testing.B, envelope []byte, at string, fresh bool) {
	c := NewChecker(Options{CollateralDir: "testdata/tdx/collateral"})
	ts := mustTime(at)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if fresh {
			c = NewChecker(Options{CollateralDir: "testdata/tdx/collateral"})
		}
		if _, err := c.Verify(context.Background(), envelope, nil, ts, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyTDX(b *testing.B) {
	benchVerify(b, env(b, "tdx", "phala_tdx_quote"), "2025-07-01T00:00:00Z", false)
}

func BenchmarkVerifySNP(b *testing.B) {
	benchVerify(b, env(b, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der"), "2025-06-01T00:00:00Z", false)
}

func BenchmarkVerifySNPUncachedRoots(b *testing.B) {
	e := env(b, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der")
	ts := mustTime("2025-06-01T00:00:00Z")
	for i := 0; i < b.N; i++ {
		roots, err := snp.Roots(true)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := NewChecker(Options{SNPRoots: roots}).Verify(context.Background(), e, nil, ts, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyNitro(b *testing.B) {
	raw, _ := os.ReadFile("testdata/nitro/blocky_nitro_attestation.cbor")
	e := &Envelope{Vendor: "nitro", Evidence: raw}
	c := NewChecker(Options{})
	ts := nitroTime(b, raw)
	for i := 0; i < b.N; i++ {
		if _, err := c.Verify(context.Background(), e.Marshal(), nil, ts, nil); err != nil {
			b.Fatal(err)
		}
	}
}
