//go:build linux

package attest

import (
	"context"
	"io"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestVerifyWritesNothingToStdout: the CLI's --format json output must stay
// clean, and go-tdx-guest's logger writes to the stdout it captured at init
// (file descriptor 1). File descriptor 1 is redirected to a pipe while every
// real sample is verified, accepted or refused.
func TestVerifyWritesNothingToStdout(t *testing.T) {
	type sample struct {
		envelope []byte
		at       string
	}
	samples := []sample{
		{env(t, "tdx", "phala_tdx_quote"), "2025-07-01T00:00:00Z"},
		{env(t, "tdx", "phala_tdx_quote"), "2026-06-01T00:00:00Z"},
		{env(t, "tdx", "phala_tdx_quote_outdated"), "2026-03-01T00:00:00Z"},
		{env(t, "snp", "trustee_test-report.bin", "trustee_test-vcek.der"), "2025-01-01T00:00:00Z"},
		{env(t, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der"), "2025-06-01T00:00:00Z"},
		{env(t, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der"), "2026-06-01T00:00:00Z"},
		{env(t, "nitro", "blocky_nitro_attestation.cbor"), "2026-06-01T00:00:00Z"},
		{env(t, "nitro", "blocky_nitro_attestation_debug.cbor"), "2026-06-01T00:00:00Z"},
		{env(t, "nitro", "blocky_selfsigned_attestation.cbor"), "2026-06-01T00:00:00Z"},
	}
	nitroRaw, err := os.ReadFile("testdata/nitro/blocky_nitro_attestation.cbor")
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := unix.Dup(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Dup2(int(w.Fd()), 1); err != nil {
		t.Fatal(err)
	}
	savedStdout := os.Stdout
	os.Stdout = w
	got := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); got <- b }()
	results := 0
	c := NewChecker(Options{CollateralDir: "testdata/tdx/collateral"})
	for _, s := range samples {
		if _, err := c.Verify(context.Background(), s.envelope, nil, mustTime(s.at), nil); err == nil {
			results++
		}
	}
	if _, err := c.Verify(context.Background(), (&Envelope{Vendor: "nitro", Evidence: nitroRaw}).Marshal(), nil, nitroTime(t, nitroRaw), nil); err == nil {
		results++
	}
	// Control: a write to file descriptor 1 is captured (it is removed below).
	if _, err := unix.Write(1, []byte{'#'}); err != nil {
		panic(err)
	}
	// Restore before any test output.
	os.Stdout = savedStdout
	if err := unix.Dup2(saved, 1); err != nil {
		panic(err)
	}
	unix.Close(saved)
	w.Close()
	out := <-got
	r.Close()
	if len(out) == 0 || out[len(out)-1] != '#' {
		t.Fatalf("file descriptor 1 was not captured: %q", out)
	}
	if out = out[:len(out)-1]; len(out) != 0 {
		t.Fatalf("verification wrote %d bytes to stdout: %q", len(out), out)
	}
	// Accepted: TDX v4 and both SNP reports (authenticity only) at their
	// pinned times, and the Nitro document at its own timestamp.
	if results != 4 {
		t.Fatalf("%d samples accepted, want 4", results)
	}
}
