package gossip

import (
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
)

// libp2p resource limits (docs/protocol/gossip.md, "Limits"). go-libp2p's
// resource manager bounds streams and memory for the whole host, per peer,
// per protocol and per protocol and peer; on top of its scaled defaults the
// Tenzro protocols get explicit bounds, so that one peer (any fresh
// identity: peers are not authenticated beyond their key) holds at most a
// bounded share of each:
//
//	protocol          inbound streams   per peer   memory per peer
//	blob stream                 64          4           16 MiB
//	nonce, chain info           64          4            1 MiB
//
// and the node's own serve slots (blob.go) cap what is served at once. A
// connection manager trims connections above connHigh down to connLow,
// oldest unprotected first (boot nodes are protected).
const (
	protoInbound      = 64
	protoInboundPeer  = 4
	blobMemoryPeer    = 16 << 20
	controlMemoryPeer = 1 << 20
	connLow, connHigh = 96, 160
	connGrace         = time.Minute
)

func newLimits(boot []peer.AddrInfo) (network.ResourceManager, *connmgr.BasicConnMgr, error) {
	scaling := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&scaling)
	for _, p := range []struct {
		id  string
		mem int64
	}{{BlobProtocol, blobMemoryPeer}, {NonceProtocol, controlMemoryPeer}, {ChainInfoProtocol, controlMemoryPeer}} {
		scaling.AddProtocolLimit(protocol.ID(p.id),
			rcmgr.BaseLimit{Streams: 2 * protoInbound, StreamsInbound: protoInbound, StreamsOutbound: protoInbound, Memory: 64 << 20},
			rcmgr.BaseLimitIncrease{})
		scaling.AddProtocolPeerLimit(protocol.ID(p.id),
			rcmgr.BaseLimit{Streams: 4 * protoInboundPeer, StreamsInbound: protoInboundPeer, StreamsOutbound: 2 * protoInboundPeer, Memory: p.mem},
			rcmgr.BaseLimitIncrease{})
	}
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(scaling.AutoScale()))
	if err != nil {
		return nil, nil, fmt.Errorf("resource manager: %w", err)
	}
	cm, err := connmgr.NewConnManager(connLow, connHigh, connmgr.WithGracePeriod(connGrace))
	if err != nil {
		return nil, nil, fmt.Errorf("connection manager: %w", err)
	}
	for _, b := range boot {
		cm.Protect(b.ID, "boot")
	}
	return rm, cm, nil
}
