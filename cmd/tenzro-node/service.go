package main

import (
	"context"

	"github.com/tenzro/train/rpc/gossip"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// nodeService is what the daemon serves over JSON-RPC: the node's
// syncer.Service over the chain, plus what only the daemon knows (its
// libp2p identity and addresses, and how to join its chain).
type nodeService struct {
	*syncer.Node
	gn    *gossip.Node
	chain func() wire.ChainInfo
}

// Info adds the node's peer id, full listen multiaddrs (what other nodes
// pass as --boot-nodes) and its chain (what `tenzro-node init` needs to
// follow it: the chain id and this node as a persistent peer).
func (s nodeService) Info(ctx context.Context) wire.NodeInfo {
	i := s.Node.Info(ctx)
	i.PeerID, i.Listen = s.gn.PeerID(), s.gn.Addrs()
	ci := s.chain()
	i.Chain = &ci
	return i
}
