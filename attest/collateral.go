package attest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tenzro/train/attest/tdx"
)

// AttachCollateral returns a TDX envelope with the collateral for its
// quote's FMSPC from dir (tdx.CacheDir layout: <dir>/<fmspc>.json) carried
// inline, checked to parse. Validators verify evidence with only what the
// transaction carries (docs/PROTOCOL.md §11), so a real TDX trainer's
// evidence must carry its collateral; a node's --tdx-collateral directory
// serves only its own pre-check. Other vendors' envelopes, and a TDX one
// that already carries collateral, are returned unchanged.
func AttachCollateral(envelope []byte, dir string) ([]byte, error) {
	env, err := ParseEnvelope(envelope)
	if err != nil {
		return nil, err
	}
	if env.Vendor != VendorTDX || len(env.Collateral) > 0 {
		return envelope, nil
	}
	ev, err := tdx.Parse(env.Evidence)
	if err != nil {
		return nil, fmt.Errorf("tdx quote: %w", err)
	}
	p := filepath.Join(dir, strings.ToLower(ev.FMSPC)+".json")
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("tdx collateral for FMSPC %s: %w", ev.FMSPC, err)
	}
	if fi.Size() > tdx.MaxCollateral {
		return nil, fmt.Errorf("tdx collateral %s: %d bytes, limit %d", p, fi.Size(), tdx.MaxCollateral)
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("tdx collateral: %w", err)
	}
	if _, err := tdx.NewCache(-1).ParseCollateral(raw); err != nil {
		return nil, fmt.Errorf("tdx collateral %s: %w", p, err)
	}
	env.Collateral = json.RawMessage(raw)
	out := env.Marshal()
	if len(out) > MaxEnvelope {
		return nil, fmt.Errorf("evidence envelope with collateral is %d bytes, limit %d", len(out), MaxEnvelope)
	}
	return out, nil
}
