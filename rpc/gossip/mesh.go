package gossip

import (
	"sync"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// meshTracer mirrors the gossipsub router's mesh from its trace events, so
// the node can report which peers it forwards to (pubsub does not expose
// the mesh). The router calls it from its event loop: it must not block.
type meshTracer struct {
	mu   sync.Mutex
	mesh map[string]map[peer.ID]struct{}
}

var _ pubsub.RawTracer = (*meshTracer)(nil)

func newMeshTracer() *meshTracer {
	return &meshTracer{mesh: map[string]map[peer.ID]struct{}{}}
}

func (t *meshTracer) peers(topic string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.mesh[topic]))
	for p := range t.mesh[topic] {
		out = append(out, p.String())
	}
	return out
}

func (t *meshTracer) Graft(p peer.ID, topic string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.mesh[topic]
	if m == nil {
		m = map[peer.ID]struct{}{}
		t.mesh[topic] = m
	}
	m[p] = struct{}{}
}

func (t *meshTracer) Prune(p peer.ID, topic string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.mesh[topic], p)
}

// OnClosedOutboundStream: the router drops a peer from every mesh when its
// stream closes, without Prune events.
func (t *meshTracer) OnClosedOutboundStream(p peer.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range t.mesh {
		delete(m, p)
	}
}

// Leave: the router prunes every mesh peer of the topic (with events), then
// forgets the topic.
func (t *meshTracer) Leave(topic string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.mesh, topic)
}

func (t *meshTracer) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (t *meshTracer) Join(string)                              {}
func (t *meshTracer) ValidateMessage(*pubsub.Message)          {}
func (t *meshTracer) DeliverMessage(*pubsub.Message)           {}
func (t *meshTracer) RejectMessage(*pubsub.Message, string)    {}
func (t *meshTracer) DuplicateMessage(*pubsub.Message)         {}
func (t *meshTracer) ThrottlePeer(peer.ID)                     {}
func (t *meshTracer) RecvRPC(*pubsub.RPC)                      {}
func (t *meshTracer) SendRPC(*pubsub.RPC, peer.ID)             {}
func (t *meshTracer) DropRPC(*pubsub.RPC, peer.ID)             {}
func (t *meshTracer) UndeliverableMessage(*pubsub.Message)     {}
