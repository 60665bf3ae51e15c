package gossip

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire"
)

func newBlobStore(t *testing.T) *store.Blobs {
	t.Helper()
	bs, err := store.OpenBlobs(t.TempDir(), store.BlobOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	return bs
}

func blobBytes(seed byte, n int) []byte {
	var key [32]byte
	key[0] = seed
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(key).Read(b)
	return b
}

// storeEmpty checks that a store holds no blob and no temporary file.
func storeEmpty(t *testing.T, bs *store.Blobs) {
	t.Helper()
	n := 0
	_ = bs.Walk(context.Background(), func(wire.Hash, int64) error { n++; return nil })
	var tmps []string
	_ = filepath.WalkDir(bs.Dir(), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), ".tmp-") {
			tmps = append(tmps, p)
		}
		return nil
	})
	if n != 0 || len(tmps) != 0 {
		t.Fatalf("store holds %d blobs and temporary files %v", n, tmps)
	}
}

func TestBlobRequestLayout(t *testing.T) {
	h := wire.ContentHash([]byte("x"))
	r := BlobRequest{Hash: h, Offset: 7, Limit: 1 << 40}
	b := r.Marshal()
	if len(b) != BlobRequestSize {
		t.Fatalf("request is %d bytes", len(b))
	}
	got, err := ParseBlobRequest(b)
	if err != nil || got != r {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"hash only (version 1 request)", h[:]},
		{"one byte short", b[:47]},
		{"trailing byte", append(append([]byte{}, b...), 0)},
		{"offset out of range", append(append(append([]byte{}, h[:]...), 0xff, 0, 0, 0, 0, 0, 0, 0), make([]byte, 8)...)},
	} {
		if _, err := ParseBlobRequest(tc.b); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func FuzzParseBlobRequest(f *testing.F) {
	h := wire.ContentHash([]byte("seed"))
	f.Add(BlobRequest{Hash: h, Offset: 0, Limit: 1 << 20}.Marshal())
	f.Add(BlobRequest{Hash: h, Offset: 1 << 62, Limit: 0}.Marshal())
	f.Add(h[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseBlobRequest(b)
		if err != nil {
			return
		}
		if len(b) != BlobRequestSize || !bytes.Equal(r.Marshal(), b) {
			t.Fatalf("accepted %d bytes that do not round-trip", len(b))
		}
	})
}

// TestFetchBlobToResumes moves a blob between two real hosts on 127.0.0.1
// into the fetcher's blob store, with the stream cut mid-transfer: the
// fetch resumes from the first missing byte, from the same peer and then
// from another one, and the blob arrives whole.
func TestFetchBlobToResumes(t *testing.T) {
	ctx := testCtx(t)
	data := blobBytes(1, 6<<20+123)
	h := wire.ContentHash(data)
	holders := make([]*Node, 2)
	stores := make([]*store.Blobs, 2)
	for i := range holders {
		stores[i] = newBlobStore(t)
		if err := stores[i].Put(ctx, h, data); err != nil {
			t.Fatal(err)
		}
		holders[i] = newNode(t, ctx, Config{Blobs: stores[i]}, Handlers{})
	}
	fetch := func(t *testing.T, peers ...string) (*Node, *store.Blobs) {
		t.Helper()
		bs := newBlobStore(t)
		var boot []string
		for _, n := range holders {
			boot = append(boot, n.Addrs()...)
		}
		c := newNode(t, ctx, Config{Blobs: bs, BootNodes: boot, MaxBlob: 64 << 20}, Handlers{})
		size, err := c.FetchBlobTo(ctx, h, int64(len(data)), peers...)
		if err != nil || size != int64(len(data)) {
			t.Fatalf("FetchBlobTo = %d, %v", size, err)
		}
		got, err := bs.Get(ctx, h)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("fetched blob differs: %v", err)
		}
		return c, bs
	}

	t.Run("same peer", func(t *testing.T) {
		before := holders[0].Stats().BlobBytesServed
		holders[0].cutServeAfter.Store(2 << 20)
		c, _ := fetch(t, holders[0].PeerID())
		if s := c.Stats(); s.BlobResumes != 1 || s.BlobsFetched != 1 {
			t.Fatalf("fetcher stats %+v, want one resume", s)
		}
		// The resumed stream started at the first byte the cut one had not
		// delivered, not at 0 (bytes in flight when the stream was reset
		// are sent twice).
		if served := holders[0].Stats().BlobBytesServed - before; served < uint64(len(data)) || served >= uint64(len(data))+2<<20 {
			t.Fatalf("holder served %d bytes for a %d-byte blob cut after 2 MiB", served, len(data))
		}
	})
	t.Run("another peer", func(t *testing.T) {
		before := holders[1].Stats().BlobBytesServed
		holders[0].cutServeAfter.Store(3 << 20)
		// After the cut the first holder no longer has the blob: the
		// fetch goes on from the second holder at the byte it reached.
		go func() {
			for holders[0].cutServeAfter.Load() != 0 {
				time.Sleep(time.Millisecond)
			}
			_ = stores[0].Delete(ctx, h)
		}()
		c, _ := fetch(t, holders[0].PeerID(), holders[1].PeerID())
		if s := c.Stats(); s.BlobResumes < 1 {
			t.Fatalf("fetcher stats %+v, want a resume", s)
		}
		served := holders[1].Stats().BlobBytesServed - before
		if served == 0 || served >= uint64(len(data)) {
			t.Fatalf("second holder served %d of %d bytes, want only the rest", served, len(data))
		}
	})
}

