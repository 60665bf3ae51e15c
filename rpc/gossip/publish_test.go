package gossip

import (
	"testing"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestOwnAnnouncementsReachNonMeshPeers is the regression test for
// announcements that never left the publisher: go-libp2p-pubsub v0.17.0
// sends a node's own messages only to its mesh peers unless flood publishing
// is on, and the mesh is empty until the first heartbeat after a peer
// subscribes (and stays without peers that refuse a GRAFT). Nothing recovers
// such a message later: gossip (IHAVE) goes only to peers outside the mesh,
// and once the heartbeat grafts them every peer is inside.
//
// The receiving peer here runs in the bootstrapper configuration the
// gossipsub spec recommends for boot nodes (D = Dlo = Dhi = Dout = 0): it
// never joins a mesh, PRUNEs every GRAFT, and with MaxIHaveLength = 0 ignores
// gossip, so the announcement reaches it only if the publisher sends it
// directly to every subscribed peer. Without flood publishing this test
// times out; with it, the message arrives whatever the heartbeat did.
func TestOwnAnnouncementsReachNonMeshPeers(t *testing.T) {
	ctx := testCtx(t)
	a := newNode(t, ctx, Config{}, Handlers{})

	h, err := libp2p.New(libp2p.ListenAddrStrings(DefaultListenAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	params := pubsub.DefaultGossipSubParams()
	params.D, params.Dlo, params.Dhi, params.Dout, params.Dscore, params.Dlazy = 0, 0, 0, 0, 0, 0
	params.MaxIHaveLength = 0
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithGossipSubParams(params))
	if err != nil {
		t.Fatal(err)
	}
	top, err := ps.Join(TopicTraining)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := top.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()
	ai, err := peer.AddrInfoFromString(a.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Connect(ctx, *ai); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "a sees the peer's subscription", func() bool { return len(a.TopicPeers(TopicTraining)) == 1 })

	ann := AnnouncementFor(signedGradient(t, trainerKey(t), []byte("payload")))
	if err := a.PublishSubmission(ctx, ann); err != nil {
		t.Fatal(err)
	}
	m, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("announcement never reached the subscribed peer: %v", err)
	}
	if m.GetFrom().String() != a.PeerID() {
		t.Fatalf("message from %s, want publisher %s", m.GetFrom(), a.PeerID())
	}
	if got := mustJSON(t, ann); string(m.Data) != string(got) {
		t.Fatalf("got %q, want %q", m.Data, got)
	}
}
