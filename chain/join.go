package chain

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	cmtcfg "github.com/cometbft/cometbft/config"
	"github.com/cometbft/cometbft/p2p"
	"github.com/cometbft/cometbft/privval"
	"github.com/cometbft/cometbft/types"
	"github.com/gowebpki/jcs"

	"github.com/tenzro/train/wire"
)

// GenesisHash identifies a network: SHA-256 of its genesis document in
// canonical JSON (RFC 8785), so a copy re-indented or with its members in
// another order is the same network. A light client pins it
// (`--genesis-hash`) or prints it when it trusts a boot node's genesis on
// first use.
func GenesisHash(raw []byte) (wire.Hash, error) {
	canon, err := jcs.Transform(bytes.TrimSpace(raw))
	if err != nil {
		return wire.Hash{}, fmt.Errorf("genesis: not canonicalizable JSON: %w", err)
	}
	return sha256.Sum256(canon), nil
}

// GenesisFileHash is GenesisHash of a genesis file.
func GenesisFileHash(path string) (wire.Hash, error) {
	raw, err := readCapped(path, maxGenesisFile)
	if err != nil {
		return wire.Hash{}, err
	}
	return GenesisHash(raw)
}

// maxGenesisFile bounds a genesis document read or accepted from a peer.
const maxGenesisFile = 8 << 20

func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw := make([]byte, 0, 64<<10)
	buf := bytes.NewBuffer(raw)
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(buf.Len()) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	return buf.Bytes(), nil
}

// CheckGenesis parses a genesis document as CometBFT does (and completes
// its defaults), and its app state as the application does; chainID, when
// set, must be its chain id.
func CheckGenesis(raw []byte, chainID string) (*types.GenesisDoc, error) {
	if len(raw) > maxGenesisFile {
		return nil, fmt.Errorf("genesis: %d bytes, limit %d", len(raw), maxGenesisFile)
	}
	gen, err := types.GenesisDocFromJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("genesis: %w", err)
	}
	if chainID != "" && gen.ChainID != chainID {
		return nil, fmt.Errorf("genesis: chain id %q, the node says %q", gen.ChainID, chainID)
	}
	if _, err := ParseGenesisState(gen.AppState); err != nil {
		return nil, fmt.Errorf("genesis: %w", err)
	}
	return gen, nil
}

// JoinOptions configures JoinNode.
type JoinOptions struct {
	Home string
	// Genesis is the network's genesis document, written to the home as it
	// is (its GenesisHash is the network's).
	Genesis []byte
	// Peers are the CometBFT persistent peers (id@host:port).
	Peers []string
	// Moniker names the node (default: the home's parent directory name).
	Moniker string
	// Host is where the node's CometBFT P2P and RPC listen on free ports
	// picked now (default 127.0.0.1): a light client dials out to its
	// peers and needs no inbound connections.
	Host string
	// BootNodes are the libp2p multiaddrs the node dials when its flags
	// name none (NodeConfig.BootNodes).
	BootNodes []string
}

// JoinNode writes the home of a non-validator node that follows the network
// of opts.Genesis from opts.Peers (as InitNode, from a genesis served by a
// peer rather than a file): a fresh CometBFT node key, a validator key in
// no validator set, the genesis bytes, and NodeConfigFile with free ports
// on Host and the libp2p boot nodes. The home must not exist or be empty.
// A failure leaves no home behind.
func JoinNode(o JoinOptions) (n *TestnetNode, err error) {
	if o.Home == "" {
		return nil, errors.New("join: the home is empty")
	}
	if len(o.Peers) == 0 {
		return nil, errors.New("join: no peer to sync from")
	}
	for _, p := range o.Peers {
		if _, err := p2p.NewNetAddressString(p); err != nil {
			return nil, fmt.Errorf("join: peer %q: %w (want id@host:port)", p, err)
		}
	}
	if _, err := CheckGenesis(o.Genesis, ""); err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Moniker == "" {
		o.Moniker = filepath.Base(filepath.Dir(filepath.Clean(o.Home)))
	}
	if ents, err := os.ReadDir(o.Home); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("join: %s exists and is not empty", o.Home)
	}
	ports, err := pickPorts(o.Host, 0, 2)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(o.Home)
		}
	}()
	c := cmtcfg.DefaultConfig()
	c.SetRoot(o.Home)
	for _, d := range []string{"config", "data"} {
		if err := os.MkdirAll(filepath.Join(o.Home, d), 0o700); err != nil {
			return nil, fmt.Errorf("join: %w", err)
		}
	}
	privval.GenFilePV(c.PrivValidatorKeyFile(), c.PrivValidatorStateFile()).Save()
	nk, err := p2p.LoadOrGenNodeKey(c.NodeKeyFile())
	if err != nil {
		return nil, fmt.Errorf("join: node key: %w", err)
	}
	if err := os.WriteFile(c.GenesisFile(), o.Genesis, 0o600); err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	nc := NodeConfig{Moniker: o.Moniker, P2PAddr: net.JoinHostPort(o.Host, fmt.Sprint(ports[0])), RPCAddr: net.JoinHostPort(o.Host, fmt.Sprint(ports[1])),
		PersistentPeers: o.Peers, TimeoutCommitMs: 0, BootNodes: o.BootNodes}
	// Written last, by rename: its presence marks a complete home.
	tmp := filepath.Join(o.Home, "config", ".tenzro-chain.json.tmp")
	raw, _ := json.MarshalIndent(nc, "", "  ")
	if err := os.WriteFile(tmp, append(raw, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(o.Home, NodeConfigFile)); err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	return &TestnetNode{Home: o.Home, NodeID: string(nk.ID()), P2PAddr: nc.P2PAddr, RPCAddr: nc.RPCAddr}, nil
}

// HomeExists says whether home holds a node home (its NodeConfigFile).
func HomeExists(home string) bool {
	_, err := os.Stat(filepath.Join(home, NodeConfigFile))
	return err == nil
}

// HomeGenesisHash is GenesisHash of a home's genesis file.
func HomeGenesisHash(home string) (wire.Hash, error) {
	c := cmtcfg.DefaultConfig()
	c.SetRoot(home)
	return GenesisFileHash(c.GenesisFile())
}
