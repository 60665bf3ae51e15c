package gossip

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func quiet() *slog.Logger {
	if os.Getenv("GOSSIP_TEST_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newNode(t *testing.T, ctx context.Context, cfg Config, h Handlers) *Node {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Identity = priv
	cfg.Logger = quiet()
	n, err := New(ctx, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// waitTopicPeers waits until every node sees the given number of peers on
// both topics.
func waitTopicPeers(t *testing.T, ctx context.Context, want int, nodes ...*Node) {
	t.Helper()
	for _, n := range nodes {
		for _, top := range []string{TopicTraining, TopicSyncer} {
			waitFor(t, ctx, n.PeerID()+" peers on "+top, func() bool { return len(n.TopicPeers(top)) >= want })
		}
	}
}

func connect(t *testing.T, ctx context.Context, a, b *Node) {
	t.Helper()
	if err := a.Connect(ctx, b.Addrs()[0]); err != nil {
		t.Fatal(err)
	}
}

func trainerKey(t *testing.T) *did.Key {
	k, err := did.Generate(did.KindMachine, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func signedGradient(t *testing.T, k *did.Key, payload []byte) *wire.OuterGradient {
	g := &wire.OuterGradient{TaskID: "task-1", TrainerDID: k.DID.String(), Round: 3, FragmentIndex: 2,
		GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
	g.Signature = k.Sign(g.Preimage())
	return g
}

// collector gathers what a handler receives.
type collector[T any] struct {
	mu  sync.Mutex
	got []T
}

func (c *collector[T]) add(v T) { c.mu.Lock(); c.got = append(c.got, v); c.mu.Unlock() }
func (c *collector[T]) all() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

type recv struct {
	subs   collector[SubmissionAnnouncement]
	from   collector[string]
	status collector[SyncerStatus]
}

func (r *recv) handlers() Handlers {
	return Handlers{
		OnSubmission:   func(ctx context.Context, from string, a SubmissionAnnouncement) { r.subs.add(a); r.from.add(from) },
		OnSyncerStatus: func(ctx context.Context, s SyncerStatus) { r.status.add(s) },
	}
}

func TestAnnouncementsReachPeers(t *testing.T) {
	ctx := testCtx(t)
	var ra, rb, rc recv
	a := newNode(t, ctx, Config{}, ra.handlers())
	b := newNode(t, ctx, Config{BootNodes: a.Addrs()}, rb.handlers())
	c := newNode(t, ctx, Config{BootNodes: a.Addrs()}, rc.handlers())
	connect(t, ctx, c, b)
	waitTopicPeers(t, ctx, 2, a, b, c)

	ann := AnnouncementFor(signedGradient(t, trainerKey(t), []byte("payload")))
	if err := a.PublishSubmission(ctx, ann); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*recv{"b": &rb, "c": &rc} {
		waitFor(t, ctx, name+" receives the submission", func() bool { return len(r.subs.all()) == 1 })
		if got := r.subs.all()[0]; got.PayloadHash != ann.PayloadHash || !bytes.Equal(got.Signature, ann.Signature) {
			t.Fatalf("%s got %+v", name, got)
		}
		if r.from.all()[0] != a.PeerID() {
			t.Fatalf("%s: from %s, want publisher %s", name, r.from.all()[0], a.PeerID())
		}
	}

	syncer := trainerKey(t)
	st := SyncerStatus{TaskID: "task-1", Round: 4, Status: SyncerRoundCommitted, ModelHash: wire.ContentHash([]byte("m"))}
	st.Sign(syncer)
	if err := b.PublishSyncerStatus(ctx, st); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*recv{"a": &ra, "c": &rc} {
		waitFor(t, ctx, name+" receives the status", func() bool { return len(r.status.all()) == 1 })
		if got := r.status.all()[0]; got.SyncerDID != syncer.DID.String() || got.Round != 4 {
			t.Fatalf("%s got %+v", name, got)
		}
	}
	if len(ra.subs.all()) != 0 || len(rb.status.all()) != 0 {
		t.Fatal("a node received its own message")
	}
	// Publishing an invalid message fails locally.
	bad := ann
	bad.Round++
	if err := a.PublishSubmission(ctx, bad); !errors.Is(err, did.ErrBadSignature) {
		t.Fatalf("publishing a bad signature: %v", err)
	}
}

// TestValidatorsDropInvalid publishes from a raw pubsub peer that runs no
// validators, connected only to a. a must reject invalid messages, so b and
// c (connected only to a) never see them.
func TestValidatorsDropInvalid(t *testing.T) {
	ctx := testCtx(t)
	var ra, rb, rc recv
	a := newNode(t, ctx, Config{}, ra.handlers())
	b := newNode(t, ctx, Config{BootNodes: a.Addrs()}, rb.handlers())
	c := newNode(t, ctx, Config{BootNodes: a.Addrs()}, rc.handlers())

	evil, err := libp2p.New(libp2p.ListenAddrStrings(DefaultListenAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer evil.Close()
	// Flood publishing, like our nodes: otherwise evil's messages wait for
	// its mesh (see TestOwnAnnouncementsReachNonMeshPeers).
	eps, err := pubsub.NewGossipSub(ctx, evil, pubsub.WithFloodPublish(true))
	if err != nil {
		t.Fatal(err)
	}
	etop, err := eps.Join(TopicTraining)
	if err != nil {
		t.Fatal(err)
	}
	esub, err := etop.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer esub.Cancel()
	ai, _ := peer.AddrInfoFromString(a.Addrs()[0])
	if err := evil.Connect(ctx, *ai); err != nil {
		t.Fatal(err)
	}
	waitTopicPeers(t, ctx, 1, b, c)
	waitFor(t, ctx, "evil sees a", func() bool { return len(etop.ListPeers()) == 1 })
	waitFor(t, ctx, "a sees evil", func() bool { return len(a.TopicPeers(TopicTraining)) == 3 })
	// a forwards others' messages to its mesh peers only: wait until b and c
	// are in it, so that the valid message below must reach them.
	waitFor(t, ctx, "b and c in a's mesh", func() bool {
		m := a.MeshPeers(TopicTraining)
		return slices.Contains(m, b.PeerID()) && slices.Contains(m, c.PeerID())
	})

	k := trainerKey(t)
	good := AnnouncementFor(signedGradient(t, k, []byte("good")))
	forged := good
	forged.Round = 4 // signature covers the round: no longer verifies
	wrongKey := AnnouncementFor(signedGradient(t, trainerKey(t), []byte("other")))
	wrongKey.TrainerDID = k.DID.String()
	invalid := [][]byte{
		mustJSON(t, forged),
		mustJSON(t, wrongKey),
		[]byte(`{"type":"submission","task_id":"task-1"`),
		[]byte(`{"type":"submission","extra":1}`),
		bytes.Repeat([]byte(" "), MaxMessageSize+1),
	}
	for i, m := range invalid {
		if err := etop.Publish(ctx, m); err != nil {
			t.Fatalf("evil publish %d: %v", i, err)
		}
	}
	waitFor(t, ctx, "a rejects every invalid message", func() bool { return a.Stats().Rejected == uint64(len(invalid)) })
	// Now a valid message along the same path: once b and c have it, anything
	// a had forwarded before would have arrived too.
	if err := etop.Publish(ctx, mustJSON(t, good)); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*recv{"a": &ra, "b": &rb, "c": &rc} {
		waitFor(t, ctx, name+" receives the valid message", func() bool { return len(r.subs.all()) >= 1 })
		if got := r.subs.all(); len(got) != 1 || got[0].PayloadHash != good.PayloadHash {
			t.Fatalf("%s delivered %+v, want only the valid announcement", name, got)
		}
	}
	for name, n := range map[string]*Node{"b": b, "c": c} {
		if s := n.Stats(); s.Rejected != 0 {
			t.Fatalf("%s saw %d invalid messages: a forwarded them", name, s.Rejected)
		}
	}
}

func mustJSON(t *testing.T, a SubmissionAnnouncement) []byte {
	b, err := encode(&a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBlobFetch(t *testing.T) {
	ctx := testCtx(t)
	payload := bytes.Repeat([]byte("tenzro"), 400<<10) // 2.4 MB, above gossip's message size
	wrong := []byte("not the payload")
	wrongHash := wire.ContentHash([]byte("claimed"))
	server := newNode(t, ctx, Config{}, Handlers{Blob: func(h wire.Hash) ([]byte, bool) {
		switch h {
		case wire.ContentHash(payload):
			return payload, true
		case wrongHash:
			return wrong, true
		}
		return nil, false
	}})
	client := newNode(t, ctx, Config{BootNodes: server.Addrs()}, Handlers{})
	small := newNode(t, ctx, Config{BootNodes: server.Addrs(), MaxBlob: 1 << 20}, Handlers{})

	tests := []struct {
		name string
		from *Node
		hash wire.Hash
		want error
	}{
		{"ok", client, wire.ContentHash(payload), nil},
		{"not found", client, wire.ContentHash([]byte("absent")), ErrBlobNotFound},
		{"hash mismatch", client, wrongHash, ErrBlobHashMismatch},
		{"oversize", small, wire.ContentHash(payload), ErrBlobTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.from.FetchBlob(ctx, server.PeerID(), tc.hash)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err == nil && !bytes.Equal(got, payload) {
				t.Fatal("payload differs")
			}
		})
	}
	if s := server.Stats(); s.BlobsServed < 2 {
		t.Fatalf("served %d blobs, want at least 2 (ok, mismatch)", s.BlobsServed)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := client.FetchBlob(cctx, server.PeerID(), wire.ContentHash(payload)); err == nil {
		t.Fatal("fetch with a cancelled context succeeded")
	}
}

func TestForwarderToReceiver(t *testing.T) {
	ctx := testCtx(t)
	syncerNode := newNode(t, ctx, Config{}, Handlers{})
	light := newNode(t, ctx, Config{BootNodes: syncerNode.Addrs()}, Handlers{})
	// A third full node in the mesh, to show the receiver acts once.
	other := newNode(t, ctx, Config{BootNodes: syncerNode.Addrs()}, Handlers{})
	_ = other
	var got collector[*wire.OuterGradient]
	r, err := syncerNode.NewReceiver(func(ctx context.Context, g *wire.OuterGradient) error {
		got.add(g)
		return nil
	}, ReceiverOptions{Filter: func(a SubmissionAnnouncement) bool { return a.TaskID == "task-1" }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitTopicPeers(t, ctx, 1, light)
	waitTopicPeers(t, ctx, 2, syncerNode)

	payload := make([]byte, 3<<20)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	k := trainerKey(t)
	g := signedGradient(t, k, payload)
	g.Metrics = wire.SubmissionMetrics{wire.MetricTrainLoss: 0.75, wire.MetricSamples: 768} // signed, and relayed with the announcement
	g.Signature = k.Sign(g.Preimage())
	if _, err := NewForwarder(light).Forward(ctx, g); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the syncer's node submits the forwarded gradient", func() bool { return len(got.all()) == 1 })
	sub := got.all()[0]
	if !bytes.Equal(sub.GradientPayload, payload) || sub.PayloadHash != g.PayloadHash || sub.TrainerDID != g.TrainerDID ||
		sub.Round != g.Round || sub.FragmentIndex != g.FragmentIndex || !bytes.Equal(sub.Signature, g.Signature) ||
		sub.Metrics[wire.MetricTrainLoss] != 0.75 || len(sub.Metrics) != 2 {
		t.Fatal("submitted gradient differs from the forwarded one")
	}
	if err := did.Verify(sub.TrainerDID, sub.Preimage(), sub.Signature); err != nil {
		t.Fatalf("submitted gradient does not verify: %v", err)
	}

	// Refusals: tampered payload, another task (filtered out).
	bad := signedGradient(t, k, []byte("x"))
	bad.GradientPayload = []byte("y")
	if _, err := NewForwarder(light).Forward(ctx, bad); err == nil {
		t.Fatal("forwarded a payload that does not match its hash")
	}
	if s := syncerNode.Stats(); s.ReceiverSubmitted != 1 || s.ReceiverSubmitFails != 0 {
		t.Fatalf("receiver stats %+v", s)
	}
}

// A light node forwards a submission's attestation claim with it: the
// announcement names the claim by hash and the syncer's node fetches it.
func TestForwarderCarriesEvidence(t *testing.T) {
	ctx := testCtx(t)
	syncerNode := newNode(t, ctx, Config{}, Handlers{})
	light := newNode(t, ctx, Config{BootNodes: syncerNode.Addrs()}, Handlers{})
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
	g := signedGradient(t, trainerKey(t), []byte("payload with evidence"))
	g.Attestation = []byte(`{"envelope":{"vendor":"snp","evidence":"AAAA"},"nonce":"AQID","program_hash":"` + wire.SHA256([]byte("p")).String() + `"}`)
	a, err := NewForwarder(light).Forward(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if a.AttestationHash != wire.ContentHash(g.Attestation) || a.AttestationSize != int64(len(g.Attestation)) {
		t.Fatalf("announcement %+v", a)
	}
	waitFor(t, ctx, "the syncer's node submits the gradient with its evidence", func() bool { return len(got.all()) == 1 })
	if sub := got.all()[0]; !bytes.Equal(sub.Attestation, g.Attestation) {
		t.Fatalf("evidence %q, want %q", sub.Attestation, g.Attestation)
	}
	bad := a
	bad.AttestationSize = 0
	if err := bad.Verify(0); err == nil {
		t.Fatal("announcement with a hash but no size accepted")
	}
}
