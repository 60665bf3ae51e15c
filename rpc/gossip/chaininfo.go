package gossip

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/tenzro/train/wire"
)

// ChainInfoProtocol is the request/response stream protocol by which a node
// that has no chain home yet (a light client started with --boot-nodes)
// learns the network it joins from a node that has one: the genesis
// document and that node's CometBFT peer address (docs/protocol/gossip.md).
//
//	request:  nothing: the requester closes its write side at once.
//	response: one JSON object ChainInfo, at most MaxChainInfoBytes; then the
//	          server closes the stream.
//
// The requester decodes it strictly (ParseChainInfo) and decides whether to
// trust the genesis (pinned by hash or file, or trusted on first use).
const ChainInfoProtocol = "/tenzro/chain-info/1.0.0"

// Limits of ChainInfoProtocol.
const (
	// MaxGenesisBytes bounds the genesis document a node serves or accepts.
	MaxGenesisBytes = 8 << 20
	// MaxChainInfoBytes bounds a whole response (the genesis in base64 and
	// the small fields).
	MaxChainInfoBytes = MaxGenesisBytes*4/3 + 4<<10
	// MaxChainIDLen is CometBFT's limit on a chain id.
	MaxChainIDLen = 50
)

// chainInfoTimeout bounds one chain-info stream when the caller's context
// has no deadline (and always on the serving side).
const chainInfoTimeout = 30 * time.Second

// ChainInfo is what a node tells a joining node about its chain.
type ChainInfo struct {
	// ChainID is the genesis chain id.
	ChainID string `json:"chain_id"`
	// NodeID is the serving node's CometBFT node id (40 lowercase hex).
	NodeID string `json:"node_id"`
	// P2PAddr is the serving node's CometBFT P2P listen address (host:port);
	// a host that is unspecified (0.0.0.0, ::) means "the address you reached
	// me at" (ChainPeer).
	P2PAddr string `json:"p2p_addr"`
	// Genesis is the genesis document, the bytes of the serving node's
	// genesis.json (base64 in JSON).
	Genesis []byte `json:"genesis"`
	// RPCAddr is the serving node's CometBFT RPC listen address
	// (host:port), optional: what a light client follows headers and reads
	// proofs from (ChainRPC). Absent: the node serves no CometBFT RPC to
	// light clients.
	RPCAddr string `json:"rpc_addr,omitempty"`
}

