package main

// light.go: a node joins a network by itself. Started with --role full or
// --role light-client and --boot-nodes (no --home), it asks the boot nodes
// over libp2p for the network's genesis and CometBFT addresses
// (gossip.ChainInfoProtocol) and checks the genesis against --genesis or
// --genesis-hash (or trusts it on first use). A full node writes a
// non-validator home in <data-dir>/chain (it replays every block); a light
// client writes <data-dir>/light (the genesis and its full nodes' CometBFT
// RPC) and follows headers only (chain.Light). Later starts resume either.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cometbft/cometbft/types"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/rpc/gossip"
	"github.com/tenzro/train/wire"
)

// maxBootAsks bounds how many boot nodes a light client asks for the chain.
const maxBootAsks = 8

// lightHome is the chain home of a full node started without --home.
func lightHome(cfg Config) string { return filepath.Join(cfg.DataDir, "chain") }

// isLight says whether the node joins a network from its boot nodes as a
// full node (a replica that does not vote: --role full without --home).
func isLight(cfg Config) bool { return cfg.Role == "full" && !cfg.Dev && cfg.Home == "" }

// isHeaderLight says whether the node is a light client (--role
// light-client without --home): headers and proofs, no replica.
func isHeaderLight(cfg Config) bool { return cfg.Role == "light" && !cfg.Dev && cfg.Home == "" }

// lightDir is where a light client keeps what it learnt at its first start.
func lightDir(cfg Config) string { return filepath.Join(cfg.DataDir, "light") }

// pinnedHash is the genesis hash the operator pinned (--genesis-hash, or
// --genesis FILE's hash; both must agree), nil when none.
func pinnedHash(cfg Config) (*wire.Hash, string, error) {
	var pin *wire.Hash
	from := ""
	if cfg.GenesisHash != "" {
		h, err := wire.ParseHash(cfg.GenesisHash)
		if err != nil {
			return nil, "", usageError{fmt.Errorf("--genesis-hash %q: %w", cfg.GenesisHash, err)}
		}
		pin, from = &h, "--genesis-hash"
	}
	if cfg.Genesis != "" {
		h, err := chain.GenesisFileHash(cfg.Genesis)
		if err != nil {
			return nil, "", usageError{fmt.Errorf("--genesis %s: %w", cfg.Genesis, err)}
		}
		if pin != nil && *pin != h {
			return nil, "", usageError{fmt.Errorf("--genesis %s has hash %s, --genesis-hash says %s", cfg.Genesis, h, *pin)}
		}
		pin, from = &h, "--genesis "+cfg.Genesis
	}
	return pin, from, nil
}

// checkPin refuses a home whose genesis is not the pinned one.
func checkPin(cfg Config, home string) error {
	pin, from, err := pinnedHash(cfg)
	if err != nil || pin == nil {
		return err
	}
	h, err := chain.HomeGenesisHash(home)
	if err != nil {
		return err
	}
	if h != *pin {
		return fmt.Errorf("the chain home %s follows the network whose genesis hash is %s, not %s (%s)", home, h, *pin, from)
	}
	return nil
}

// joined is what the boot nodes said about the network.
type joined struct {
	genesis []byte
	chainID string
	hash    wire.Hash
	peers   []string // CometBFT persistent peers (id@host:port)
	rpcs    []string // CometBFT RPC URLs (http://host:port)
}

