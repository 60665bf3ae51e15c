package gossip

import (
	"sort"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// MaxProviderHint bounds a provider hint (the chain's limit on a record's
// provider field).
const MaxProviderHint = 256

// ProviderHint is what this node records as the provider of the blobs it
// receives (a submission record's provider): its listen multiaddrs with
// /p2p/<peer id>, comma-separated, public addresses first, then private,
// then loopback, as many as fit in MaxProviderHint bytes; any node can
// dial it from the hint without having met it. With no address that fits,
// the bare peer id.
func (n *Node) ProviderHint() string {
	addrs := n.h.Addrs()
	rank := func(a ma.Multiaddr) int {
		switch {
		case manet.IsPublicAddr(a):
			return 0
		case manet.IsPrivateAddr(a):
			return 1
		case manet.IsIPLoopback(a):
			return 2
		}
		return 3
	}
	sort.SliceStable(addrs, func(i, j int) bool { return rank(addrs[i]) < rank(addrs[j]) })
	var parts []string
	size := 0
	for _, a := range addrs {
		s := a.String() + "/p2p/" + n.h.ID().String()
		if size+len(s)+len(parts) > MaxProviderHint {
			continue
		}
		parts = append(parts, s)
		size += len(s)
	}
	if len(parts) == 0 {
		return n.PeerID()
	}
	return strings.Join(parts, ",")
}

// ResolveProvider reads a provider hint (ProviderHint's form, or a bare
// peer id): the addresses it names are added to the peer store for a
// while, so the peer can be dialled; it returns the peer ids named, in
// order, without this node's own. Parts that do not parse are skipped (a
// hint is not signed and may be wrong).
func (n *Node) ResolveProvider(hint string) []string {
	var out []string
	seen := map[peer.ID]bool{n.h.ID(): true}
	for _, part := range strings.Split(hint, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		var id peer.ID
		if strings.HasPrefix(part, "/") {
			ai, err := peer.AddrInfoFromString(part)
			if err != nil {
				continue
			}
			n.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
			id = ai.ID
		} else {
			var err error
			if id, err = peer.Decode(part); err != nil {
				continue
			}
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id.String())
		}
	}
	return out
}

// ConnectedPeerIDs lists the peers this node has a connection to.
func (n *Node) ConnectedPeerIDs() []string {
	ps := n.h.Network().Peers()
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
