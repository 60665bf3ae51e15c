package tdx

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenzro/train/attest/verdict"
)

// A cached PCK chain and collateral are trusted up to the earliest next
// update of the collateral (here the PCK CRL's, 2025-07-19T10:00:35Z),
// bound included as the library includes it, and not a second longer; the
// uncached verification agrees at both instants.
func TestCacheEndsAtTheEarliestNextUpdate(t *testing.T) {
	ev, col := load(t, "phala_tdx_quote")
	c := NewCache(0)
	verifyAt := func(at time.Time, cache *Cache) string {
		var checks verdict.Checks
		_, err := Verify(context.Background(), ev, VerifyOptions{Now: at, Collateral: col, Cache: cache}, &checks)
		return verdict.FailedCheck(err)
	}
	if got := verifyAt(time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC), c); got != "" || c.Len() != 1 {
		t.Fatalf("first verification: %q, %d cached", got, c.Len())
	}
	last := time.Date(2025, 7, 19, 10, 0, 35, 0, time.UTC)
	for _, tc := range []struct {
		at          time.Time
		want        string
		hit, expire uint64
	}{
		{last, "", 1, 0},
		{last.Add(time.Second), "tdx.collateral.expired", 1, 1},
		{time.Date(2025, 6, 19, 10, 32, 27, 0, time.UTC), "", 2, 1},
	} {
		if got := verifyAt(tc.at, c); got != tc.want {
			t.Fatalf("at %s: %q, want %q", tc.at, got, tc.want)
		}
		if got := verifyAt(tc.at, nil); got != tc.want {
			t.Fatalf("uncached at %s: %q, want %q", tc.at, got, tc.want)
		}
		if s := c.Stats(); s.Hits != tc.hit || s.Expired != tc.expire {
			t.Fatalf("at %s: %+v", tc.at, s)
		}
	}
}

// The parsed-collateral cache returns the same document for the same bytes
// and parses changed bytes again.
func TestCollateralParsedOncePerContent(t *testing.T) {
	c := NewCache(0)
	a, err := c.Load(CacheDir(td+"collateral"), "b0c06f000000")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Load(CacheDir(td+"collateral"), "B0C06F000000")
	if err != nil || a != b {
		t.Fatalf("same file parsed twice (%p, %p) or %v", a, b, err)
	}
	if _, err := c.Load(CacheDir(td+"collateral"), "90c06f000000"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := c.Load(CacheDir(dir), "b0c06f000000"); err == nil {
		t.Fatal("missing file loaded")
	}
	// A file whose content changes is parsed again.
	orig, err := os.ReadFile(td + "collateral/b0c06f000000.json")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "b0c06f000000.json")
	if err := os.WriteFile(p, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	d1, err := c.Load(CacheDir(dir), "b0c06f000000")
	if err != nil || d1 != a {
		t.Fatalf("same content in another file parsed again (%p, %p) or %v", d1, a, err)
	}
	if err := os.WriteFile(p, append(orig, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	d2, err := c.Load(CacheDir(dir), "b0c06f000000")
	f1, f2 := *a, *d2
	f1.memo, f2.memo = nil, nil
	if err != nil || d2 == a || f1 != f2 {
		t.Fatalf("changed file: %p (was %p), %v", d2, a, err)
	}
	if _, err := c.ParseCollateral([]byte(`{"tcb_info":"x"}`)); err == nil {
		t.Fatal("incomplete collateral parsed")
	}
}

// The memoized content key of parsed collateral follows any change of a
// field (a copy carries the memo along).
func TestContentKeyFollowsChanges(t *testing.T) {
	_, col := load(t, "phala_tdx_quote")
	k := contentKey(col)
	if k != hashCollateral(col) || col.memo == nil {
		t.Fatal("memo missing or wrong")
	}
	c2 := *col
	c2.PCKCRL = c2.PCKCRL[:len(c2.PCKCRL)-2] + "00"
	if contentKey(&c2) == k || contentKey(&c2) != hashCollateral(&c2) {
		t.Fatal("changed field, same key")
	}
	c3 := *col
	c3.TCBInfo = string(append([]byte(nil), c3.TCBInfo...)) // same content, other string
	if contentKey(&c3) != k {
		t.Fatal("same content, other key")
	}
}
