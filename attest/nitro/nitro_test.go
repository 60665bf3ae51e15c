package nitro

import (
	"crypto/x509"
	"os"
	"testing"
	"time"

	"github.com/hf/nitrite"

	"github.com/tenzro/train/attest/verdict"
)

const td = "../testdata/nitro/"

var raceEnabled bool

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(td + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nitriteOutcome classifies nitrite.Verify's answer the way Verify names
// it: "" accepted (and chained to the pinned root), or the check.
func nitriteOutcome(raw []byte, now time.Time) string {
	pool := x509.NewCertPool()
	pool.AddCert(awsRoot)
	res, err := nitrite.Verify(raw, nitrite.VerifyOptions{Roots: pool, CurrentTime: now})
	switch {
	case res != nil && !res.SignatureOK:
		return "nitro.signature"
	case res == nil && err != nil:
		return "nitro.parse"
	case err == nil:
		return ""
	}
	for _, c := range res.Certificates {
		if now.After(c.NotAfter) || now.Before(c.NotBefore) {
			return "nitro.chain.validity"
		}
	}
	return "nitro.chain"
}

// Verify no longer calls nitrite.Verify (which built the chain once more
// than needed) but must refuse and accept exactly what it does: real
// documents at several times, and one-byte changes through the document.
func TestVerifyAgreesWithNitrite(t *testing.T) {
	doc := read(t, "blocky_nitro_attestation.cbor")
	ev, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	ts := ev.IssuedAt
	type input struct {
		raw []byte
		at  time.Time
	}
	inputs := []input{{doc, ts}, {doc, ts.Add(4 * time.Hour)}, {doc, ts.Add(-24 * time.Hour)}, {doc, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)},
		{read(t, "blocky_nitro_attestation_debug.cbor"), ts}}
	stride := 11
	if testing.Short() || raceEnabled {
		stride = 53
	}
	for off := 0; off < len(doc); off += stride {
		b := append([]byte(nil), doc...)
		b[off] ^= 0x01
		inputs = append(inputs, input{b, ts})
	}
	compared := map[string]int{}
	for i, in := range inputs {
		ev, err := Parse(in.raw)
		if err != nil {
			continue // refused before verification, as nitro.parse
		}
		var checks verdict.Checks
		_, err = Verify(ev, VerifyOptions{Now: in.at}, &checks)
		got := verdict.FailedCheck(err)
		if got == "nitro.certificate" || (got == "nitro.chain" && len(ev.Bundle) == 0) {
			continue // refused before nitrite would have run
		}
		if want := nitriteOutcome(in.raw, in.at); got != want {
			t.Errorf("input %d: Verify says %q (%v), nitrite %q", i, got, err, want)
		}
		compared[got]++
	}
	t.Logf("%d inputs compared: %v", len(inputs), compared)
	if compared[""] == 0 || compared["nitro.signature"] == 0 || compared["nitro.chain.validity"] == 0 {
		t.Fatalf("comparison does not cover acceptance, signature and validity: %v", compared)
	}
}

// A cached chain is used only inside its certificates' validity, and the
// signature is checked on every call.
func TestCacheWindowAndSignature(t *testing.T) {
	doc := read(t, "blocky_nitro_attestation.cbor")
	ev, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(0)
	verifyAt := func(ev *Evidence, at time.Time) string {
		var checks verdict.Checks
		_, err := Verify(ev, VerifyOptions{Now: at, Cache: c}, &checks)
		return verdict.FailedCheck(err)
	}
	if got := verifyAt(ev, ev.IssuedAt); got != "" || c.Len() != 1 {
		t.Fatalf("first verification: %q, %d cached", got, c.Len())
	}
	if got := verifyAt(ev, ev.IssuedAt.Add(time.Hour)); got != "" || c.Stats().Hits != 1 {
		t.Fatalf("cached verification: %q, %+v", got, c.Stats())
	}
	if got := verifyAt(ev, ev.IssuedAt.Add(4*time.Hour)); got != "nitro.chain.validity" || c.Stats().Expired != 1 {
		t.Fatalf("after the leaf expired: %q, %+v", got, c.Stats())
	}
	bad := append([]byte(nil), doc...)
	bad[len(bad)-5] ^= 1
	evBad, err := Parse(bad)
	if err != nil {
		t.Fatal(err)
	}
	if got := verifyAt(evBad, ev.IssuedAt); got != "nitro.signature" {
		t.Fatalf("tampered signature with the chain cached: %q", got)
	}
}
