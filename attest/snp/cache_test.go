package snp

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/tenzro/train/attest/verdict"
)

func evidence(t *testing.T, report, cert string) *Evidence {
	t.Helper()
	r, err := os.ReadFile("../testdata/snp/" + report)
	if err != nil {
		t.Fatal(err)
	}
	c, err := os.ReadFile("../testdata/snp/" + cert)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := Parse(r, nil, [][]byte{c})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// The key covers the trusted roots: a VLEK chain cached under the roots
// with the ASVK is not found under roots without it (and is refused there,
// as without a cache); the report signature is checked on every call.
func TestCacheKeyCoversRootsAndSignatureAlwaysRuns(t *testing.T) {
	ev := evidence(t, "trustee_test-vlek-report.bin", "trustee_test-vlek.der")
	at := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	c := NewCache(0)
	verifyWith := func(ev *Evidence, roots bool) string {
		opts := VerifyOptions{Now: at, Cache: c}
		if !roots {
			r, err := Roots(false)
			if err != nil {
				t.Fatal(err)
			}
			opts.Roots = r
		}
		var checks verdict.Checks
		_, err := Verify(context.Background(), ev, opts, &checks)
		return verdict.FailedCheck(err)
	}
	if got := verifyWith(ev, true); got != "" || c.Len() != 1 {
		t.Fatalf("VLEK: %q, %d cached", got, c.Len())
	}
	if got := verifyWith(ev, true); got != "" || c.Stats().Hits != 1 {
		t.Fatalf("VLEK again: %q, %+v", got, c.Stats())
	}
	if got := verifyWith(ev, false); got != "snp.chain" || c.Stats().Hits != 1 {
		t.Fatalf("VLEK under VCEK-only roots: %q, %+v", got, c.Stats())
	}
	bad := evidence(t, "trustee_test-vlek-report.bin", "trustee_test-vlek.der")
	bad.Raw = append([]byte(nil), bad.Raw...)
	bad.Raw[0x2A0+9] ^= 1 // the signature's R
	if got := verifyWith(bad, true); got != "snp.signature" {
		t.Fatalf("tampered signature with the chain cached: %q", got)
	}
}
