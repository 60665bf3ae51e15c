package gossip

import "github.com/libp2p/go-libp2p/core/host"

// Host is the node's libp2p host, for protocols that share it (bitswap for
// datasets). Closing the Node closes it.
func (n *Node) Host() host.Host { return n.h }
