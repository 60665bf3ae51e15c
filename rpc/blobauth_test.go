package rpc_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// quotaAuth funds listed DIDs up to a byte quota each.
type quotaAuth struct {
	mu     sync.Mutex
	quota  map[string]int64
	held   map[string]int64
	marked []wire.Hash
}

func (a *quotaAuth) ChainID(context.Context) (string, error) { return "chain-A", nil }

func (a *quotaAuth) Reserve(_ context.Context, d, _ string, h wire.Hash, size int64) (func(bool), error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held[d]+size > a.quota[d] {
		return nil, machine.Errf(machine.KindFunds, "%s: %d held, %d more would pass its allowance of %d", d, a.held[d], size, a.quota[d])
	}
	a.held[d] += size
	return func(created bool) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if created {
			a.marked = append(a.marked, h)
		} else {
			a.held[d] -= size
		}
	}, nil
}

func intent(k *did.Key, chain string, h wire.Hash, size int, expires time.Time) string {
	in := wire.BlobIntent{DID: k.DID.String(), Size: uint64(size), Expires: uint64(expires.Unix())}
	in.Sig = k.Sign(in.Preimage(chain, h))
	return in.String()
}

// Finding 5 of issue 22: anyone could PUT random blobs at 253 MB/s, kept
// forever. Now an upload needs a signed intent of a funded DID, counts
// against that DID's quota and the peer's hourly budget, and stops at the
// store's disk cap; every refusal stores nothing.
func TestBlobUploadNeedsFundedIntent(t *testing.T) {
	funded, _ := did.Generate(did.KindMachine, nil)
	poor, _ := did.Generate(did.KindMachine, nil)
	auth := &quotaAuth{quota: map[string]int64{funded.DID.String(): 3000}, held: map[string]int64{}}
	h := newBlobHarness(t, rpc.Options{MaxBlobBytes: 1 << 20, BlobAuth: auth, BlobPeerBytesPerHour: 10_000})
	soon := time.Now().Add(5 * time.Minute)
	blob := func(i int) ([]byte, wire.Hash) {
		b := randomBlob(uint64(i), 1000)
		return b, wire.ContentHash(b)
	}
	put := func(b []byte, hash wire.Hash, hdr string) (int, string) {
		m := map[string]string{}
		if hdr != "" {
			m[wire.BlobIntentHeader] = hdr
		}
		st, body, _ := h.do(http.MethodPut, rpc.BlobPath+hash.String(), bytes.NewReader(b), m)
		return st, string(body)
	}
	b1, h1 := blob(1)
	for _, c := range []struct {
		name, hdr string
		status    int
		msg       string
	}{
		{"no intent", "", http.StatusUnauthorized, "Tenzro-Blob-Intent"},
		{"malformed intent", "v1 nonsense", http.StatusBadRequest, "six fields"},
		{"intent for another chain", intent(funded, "chain-B", h1, len(b1), soon), http.StatusUnauthorized, "does not verify"},
		{"intent for another blob", intent(funded, "chain-A", wire.ContentHash([]byte("x")), len(b1), soon), http.StatusUnauthorized, "does not verify"},
		{"intent for another size", intent(funded, "chain-A", h1, len(b1)+1, soon), http.StatusBadRequest, "Content-Length"},
		{"expired intent", intent(funded, "chain-A", h1, len(b1), time.Now().Add(-time.Second)), http.StatusUnauthorized, "expired"},
		{"intent too far ahead", intent(funded, "chain-A", h1, len(b1), time.Now().Add(time.Hour)), http.StatusUnauthorized, "more than"},
		{"unfunded DID", intent(poor, "chain-A", h1, len(b1), soon), http.StatusPaymentRequired, "allowance of 0"},
	} {
		if st, msg := put(b1, h1, c.hdr); st != c.status || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: HTTP %d %s; want %d with %q", c.name, st, msg, c.status, c.msg)
		}
	}
	if h.count() != 0 {
		t.Fatalf("%d blobs stored after refusals", h.count())
	}
	// Funded: three blobs of 1000 bytes fit the quota of 3000, a fourth not.
	for i := 1; i <= 3; i++ {
		b, hash := blob(i)
		if st, msg := put(b, hash, intent(funded, "chain-A", hash, len(b), soon)); st != http.StatusCreated {
			t.Fatalf("funded upload %d: HTTP %d %s", i, st, msg)
		}
	}
	b4, h4 := blob(4)
	if st, msg := put(b4, h4, intent(funded, "chain-A", h4, len(b4), soon)); st != http.StatusPaymentRequired || !strings.Contains(msg, "allowance of 3000") {
		t.Fatalf("over quota: HTTP %d %s", st, msg)
	}
	if len(auth.marked) != 3 || h.count() != 3 {
		t.Fatalf("%d uploads recorded, %d stored; want 3", len(auth.marked), h.count())
	}
	// Disk cap: the store is full for a fresh, funded DID.
	rich, _ := did.Generate(did.KindMachine, nil)
	auth.mu.Lock()
	auth.quota[rich.DID.String()] = 1 << 30
	auth.mu.Unlock()
	h.blobs.SetCap(3500)
	b5, h5 := blob(5)
	if st, msg := put(b5, h5, intent(rich, "chain-A", h5, len(b5), soon)); st != http.StatusInsufficientStorage || !strings.Contains(msg, "--blob-disk-cap") {
		t.Fatalf("past the disk cap: HTTP %d %s", st, msg)
	}
	h.blobs.SetCap(0)
	// The peer's hourly budget (10,000 bytes; 5,000 admitted so far counting
	// the refused ones that reached the store).
	var st int
	var msg string
	for i := 6; i < 20 && st != http.StatusTooManyRequests; i++ {
		b, hash := blob(i)
		st, msg = put(b, hash, intent(rich, "chain-A", hash, len(b), soon))
	}
	if st != http.StatusTooManyRequests || !strings.Contains(msg, "per-peer limit of 10000 bytes per hour") {
		t.Fatalf("past the peer budget: HTTP %d %s", st, msg)
	}
	if u := h.blobs.Usage(); u.Bytes > 10_000 {
		t.Fatalf("%d bytes stored past a 10,000-byte peer budget", u.Bytes)
	}
}
