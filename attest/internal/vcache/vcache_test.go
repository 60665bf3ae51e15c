package vcache

import (
	"crypto/x509"
	"fmt"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func key(i int) Key { return NewKey("test", []byte(fmt.Sprint(i))) }

func TestWindowIsHonoured(t *testing.T) {
	c := New[int](4)
	c.Put(key(1), 1, t0, t0.Add(time.Hour))
	for _, tc := range []struct {
		at time.Time
		ok bool
	}{
		{t0.Add(-time.Nanosecond), false},
		{t0, true}, // bounds included, as crypto/x509 and go-tdx-guest include them
		{t0.Add(30 * time.Minute), true},
		{t0.Add(time.Hour), true},
		{t0.Add(time.Hour + time.Nanosecond), false},
	} {
		if _, ok := c.Get(key(1), tc.at); ok != tc.ok {
			t.Errorf("Get at %s: %v, want %v", tc.at, ok, tc.ok)
		}
	}
	if s := c.Stats(); s.Hits != 3 || s.Expired != 2 || s.Misses != 0 {
		t.Fatalf("stats %+v", s)
	}
	// An entry outside its window stays (times are the caller's).
	if _, ok := c.Get(key(1), t0); !ok || c.Len() != 1 {
		t.Fatal("entry dropped after an expired lookup")
	}
	// An empty window stores nothing.
	c.Put(key(2), 2, t0, t0.Add(-time.Second))
	if _, ok := c.Get(key(2), t0); ok || c.Len() != 1 {
		t.Fatal("empty window stored")
	}
}

func TestBoundedLRU(t *testing.T) {
	const max = 8
	c := New[int](max)
	from, until := Always()
	for i := 0; i < 3*max; i++ {
		c.Put(key(i), i, from, until)
		if c.Len() > max {
			t.Fatalf("%d entries, bound %d", c.Len(), max)
		}
	}
	if c.Len() != max {
		t.Fatalf("%d entries, want %d", c.Len(), max)
	}
	for i := 2 * max; i < 3*max; i++ {
		if v, ok := c.Get(key(i), t0); !ok || v != i {
			t.Fatalf("recent entry %d missing", i)
		}
	}
	if _, ok := c.Get(key(max), t0); ok {
		t.Fatal("old entry not evicted")
	}
	if s := c.Stats(); s.Evictions != 2*max {
		t.Fatalf("evictions %d, want %d", s.Evictions, 2*max)
	}
	// Re-putting a key replaces its value and window, without growing.
	c.Put(key(3*max-1), -1, t0, t0)
	if v, ok := c.Get(key(3*max-1), t0); !ok || v != -1 || c.Len() != max {
		t.Fatalf("replace: %d %v len %d", v, ok, c.Len())
	}
}

func TestLeastRecentlyUsedGoesFirst(t *testing.T) {
	c := New[int](2)
	from, until := Always()
	c.Put(key(1), 1, from, until)
	c.Put(key(2), 2, from, until)
	c.Get(key(1), t0) // 2 is now the least recently used
	c.Put(key(3), 3, from, until)
	if _, ok := c.Get(key(2), t0); ok {
		t.Fatal("least recently used entry kept")
	}
	if _, ok := c.Get(key(1), t0); !ok {
		t.Fatal("recently used entry evicted")
	}
}

func TestNilCachesNothing(t *testing.T) {
	var c *Cache[int]
	if New[int](0) != nil || New[int](-1) != nil {
		t.Fatal("New(<=0) is not nil")
	}
	c.Put(key(1), 1, t0, t0)
	if _, ok := c.Get(key(1), t0); ok || c.Len() != 0 || c.Max() != 0 {
		t.Fatal("nil cache holds something")
	}
	_ = c.Stats()
}

func TestKeysAreLengthPrefixed(t *testing.T) {
	if NewKey("d", []byte("ab"), []byte("c")) == NewKey("d", []byte("a"), []byte("bc")) {
		t.Fatal("parts are not delimited")
	}
	if NewKey("d1", []byte("x")) == NewKey("d2", []byte("x")) {
		t.Fatal("domain not in the key")
	}
	if NewKey("d", []byte("x")) != NewBuilder("d").Bytes([]byte("x")).Sum() {
		t.Fatal("NewKey and Builder differ")
	}
	if NewBuilder("d").String("x").Sum() != NewBuilder("d").Bytes([]byte("x")).Sum() {
		t.Fatal("String and Bytes differ")
	}
}

func TestWindowOfCertificates(t *testing.T) {
	a := &x509.Certificate{NotBefore: t0, NotAfter: t0.AddDate(1, 0, 0)}
	b := &x509.Certificate{NotBefore: t0.AddDate(0, 1, 0), NotAfter: t0.AddDate(5, 0, 0)}
	from, until := Window(a, b)
	if !from.Equal(b.NotBefore) || !until.Equal(a.NotAfter) {
		t.Fatalf("window %s..%s", from, until)
	}
	from, until = Narrow(from, until, time.Time{}, t0.AddDate(0, 6, 0))
	if !from.Equal(b.NotBefore) || !until.Equal(t0.AddDate(0, 6, 0)) {
		t.Fatalf("narrowed %s..%s", from, until)
	}
}

func TestConcurrent(t *testing.T) {
	c := New[int](16)
	from, until := Always()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				k := key((i * (g + 1)) % 64)
				if v, ok := c.Get(k, t0); ok && key(v) != k {
					t.Errorf("wrong value under a key")
					return
				}
				c.Put(k, (i*(g+1))%64, from, until)
			}
		}(g)
	}
	wg.Wait()
	if c.Len() > 16 {
		t.Fatalf("%d entries, bound 16", c.Len())
	}
}