// askBootNodes asks each boot node (at most maxBootAsks) for its chain and
// keeps the answers whose genesis is the pinned one (or, unpinned, the
// first answer's: trust on first use, and every other answer must agree).
func askBootNodes(ctx context.Context, gn *gossip.Node, cfg Config, log *slog.Logger, what string) (*joined, error) {
	pin, from, err := pinnedHash(cfg)
	if err != nil {
		return nil, err
	}
	var errs []error
	var j *joined
	for i, b := range cfg.BootNodes {
		if i == maxBootAsks {
			break
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ci, remote, err := gn.RequestChainInfo(cctx, b)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			errs = append(errs, err)
			continue
		}
		if _, err := chain.CheckGenesis(ci.Genesis, ci.ChainID); err != nil {
			errs = append(errs, fmt.Errorf("boot node %s: %w", b, err))
			continue
		}
		h, err := chain.GenesisHash(ci.Genesis)
		if err != nil {
			errs = append(errs, fmt.Errorf("boot node %s: %w", b, err))
			continue
		}
		switch {
		case pin != nil && h != *pin:
			errs = append(errs, fmt.Errorf("boot node %s serves chain %s whose genesis hash is %s, not the pinned %s (%s)", b, ci.ChainID, h, *pin, from))
			continue
		case j == nil:
			j = &joined{genesis: ci.Genesis, chainID: ci.ChainID, hash: h}
		case h != j.hash:
			return nil, fmt.Errorf("boot nodes disagree on the network: %s serves chain %s (genesis hash %s), an earlier one chain %s (%s): pin one with --genesis-hash",
				b, ci.ChainID, h, j.chainID, j.hash)
		}
		j.peers = append(j.peers, ci.ChainPeer(remote))
		if u := ci.ChainRPC(remote); u != "" {
			j.rpcs = append(j.rpcs, u)
		}
	}
	if j == nil {
		return nil, fmt.Errorf("%s: no boot node gave a network to join: %w", what, errors.Join(errs...))
	}
	if pin == nil {
		log.Warn("trusting the boot node's genesis on first use: pin the network with --genesis-hash (or --genesis FILE) so that another one is refused",
			"chain_id", j.chainID, "genesis_hash", j.hash.String())
	} else {
		log.Info("the boot node's genesis is the pinned one", "chain_id", j.chainID, "genesis_hash", j.hash.String(), "pinned_by", from)
	}
	return j, nil
}

// bootstrapLight writes a full node's home from its boot nodes
// (askBootNodes) and joins with their CometBFT addresses as persistent
// peers. Nothing is written when no boot node gives an acceptable genesis.
func bootstrapLight(ctx context.Context, gn *gossip.Node, cfg Config, home string, log *slog.Logger) error {
	j, err := askBootNodes(ctx, gn, cfg, log, "full node")
	if err != nil {
		return err
	}
	n, err := chain.JoinNode(chain.JoinOptions{Home: home, Genesis: j.genesis, Peers: j.peers, BootNodes: cfg.BootNodes})
	if err != nil {
		return fmt.Errorf("full node: %w", err)
	}
	log.Info("full node home written: it replays the chain without voting; later starts resume it", "home", home, "chain_peers", j.peers,
		"chain_p2p", n.P2PAddr, "chain_rpc", "http://"+n.RPCAddr)
	return nil
}

// lightConfig is <data-dir>/light/light.json: the full nodes a light
// client follows (CometBFT RPC URLs) and its libp2p boot nodes.
type lightConfig struct {
	Primary   string   `json:"primary"`
	Witnesses []string `json:"witnesses,omitempty"`
	BootNodes []string `json:"boot_nodes,omitempty"`
}

const (
	lightConfigFile  = "light.json"
	lightGenesisFile = "genesis.json"
	maxLightConfig   = 64 << 10
)

