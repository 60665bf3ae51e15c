package tdx

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/tenzro/train/attest/verdict"
)

// Without collateral the signatures and the chain are still checked: a
// genuine quote gets "TCB status unknown" after they held; the same quote
// with one byte changed names a signature check, not collateral.
func TestNoCollateralChecksSignaturesFirst(t *testing.T) {
	raw, err := os.ReadFile(td + "phala_tdx_quote")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)
	run := func(b []byte) (string, []verdict.Check) {
		ev, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		var c verdict.Checks
		_, err = Verify(context.Background(), ev, VerifyOptions{Now: at}, &c)
		return verdict.FailedCheck(err), c.List
	}
	got, list := run(raw)
	if got != "tdx.collateral" || len(list) != 3 || !list[0].OK || !list[1].OK || !list[2].Unknown {
		t.Fatalf("genuine quote without collateral: %q %+v", got, list)
	}
	for _, off := range []int{0x30 + 0x100, 0x30 + 0x208} { // MRTD-area byte, REPORTDATA byte (both signed)
		bad := append([]byte{}, raw...)
		bad[off] ^= 0x01
		got, list := run(bad)
		if got != "tdx.signature" {
			t.Errorf("byte %#x changed: failed check %q (%+v), want tdx.signature", off, got, list)
		}
	}
}