func TestFetchBlobToRefusals(t *testing.T) {
	ctx := testCtx(t)
	data := blobBytes(2, 1<<20)
	h := wire.ContentHash(data)
	lying := wire.ContentHash([]byte("claimed"))
	server := newNode(t, ctx, Config{}, Handlers{Blob: func(q wire.Hash) ([]byte, bool) {
		switch q {
		case h:
			return data, true
		case lying:
			return data, true
		}
		return nil, false
	}})
	bs := newBlobStore(t)
	c := newNode(t, ctx, Config{Blobs: bs, BootNodes: server.Addrs()}, Handlers{})
	for _, tc := range []struct {
		name  string
		hash  wire.Hash
		limit int64
		want  error
	}{
		{"hash mismatch", lying, 2 << 20, ErrBlobHashMismatch},
		{"over the caller's limit", h, 1<<20 - 1, ErrBlobTooLarge},
		{"not found", wire.ContentHash([]byte("absent")), 2 << 20, ErrBlobNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.FetchBlobTo(ctx, tc.hash, tc.limit, server.PeerID()); !errors.Is(err, tc.want) {
				t.Fatalf("FetchBlobTo: %v, want %v", err, tc.want)
			}
			storeEmpty(t, bs)
		})
	}
	// Too many streams from one peer at once: busy.
	server.servingMu.Lock()
	server.serving[c.h.ID()] = maxServesPerPeer
	server.servingMu.Unlock()
	if _, err := c.FetchBlobTo(ctx, h, 2<<20, server.PeerID()); !errors.Is(err, ErrBlobBusy) {
		t.Fatalf("over the per-peer limit: %v", err)
	}
	server.servingMu.Lock()
	delete(server.serving, c.h.ID())
	server.servingMu.Unlock()
	if _, err := c.FetchBlobTo(ctx, h, 2<<20, server.PeerID()); err != nil {
		t.Fatal(err)
	}
}

// TestForwarderToReceiverByReference: a light node whose trainer uploaded
// the payload (PUT /blobs) forwards a submission without inline bytes; the
// syncer's node fetches the payload into its own blob store and submits by
// reference.
func TestForwarderToReceiverByReference(t *testing.T) {
	ctx := testCtx(t)
	syncerStore, lightStore := newBlobStore(t), newBlobStore(t)
	syncerNode := newNode(t, ctx, Config{Blobs: syncerStore}, Handlers{})
	light := newNode(t, ctx, Config{Blobs: lightStore, BootNodes: syncerNode.Addrs()}, Handlers{})
	var got collector[*wire.OuterGradient]
	r, err := syncerNode.NewReceiver(func(ctx context.Context, g *wire.OuterGradient) error {
		got.add(g)
		return nil
	}, ReceiverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitTopicPeers(t, ctx, 1, light)
	waitTopicPeers(t, ctx, 1, syncerNode)
	payload := blobBytes(3, 3<<20)
	g := signedGradient(t, trainerKey(t), payload)
	g.GradientPayload = nil // by reference: not uploaded yet
	if _, err := NewForwarder(light).Forward(ctx, g); err == nil {
		t.Fatal("forwarded a payload the light node does not hold")
	}
	if err := lightStore.Put(ctx, g.PayloadHash, payload); err != nil {
		t.Fatal(err)
	}
	a, err := NewForwarder(light).Forward(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if a.PayloadSize != int64(len(payload)) {
		t.Fatalf("announced %d bytes", a.PayloadSize)
	}
	waitFor(t, ctx, "the syncer's node submits the forwarded gradient", func() bool { return len(got.all()) == 1 })
	sub := got.all()[0]
	if sub.GradientPayload != nil || sub.PayloadHash != g.PayloadHash {
		t.Fatal("the receiver should submit by reference")
	}
	if b, err := syncerStore.Get(ctx, g.PayloadHash); err != nil || !bytes.Equal(b, payload) {
		t.Fatalf("payload in the syncer's store: %v", err)
	}
}