// loadLightHome reads a light client's home; ok false when there is none.
func loadLightHome(cfg Config) (lc *lightConfig, genesis []byte, ok bool, err error) {
	dir := lightDir(cfg)
	raw, err := os.ReadFile(filepath.Join(dir, lightConfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("light client home: %w", err)
	}
	if len(raw) > maxLightConfig {
		return nil, nil, false, fmt.Errorf("light client home: %s: %d bytes, limit %d", lightConfigFile, len(raw), maxLightConfig)
	}
	lc = &lightConfig{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(lc); err != nil {
		return nil, nil, false, fmt.Errorf("light client home: %s: %w", lightConfigFile, err)
	}
	if genesis, err = os.ReadFile(filepath.Join(dir, lightGenesisFile)); err != nil {
		return nil, nil, false, fmt.Errorf("light client home: %w", err)
	}
	return lc, genesis, true, nil
}

// startHeaderLight is a light client's chain: at the first start it asks
// the boot nodes for the network and their CometBFT RPC and writes
// <data-dir>/light; then it follows headers from the primary
// (--light-primary, else the first boot node's CometBFT RPC), cross-checked
// by the witnesses (--light-witnesses, else the other boot nodes'), from
// the trust root (--trust-height/--trust-hash, else the primary's latest
// header signed by the genesis validators).
func startHeaderLight(ctx context.Context, gn *gossip.Node, cfg Config, log *slog.Logger) (*chain.Light, *types.GenesisDoc, wire.Hash, error) {
	lc, genesis, ok, err := loadLightHome(cfg)
	if err != nil {
		return nil, nil, wire.Hash{}, err
	}
	if !ok {
		if len(cfg.BootNodes) == 0 {
			return nil, nil, wire.Hash{}, usageError{fmt.Errorf("a light client joins a network through --boot-nodes (a node's libp2p address, /ip4/…/tcp/…/p2p/<peer id>; 'tenzro node info' prints it): %s holds no light client home yet", cfg.DataDir)}
		}
		j, err := askBootNodes(ctx, gn, cfg, log, "light client")
		if err != nil {
			return nil, nil, wire.Hash{}, err
		}
		lc = &lightConfig{BootNodes: cfg.BootNodes}
		if len(j.rpcs) > 0 {
			lc.Primary, lc.Witnesses = j.rpcs[0], j.rpcs[1:]
		}
		b, _ := json.MarshalIndent(lc, "", "  ")
		dir := lightDir(cfg)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, nil, wire.Hash{}, fmt.Errorf("light client home: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, lightGenesisFile), j.genesis, 0o644); err != nil {
			return nil, nil, wire.Hash{}, fmt.Errorf("light client home: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, lightConfigFile), append(b, '\n'), 0o644); err != nil {
			return nil, nil, wire.Hash{}, fmt.Errorf("light client home: %w", err)
		}
		genesis = j.genesis
		log.Info("light client home written: it follows headers and reads state by proofs, without a replica; later starts resume it",
			"dir", dir, "primary", lc.Primary, "witnesses", lc.Witnesses)
	} else if !cfg.bootSet && len(lc.BootNodes) > 0 {
		cfg.BootNodes = lc.BootNodes
	}
	gh, err := chain.GenesisHash(genesis)
	if err != nil {
		return nil, nil, wire.Hash{}, err
	}
	if pin, from, err := pinnedHash(cfg); err != nil {
		return nil, nil, wire.Hash{}, err
	} else if pin != nil && *pin != gh {
		return nil, nil, wire.Hash{}, fmt.Errorf("the light client home %s follows the network whose genesis hash is %s, not %s (%s)", lightDir(cfg), gh, *pin, from)
	}
	gen, err := types.GenesisDocFromJSON(genesis)
	if err != nil {
		return nil, nil, wire.Hash{}, fmt.Errorf("light client home: genesis: %w", err)
	}
	primary, witnesses := lc.Primary, lc.Witnesses
	if cfg.LightPrimary != "" {
		primary, witnesses = cfg.LightPrimary, cfg.LightWitnesses
	} else if len(cfg.LightWitnesses) > 0 {
		witnesses = cfg.LightWitnesses
	}
	if primary == "" {
		return nil, nil, wire.Hash{}, usageError{errors.New("light client: no full node's CometBFT RPC to follow (the boot nodes gave none): give --light-primary http://host:port")}
	}
	var hash []byte
	if cfg.TrustHash != "" {
		if hash, err = hex.DecodeString(cfg.TrustHash); err != nil || len(hash) != 32 {
			return nil, nil, wire.Hash{}, usageError{fmt.Errorf("--trust-hash %q: want 64 hex digits (a block hash)", cfg.TrustHash)}
		}
	}
	if (cfg.TrustHeight == 0) != (hash == nil) {
		return nil, nil, wire.Hash{}, usageError{errors.New("--trust-height and --trust-hash go together (a block the operator trusts)")}
	}
	l, err := chain.StartLight(ctx, chain.LightOptions{Genesis: gen, Primary: primary, Witnesses: witnesses, TrustHeight: cfg.TrustHeight, TrustHash: hash,
		TrustingPeriod: cfg.TrustingPeriod, Store: lightDir(cfg), GenesisHash: gh, Log: log})
	if err != nil {
		return nil, nil, wire.Hash{}, err
	}
	return l, gen, gh, nil
}
