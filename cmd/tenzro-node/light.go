package main

// light.go: a light client joins a network by itself. Started with
// --role light-client and --boot-nodes (no --home), it asks the boot nodes
// over libp2p for the network's genesis and CometBFT address
// (gossip.ChainInfoProtocol), checks the genesis against --genesis or
// --genesis-hash (or trusts it on first use), and writes a non-validator
// home in <data-dir>/chain that later starts resume.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/rpc/gossip"
	"github.com/tenzro/train/wire"
)

// maxBootAsks bounds how many boot nodes a light client asks for the chain.
const maxBootAsks = 8

// lightHome is the chain home of a light client started without --home.
func lightHome(cfg Config) string { return filepath.Join(cfg.DataDir, "chain") }

// isLight says whether the node joins a network from its boot nodes (a
// light client without --home).
func isLight(cfg Config) bool { return cfg.Role == "light" && !cfg.Dev && cfg.Home == "" }

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

// bootstrapLight writes a light client's home from its boot nodes: it asks
// each (at most maxBootAsks) for its chain, keeps the answers whose genesis
// is the pinned one (or, unpinned, the first answer's: trust on first use,
// and every other answer must agree), and joins with their CometBFT
// addresses as persistent peers. Nothing is written when no boot node gives
// an acceptable genesis.
func bootstrapLight(ctx context.Context, gn *gossip.Node, cfg Config, home string, log *slog.Logger) error {
	pin, from, err := pinnedHash(cfg)
	if err != nil {
		return err
	}
	var (
		errs    []error
		genesis []byte
		chainID string
		peers   []string
		hash    wire.Hash
	)
	for i, b := range cfg.BootNodes {
		if i == maxBootAsks {
			break
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ci, remote, err := gn.RequestChainInfo(cctx, b)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
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
		case genesis == nil:
			genesis, chainID, hash = ci.Genesis, ci.ChainID, h
		case h != hash:
			return fmt.Errorf("boot nodes disagree on the network: %s serves chain %s (genesis hash %s), an earlier one chain %s (%s): pin one with --genesis-hash",
				b, ci.ChainID, h, chainID, hash)
		}
		peers = append(peers, ci.ChainPeer(remote))
	}
	if genesis == nil {
		return fmt.Errorf("light client: no boot node gave a network to join: %w", errors.Join(errs...))
	}
	n, err := chain.JoinNode(chain.JoinOptions{Home: home, Genesis: genesis, Peers: peers, BootNodes: cfg.BootNodes})
	if err != nil {
		return fmt.Errorf("light client: %w", err)
	}
	if pin == nil {
		log.Warn("trusting the boot node's genesis on first use: pin the network with --genesis-hash (or --genesis FILE) so that another one is refused",
			"chain_id", chainID, "genesis_hash", hash.String())
	} else {
		log.Info("the boot node's genesis is the pinned one", "chain_id", chainID, "genesis_hash", hash.String(), "pinned_by", from)
	}
	log.Info("light client home written: it follows the chain without voting; later starts resume it", "home", home, "chain_peers", peers,
		"chain_p2p", n.P2PAddr, "chain_rpc", "http://"+n.RPCAddr)
	return nil
}
