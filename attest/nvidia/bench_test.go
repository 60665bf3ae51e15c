package nvidia

import (
	"crypto/rand"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/ocsp"

	"github.com/tenzro/train/attest/verdict"
)

// The cache must not outlive a certificate: a RIM verified while valid is
// refused once its signing certificate expired.
func TestCacheHonoursExpiry(t *testing.T) {
	c := NewCache()
	doc := readTD(t, "Driver_RIM_test_no_gpu.swidtag")
	if _, _, err := c.VerifyRIM(doc, RIMRoot(), pinned); err != nil {
		t.Fatal(err)
	}
	if _, step, err := c.VerifyRIM(doc, RIMRoot(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); step != "chain" || err == nil {
		t.Fatalf("expired RIM served from the cache: %q %v", step, err)
	}
	_, chain := sample(t)
	if _, err := c.VerifyChain(chain, RIMRoot(), pinned); err == nil {
		t.Fatal("chain verified against the wrong root")
	}
}

type benchGPU struct {
	raw   []byte
	chain []*x509.Certificate
	col   *Collateral
	roots Roots
	nonce []byte
}

func newBenchGPU(b *testing.B) *benchGPU {
	g := newTestGPU(b, make([]byte, 48))
	drv, _, _ := VerifyRIM(readTD(b, "Driver_RIM_test_no_gpu.swidtag"), RIMRoot(), pinned)
	vb, _, _ := VerifyRIM(readTD(b, "1010_0200_882_96005E0001_test_no_gpu.swidtag"), RIMRoot(), pinned)
	r := reportMatching(b, drv, vb, g.leafKey)
	return &benchGPU{raw: r.Raw, chain: []*x509.Certificate{g.leaf, g.root}, roots: Roots{Device: g.root},
		nonce: r.Nonce[:],
		col: &Collateral{RIMs: [][]byte{readTD(b, "Driver_RIM_test_no_gpu.swidtag"), readTD(b, "1010_0200_882_96005E0001_test_no_gpu.swidtag")},
			OCSP: map[string][]byte{SerialHex(g.leaf): g.ocsp(b, ocsp.Good, pinned.Add(-time.Hour), pinned.Add(time.Hour))}}}
}

func (g *benchGPU) verify(b *testing.B, cache *Cache) {
	r, err := Parse(g.raw)
	if err != nil {
		b.Fatal(err)
	}
	var checks verdict.Checks
	v, err := Verify(r, g.chain, VerifyOptions{Now: pinned, Roots: g.roots, Cache: cache}, &checks)
	if err != nil {
		b.Fatal(err)
	}
	if err := ValidateNonce(r, g.nonce, &checks); err != nil {
		b.Fatal(err)
	}
	claims := ClaimsOf(r, v)
	if err := CheckCollateral(r, v, CollateralOptions{Now: pinned, Roots: g.roots, Collateral: g.col, Cache: cache}, claims, &checks); err != nil || claims.MeasurementStatus != "matched" {
		b.Fatal(err, claims.MeasurementStatus)
	}
}

// BenchmarkGPUReport: one full GPU-report verification (parse, chain,
// signature, nonce, OCSP, two RIMs, 33 measurements). "cached" keeps
// verified chains and RIMs across reports, as attest.Checker does; the
// baseline is one bare ECDSA P-384 verification in the same run. Run with
// -cpu 1 for per-core figures.
func BenchmarkGPUReport(b *testing.B) {
	g := newBenchGPU(b)
	b.Run("cached", func(b *testing.B) {
		cache := NewCache()
		g.verify(b, cache)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			g.verify(b, cache)
		}
	})
	b.Run("uncached", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			g.verify(b, nil)
		}
	})
	b.Run("baseline-p384-verify", func(b *testing.B) {
		r, _ := Parse(g.raw)
		for i := 0; i < b.N; i++ {
			if VerifySignature(r, g.chain[0]) != nil {
				b.Fatal("bad")
			}
		}
	})
}

// A chain may end with its own rendering of the root (the simulated roots
// are re-signed in every process): the same name and key is the same
// anchor; a different key is not.
func TestTrailingRootCopy(t *testing.T) {
	g := newTestGPU(t, make([]byte, 48))
	again, err := x509.CreateCertificate(rand.Reader, g.root, g.root, &g.rootKey.PublicKey, g.rootKey)
	if err != nil {
		t.Fatal(err)
	}
	copyRoot, _ := x509.ParseCertificate(again)
	if copyRoot.Equal(g.root) {
		t.Fatal("re-signed root has the same bytes")
	}
	if _, err := VerifyChain([]*x509.Certificate{g.leaf, copyRoot}, g.root, pinned); err != nil {
		t.Fatalf("trailing root copy: %v", err)
	}
	other := newTestGPU(t, make([]byte, 48))
	if _, err := VerifyChain([]*x509.Certificate{g.leaf, other.root}, g.root, pinned); err == nil {
		t.Fatal("a chain with an unrelated trailing certificate verified")
	}
}

// A collateral directory (`--collateral DIR`): RIMs at the top, OCSP answers
// under ocsp/<serial hex>.der; the RIMs are picked by the report's versions.
func TestLoadCollateralDir(t *testing.T) {
	g := newTestGPU(t, make([]byte, 48))
	drv, _, _ := VerifyRIM(readTD(t, "Driver_RIM_test_no_gpu.swidtag"), RIMRoot(), pinned)
	vb, _, _ := VerifyRIM(readTD(t, "1010_0200_882_96005E0001_test_no_gpu.swidtag"), RIMRoot(), pinned)
	r := reportMatching(t, drv, vb, g.leafKey)
	dir := t.TempDir()
	for _, n := range []string{"Driver_RIM_test_no_gpu.swidtag", "1010_0200_882_96005E0001_test_no_gpu.swidtag"} {
		if err := os.WriteFile(filepath.Join(dir, n), readTD(t, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "ocsp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ocsp", SerialHex(g.leaf)+".der"), g.ocsp(t, ocsp.Good, pinned.Add(-time.Hour), pinned.Add(time.Hour)), 0o644); err != nil {
		t.Fatal(err)
	}
	col, err := LoadCollateral(dir)
	if err != nil || len(col.RIMs) != 2 || len(col.OCSP) != 1 {
		t.Fatalf("load: %v %d RIMs %d OCSP", err, len(col.RIMs), len(col.OCSP))
	}
	chain := []*x509.Certificate{g.leaf, g.root}
	claims := ClaimsOf(r, chain)
	var checks verdict.Checks
	if err := CheckCollateral(r, chain, CollateralOptions{Now: pinned, Roots: Roots{Device: g.root}, Collateral: col}, claims, &checks); err != nil {
		t.Fatal(err)
	}
	if claims.RevocationStatus != "good" || claims.MeasurementStatus != "matched" || claims.DriverRIM != "545.00" {
		t.Fatalf("claims %+v", claims)
	}
	if err := os.WriteFile(filepath.Join(dir, "ocsp", "not-hex.der"), []byte{1}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCollateral(dir); err == nil {
		t.Fatal("a badly named OCSP file was accepted")
	}
	if col, err := LoadCollateral(filepath.Join(dir, "absent")); err != nil || len(col.RIMs) != 0 {
		t.Fatalf("absent directory: %v", err)
	}
}
