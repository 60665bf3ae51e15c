package attest

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/tenzro/train/wire"
)

func env(t testing.TB, vendor, file string, certs ...string) []byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/" + vendor + "/" + file)
	if err != nil {
		t.Fatal(err)
	}
	e := &Envelope{Vendor: vendor, Evidence: raw}
	for _, c := range certs {
		b, err := os.ReadFile("testdata/" + vendor + "/" + c)
		if err != nil {
			t.Fatal(err)
		}
		e.Certs = append(e.Certs, b)
	}
	return e.Marshal()
}

func day(y, m, d int) time.Time { return time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC) }

func TestRealSamplesAuthenticity(t *testing.T) {
	c := NewChecker(Options{CollateralDir: "testdata/tdx/collateral"})
	smt := true
	provisional := &Policy{Version: 1, SNP: &snpPolicy{SMTAllowed: &smt, AllowProvisionalFirmware: true}}
	strict := &Policy{Version: 1, SNP: &snpPolicy{SMTAllowed: &smt}}
	nitroNoMeas := &Policy{Version: 1, Nitro: &nitroPolicy{MaxAge: "1h"}}
	for _, tc := range []struct {
		name      string
		envelope  []byte
		policy    *Policy
		at        time.Time
		wantCheck string // "" = accepted
		wantTCB   string
	}{
		{"tdx v4 pinned", env(t, "tdx", "phala_tdx_quote"), nil, day(2025, 7, 1), "", "UpToDate"},
		{"tdx v4 today expired collateral", env(t, "tdx", "phala_tdx_quote"), nil, day(2026, 6, 1), "tdx.collateral.expired", ""},
		{"tdx v5 no matching level", env(t, "tdx", "phala_tdx_quote_outdated"), nil, day(2026, 3, 1), "tdx.tcb_status", ""},
		{"snp vcek pinned, provisional allowed", env(t, "snp", "trustee_test-report.bin", "trustee_test-vcek.der"), provisional, day(2025, 1, 1), "", ""},
		{"snp vcek provisional refused", env(t, "snp", "trustee_test-report.bin", "trustee_test-vcek.der"), strict, day(2025, 1, 1), "snp.tcb.provisional_firmware", ""},
		{"snp vlek pinned", env(t, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der"), provisional, day(2025, 6, 1), "", ""},
		{"snp vlek today expired", env(t, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der"), nil, day(2026, 6, 1), "snp.chain.validity", ""},
		{"snp missing cert", env(t, "snp", "trustee_test-report.bin"), nil, day(2025, 1, 1), "snp.certs", ""},
		{"nitro today expired", env(t, "nitro", "blocky_nitro_attestation.cbor"), nil, day(2026, 6, 1), "nitro.chain.validity", ""},
		{"nitro self-signed", env(t, "nitro", "blocky_selfsigned_attestation.cbor"), nil, day(2026, 6, 1), "", ""},
		{"no policy vendor", env(t, "nitro", "blocky_nitro_attestation.cbor"), strict, day(2026, 6, 1), "policy.vendor", ""},
		{"nitro policy", env(t, "nitro", "blocky_nitro_attestation.cbor"), nitroNoMeas, day(2026, 6, 1), "nitro.chain.validity", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := c.Verify(context.Background(), tc.envelope, tc.policy, tc.at, nil)
			if tc.name == "nitro self-signed" {
				if err == nil || FailedCheck(err) == "" {
					t.Fatalf("self-signed accepted: %v", err)
				}
				t.Logf("self-signed refused by %s: %v", FailedCheck(err), err)
				return
			}
			if tc.wantCheck != "" {
				if FailedCheck(err) != tc.wantCheck {
					t.Fatalf("failed check %q, want %q: %v", FailedCheck(err), tc.wantCheck, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if res.TCBStatus != tc.wantTCB {
				t.Fatalf("tcb %q want %q", res.TCBStatus, tc.wantTCB)
			}
			if _, err := json.Marshal(res); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestNitroPinnedTime(t *testing.T) {
	raw, _ := os.ReadFile("testdata/nitro/blocky_nitro_attestation.cbor")
	e := &Envelope{Vendor: "nitro", Evidence: raw}
	c := NewChecker(Options{})
	// Verify at the document's own timestamp.
	res, err := c.Verify(context.Background(), e.Marshal(), nil, time.Time{}.Add(1), nil)
	_ = res
	if err == nil {
		t.Fatal("zero time accepted")
	}
	ts := nitroTime(t, raw)
	if _, err := c.Verify(context.Background(), e.Marshal(), nil, ts, nil); err != nil {
		t.Fatalf("nitro at its timestamp %s: %v", ts, err)
	}
	dbg, _ := os.ReadFile("testdata/nitro/blocky_nitro_attestation_debug.cbor")
	de := &Envelope{Vendor: "nitro", Evidence: dbg}
	if _, err := c.Verify(context.Background(), de.Marshal(), nil, nitroTime(t, dbg), nil); FailedCheck(err) != "nitro.debug" {
		t.Fatalf("debug enclave: %v", err)
	}
	// Wrong binding.
	want := wire.SHA256([]byte("x"))
	if _, err := c.Verify(context.Background(), e.Marshal(), nil, ts, &want); FailedCheck(err) != "binding.report_data" {
		t.Fatalf("binding: %v", err)
	}
}

func TestTamperedSNP(t *testing.T) {
	raw, _ := os.ReadFile("testdata/snp/trustee_test-report.bin")
	vcek, _ := os.ReadFile("testdata/snp/trustee_test-vcek.der")
	c := NewChecker(Options{})
	for name, off := range map[string]int{"body": 0x90, "signature": 0x2A0 + 3} {
		b := append([]byte(nil), raw...)
		b[off] ^= 1
		e := &Envelope{Vendor: "snp", Evidence: b, Certs: [][]byte{vcek}}
		if _, err := c.Verify(context.Background(), e.Marshal(), nil, day(2025, 1, 1), nil); FailedCheck(err) != "snp.signature" {
			t.Fatalf("%s tamper: %v", name, err)
		}
	}
}

func TestVLEKAgainstVCEKOnlyRoots(t *testing.T) {
	roots, err := snpRoots(false)
	if err != nil {
		t.Fatal(err)
	}
	c := NewChecker(Options{SNPRoots: roots})
	_, err = c.Verify(context.Background(), env(t, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der"), nil, day(2025, 6, 1), nil)
	if FailedCheck(err) != "snp.chain" {
		t.Fatalf("VLEK with VCEK-only roots: %v", err)
	}
}

func TestMissingCollateralFailsClosed(t *testing.T) {
	c := NewChecker(Options{CollateralDir: t.TempDir()})
	_, err := c.Verify(context.Background(), env(t, "tdx", "phala_tdx_quote"), nil, day(2025, 7, 1), nil)
	if FailedCheck(err) != "tdx.collateral" {
		t.Fatalf("missing collateral: %v", err)
	}
}

func TestWrongMeasurementTDX(t *testing.T) {
	c := NewChecker(Options{CollateralDir: "testdata/tdx/collateral"})
	p, _ := Template("Verified", "tdx")
	_, err := c.Verify(context.Background(), env(t, "tdx", "phala_tdx_quote"), p, day(2025, 7, 1), nil)
	if FailedCheck(err) != "tdx.mrtd" {
		t.Fatalf("wrong mrtd: %v", err)
	}
}

func TestNonceStore(t *testing.T) {
	now := day(2025, 1, 1)
	s := NewNonceStore(nil, time.Minute, func() time.Time { return now })
	ctx := context.Background()
	n, err := s.Issue(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Consume(ctx, "b", n); err == nil {
		t.Fatal("wrong scope accepted")
	}
	if err := s.Consume(ctx, "a", n); err != nil {
		t.Fatalf("fresh nonce refused: %v", err)
	}
	if err := s.Consume(ctx, "a", n); err == nil {
		t.Fatal("replayed nonce accepted")
	}
	n2, _ := s.Issue(ctx, "a")
	now = now.Add(2 * time.Minute)
	if err := s.Consume(ctx, "a", n2); err == nil {
		t.Fatal("expired nonce accepted")
	}
}
