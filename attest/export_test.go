package attest

import (
	"os"
	"testing"
	"time"

	"github.com/tenzro/train/attest/internal/vcache"
	"github.com/tenzro/train/attest/nitro"
	"github.com/tenzro/train/attest/snp"
	"github.com/tenzro/train/syncer"
)

type (
	snpPolicy   = snp.Policy
	nitroPolicy = nitro.Policy
)

var snpRoots = snp.Roots

func nitroTime(t testing.TB, raw []byte) time.Time {
	ev, err := nitro.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return ev.IssuedAt
}

var _ = os.ReadFile

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// CacheStats returns the lookup counters of the verified-chain caches, by
// vendor.
func (c *Checker) CacheStats() map[string]vcache.Stats {
	return map[string]vcache.Stats{VendorSNP: c.snpCache.Stats(), VendorNitro: c.nitroCache.Stats(), VendorTDX: c.tdxCache.Stats()}
}

// CacheLen returns the number of verified chains held, by vendor.
func (c *Checker) CacheLen() map[string]int {
	return map[string]int{VendorSNP: c.snpCache.Len(), VendorNitro: c.nitroCache.Len(), VendorTDX: c.tdxCache.Len()}
}

var _ syncer.Attestor = (*Checker)(nil)
