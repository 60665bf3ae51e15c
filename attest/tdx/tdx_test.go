package tdx

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/tenzro/train/attest/verdict"
)

const td = "../testdata/tdx/"

func load(t testing.TB, quote string) (*Evidence, *Collateral) {
	t.Helper()
	raw, err := os.ReadFile(td + quote)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := Parse(raw)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	col, err := CacheDir(td + "collateral").Load(ev.FMSPC)
	if err != nil {
		t.Fatalf("collateral: %v", err)
	}
	return ev, col
}

func TestRealQuotes(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		at         time.Time
		statuses   []string
		wantStatus string
		wantCheck  string
	}{
		{"v4 pinned", "phala_tdx_quote", time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC), nil, "UpToDate", ""},
		{"v4 today", "phala_tdx_quote", time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), nil, "", "tdx.collateral.expired"},
		{"v5 outdated no level", "phala_tdx_quote_outdated", time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), []string{"UpToDate", "OutOfDate", "SWHardeningNeeded"}, "", "tdx.tcb_status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, col := load(t, tc.file)
			var c verdict.Checks
			v, err := Verify(context.Background(), ev, VerifyOptions{Now: tc.at, Collateral: col, TCBStatuses: tc.statuses}, &c)
			if tc.wantCheck != "" {
				if got := verdict.FailedCheck(err); got != tc.wantCheck {
					t.Fatalf("failed check %q, want %q (err %v)", got, tc.wantCheck, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if v.TCBStatus != tc.wantStatus {
				t.Fatalf("status %s want %s", v.TCBStatus, tc.wantStatus)
			}
		})
	}
}
