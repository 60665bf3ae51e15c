package gossip

import (
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

func TestMeshTracer(t *testing.T) {
	const p1, p2 = peer.ID("p1"), peer.ID("p2")
	tests := []struct {
		name  string
		apply func(*meshTracer)
		want  map[string][]peer.ID
	}{
		{"graft", func(m *meshTracer) { m.Graft(p1, "a"); m.Graft(p2, "a"); m.Graft(p1, "b") },
			map[string][]peer.ID{"a": {p1, p2}, "b": {p1}}},
		{"prune", func(m *meshTracer) { m.Graft(p1, "a"); m.Graft(p2, "a"); m.Prune(p1, "a"); m.Prune(p1, "none") },
			map[string][]peer.ID{"a": {p2}}},
		{"peer gone", func(m *meshTracer) {
			m.Graft(p1, "a")
			m.Graft(p1, "b")
			m.Graft(p2, "b")
			m.OnClosedOutboundStream(p1)
		},
			map[string][]peer.ID{"a": nil, "b": {p2}}},
		{"leave", func(m *meshTracer) { m.Graft(p1, "a"); m.Graft(p1, "b"); m.Leave("a"); m.Prune(p1, "a") },
			map[string][]peer.ID{"a": nil, "b": {p1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMeshTracer()
			tc.apply(m)
			for topic, want := range tc.want {
				var ws []string
				for _, p := range want {
					ws = append(ws, p.String())
				}
				got := m.peers(topic)
				slices.Sort(got)
				slices.Sort(ws)
				if !slices.Equal(got, ws) && !(len(got) == 0 && len(ws) == 0) {
					t.Fatalf("topic %s: got %v, want %v", topic, got, ws)
				}
			}
		})
	}
}