// ParseChainInfo decodes a ChainInfoProtocol response strictly: one JSON
// object of at most MaxChainInfoBytes with exactly the known members, none
// twice, nothing after it; a chain id of 1..50 printable ASCII characters,
// a 40-hex node id, a host:port P2P address with a port in 1..65535, and a
// non-empty genesis of at most MaxGenesisBytes that is one JSON object. It
// does not judge the genesis (the caller pins or trusts it).
func ParseChainInfo(b []byte) (*ChainInfo, error) {
	if len(b) > MaxChainInfoBytes {
		return nil, fmt.Errorf("chain info: %d bytes, limit %d", len(b), MaxChainInfoBytes)
	}
	if err := wire.CheckStrictJSON(b, wire.StrictJSONOptions{}); err != nil {
		return nil, fmt.Errorf("chain info: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var ci ChainInfo
	if err := dec.Decode(&ci); err != nil {
		return nil, fmt.Errorf("chain info: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("chain info: trailing data after the JSON object")
	}
	if err := ci.check(); err != nil {
		return nil, fmt.Errorf("chain info: %w", err)
	}
	return &ci, nil
}

func (ci *ChainInfo) check() error {
	if len(ci.ChainID) == 0 || len(ci.ChainID) > MaxChainIDLen {
		return fmt.Errorf("chain_id: %d characters, want 1..%d", len(ci.ChainID), MaxChainIDLen)
	}
	for _, c := range []byte(ci.ChainID) {
		if c < 0x21 || c > 0x7e {
			return fmt.Errorf("chain_id %q: want printable ASCII without spaces", ci.ChainID)
		}
	}
	if id, err := hex.DecodeString(ci.NodeID); err != nil || len(id) != 20 || hex.EncodeToString(id) != ci.NodeID {
		return fmt.Errorf("node_id %q: want 40 lowercase hex digits", ci.NodeID)
	}
	host, port, err := net.SplitHostPort(ci.P2PAddr)
	if err != nil {
		return fmt.Errorf("p2p_addr %q: %w", ci.P2PAddr, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 || strconv.FormatUint(p, 10) != port {
		return fmt.Errorf("p2p_addr %q: port %q: want 1..65535", ci.P2PAddr, port)
	}
	if host == "" || len(host) > 253 {
		return fmt.Errorf("p2p_addr %q: want a host", ci.P2PAddr)
	}
	if ci.RPCAddr != "" {
		if err := checkHostPort(ci.RPCAddr); err != nil {
			return fmt.Errorf("rpc_addr %q: %w", ci.RPCAddr, err)
		}
	}
	if len(ci.Genesis) == 0 || len(ci.Genesis) > MaxGenesisBytes {
		return fmt.Errorf("genesis: %d bytes, want 1..%d", len(ci.Genesis), MaxGenesisBytes)
	}
	g := bytes.TrimSpace(ci.Genesis)
	if len(g) == 0 || g[0] != '{' || !json.Valid(g) {
		return errors.New("genesis: not a JSON object")
	}
	return nil
}

// ChainPeer is the serving node's CometBFT persistent-peer address
// (id@host:port); an unspecified host is replaced by remoteIP, the address
// the requester reached the node at over libp2p.
func (ci *ChainInfo) ChainPeer(remoteIP string) string {
	host, port, _ := net.SplitHostPort(ci.P2PAddr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() && remoteIP != "" {
		host = remoteIP
	}
	return ci.NodeID + "@" + net.JoinHostPort(host, port)
}

// ChainRPC is the serving node's CometBFT RPC URL (http://host:port), ""
// when it gave none; an unspecified host is replaced by remoteIP.
func (ci *ChainInfo) ChainRPC(remoteIP string) string {
	if ci.RPCAddr == "" {
		return ""
	}
	host, port, _ := net.SplitHostPort(ci.RPCAddr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() && remoteIP != "" {
		host = remoteIP
	}
	return "http://" + net.JoinHostPort(host, port)
}

func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 || strconv.FormatUint(p, 10) != port {
		return fmt.Errorf("port %q: want 1..65535", port)
	}
	if host == "" || len(host) > 253 {
		return errors.New("want a host")
	}
	return nil
}

func (n *Node) serveChainInfo(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(chainInfoTimeout))
	// The request is empty: anything before EOF is refused.
	var one [1]byte
	if k, err := io.ReadFull(s, one[:]); k != 0 || !errors.Is(err, io.EOF) {
		n.log.Debug("chain info request refused", "peer", s.Conn().RemotePeer(), "err", err)
		_ = s.Reset()
		return
	}
	select {
	case n.ctrlSem <- struct{}{}:
		defer func() { <-n.ctrlSem }()
	default:
		_ = s.Reset()
		return
	}
	ci, err := n.hd.ChainInfo()
	var b []byte
	if err == nil {
		if err = ci.check(); err == nil {
			b, err = json.Marshal(ci)
		}
	}
	if err != nil {
		n.log.Warn("chain info not served", "peer", s.Conn().RemotePeer(), "err", err)
		_ = s.Reset()
		return
	}
	if _, err := s.Write(b); err != nil {
		n.log.Debug("chain info send failed", "peer", s.Conn().RemotePeer(), "err", err)
		_ = s.Reset()
	}
}

// RequestChainInfo asks the peer at addr (a multiaddr ending in
// /p2p/<peer id>) for its chain over ChainInfoProtocol. It returns the
// strictly decoded answer and the IP address the peer was reached at (for
// ChainPeer).
func (n *Node) RequestChainInfo(ctx context.Context, addr string) (*ChainInfo, string, error) {
	ai, err := peer.AddrInfoFromString(addr)
	if err != nil {
		return nil, "", fmt.Errorf("gossip: chain info from %q: want a multiaddr ending in /p2p/<peer id>: %w", addr, err)
	}
	if err := n.h.Connect(ctx, *ai); err != nil {
		return nil, "", fmt.Errorf("gossip: chain info: connect %s: %w", ai.ID, err)
	}
	s, done, err := n.openStream(ctx, ai.ID, ChainInfoProtocol, chainInfoTimeout)
	if err != nil {
		return nil, "", fmt.Errorf("gossip: chain info from %s: %w", ai.ID, err)
	}
	defer done()
	remote := ""
	if ip, err := s.Conn().RemoteMultiaddr().ValueForProtocol(ma.P_IP4); err == nil {
		remote = ip
	} else if ip, err := s.Conn().RemoteMultiaddr().ValueForProtocol(ma.P_IP6); err == nil {
		remote = ip
	}
	if err := s.CloseWrite(); err != nil {
		return nil, "", fmt.Errorf("gossip: chain info from %s: send request: %w", ai.ID, ctxErr(ctx, err))
	}
	b, err := io.ReadAll(io.LimitReader(s, MaxChainInfoBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("gossip: chain info from %s: read response: %w", ai.ID, ctxErr(ctx, err))
	}
	ci, err := ParseChainInfo(b)
	if err != nil {
		_ = s.Reset()
		return nil, "", fmt.Errorf("gossip: chain info from %s: %w", ai.ID, err)
	}
	return ci, remote, nil
}
