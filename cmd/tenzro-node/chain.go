package main

// chain.go wires the replicated chain (package chain) into the daemon: the
// `testnet` subcommand and the `--home` start path. Registered by one line
// in execute.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	libp2pcrypto "github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// registerChain adds `tenzro-node testnet` and `tenzro-node init`.
func registerChain(root *cobra.Command, stdout, _ io.Writer) {
	root.AddCommand(newTestnetCmd(stdout), newInitCmd(stdout))
}

func newInitCmd(stdout io.Writer) *cobra.Command {
	var o chain.InitOptions
	cmd := &cobra.Command{
		Use:   "init --home D --genesis FILE --peers ID@HOST:PORT[,...]",
		Short: "Write the home of a non-validator full node that syncs from peers",
		Long: `init writes a full node's home: a fresh node key, a validator key that is in no
validator set (the node follows the chain without voting), a copy of the network's
genesis.json and config/tenzro-chain.json with its listen addresses and persistent
peers. Start it with 'tenzro-node --home D': it replays every block from its peers
and answers reads ('tenzro chain …' with --node) from its own replica.`,
		Example: `  tenzro-node init --home /tmp/full --genesis /tmp/tn/node0/config/genesis.json \
    --peers 29fe4d9f42761d33638c1c9cea547d5fcf10718c@127.0.0.1:26656 --p2p-addr 127.0.0.1:26700 --rpc-addr 127.0.0.1:26701`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(_ *cobra.Command, _ []string) error {
			n, err := chain.InitNode(o)
			if err != nil {
				return usageError{err}
			}
			fmt.Fprintf(stdout, "wrote full node home %s (id %s, rpc http://%s, p2p %s); start it with: tenzro-node --home %s\n", n.Home, n.NodeID, n.RPCAddr, n.P2PAddr, n.Home)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Home, "home", "", "home directory to write (must not exist or be empty)")
	f.StringVar(&o.Genesis, "genesis", "", "the network's genesis.json")
	f.StringSliceVar(&o.Peers, "peers", nil, "comma-separated persistent peers, id@host:port (a validator's id is printed by 'tenzro-node testnet')")
	f.StringVar(&o.P2PAddr, "p2p-addr", "127.0.0.1:26656", "P2P listen address host:port")
	f.StringVar(&o.RPCAddr, "rpc-addr", "127.0.0.1:26657", "CometBFT RPC listen address host:port")
	f.StringVar(&o.Moniker, "moniker", "", "node name (default: the home's base name)")
	for _, r := range []string{"home", "genesis", "peers"} {
		_ = cmd.MarkFlagRequired(r)
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return cmd
}

func newTestnetCmd(stdout io.Writer) *cobra.Command {
	var (
		opts    chain.TestnetOptions
		allocs  []string
		blockMs time.Duration
		window  int64
		haltGap int64
	)
	cmd := &cobra.Command{
		Use:   "testnet --validators N --dir D [--alloc DID=AMOUNT]...",
		Short: "Write the homes and genesis of a local N-validator chain",
		Long: `testnet writes N validator homes (D/node0 … D/node{N-1}: CometBFT node and
validator keys, the shared genesis, and each node's listen addresses and peers in
config/tenzro-chain.json) and one genesis whose app state holds the allocations.
Allocations are the only way funds exist on a chain without --dev: there is no
faucet. Start each validator with 'tenzro-node --home D/nodeI'.

Ports: node i listens on BASE+2i (P2P) and BASE+2i+1 (CometBFT RPC);
--base-port 0 takes free ports from the kernel.`,
		Example: `  tenzro-node testnet --validators 4 --dir /tmp/tn \
    --alloc did:tenzro:human:z6Mk...=1000000000000000000000
  tenzro-node --home /tmp/tn/node0`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, a := range allocs {
				d, amt, ok := strings.Cut(a, "=")
				if !ok {
					return usageError{fmt.Errorf("--alloc %q: want DID=AMOUNT (attoTNZO)", a)}
				}
				opts.Allocs = append(opts.Allocs, chain.GenesisAccount{DID: strings.TrimSpace(d), Balance: strings.TrimSpace(amt)})
			}
			opts.TimeoutCommit = blockMs
			opts.Params = &machine.GenesisParams{HaltGapMs: haltGap}
			if haltGap != 0 && (haltGap < machine.MinHaltGapMs || haltGap > machine.MaxHaltGapMs) {
				return usageError{fmt.Errorf("--halt-gap-ms %d: want 0 (off) or %d..%d", haltGap, machine.MinHaltGapMs, machine.MaxHaltGapMs)}
			}
			if window >= 0 {
				if window > wire.MaxChallengeWindowBlocks {
					return usageError{fmt.Errorf("--challenge-window-blocks %d: at most %d", window, int64(wire.MaxChallengeWindowBlocks))}
				}
				opts.Params.ChallengeWindowBlocks = &window
			}
			nodes, err := chain.WriteTestnet(opts)
			if err != nil {
				return usageError{err}
			}
			if err := linkLibp2p(nodes); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "wrote %d validator homes and one genesis (chain %s, %d allocations):\n", len(nodes), orDefault(opts.ChainID, "tenzro-testnet"), len(opts.Allocs))
			for _, n := range nodes {
				fmt.Fprintf(stdout, "  %s  chain rpc http://%s  p2p %s  id %s", n.Home, n.RPCAddr, n.P2PAddr, n.NodeID)
				if n.NodeDID != "" {
					fmt.Fprintf(stdout, "  syncer candidate %s", n.NodeDID)
				}
				fmt.Fprintln(stdout)
			}
			if len(nodes) > 0 {
				if gh, err := chain.HomeGenesisHash(nodes[0].Home); err == nil {
					fmt.Fprintf(stdout, "genesis hash %s (light clients pin it: tenzro-node --role light-client --boot-nodes <a node's libp2p address> --genesis-hash %s)\n", gh, gh)
				}
			}
			fmt.Fprintf(stdout, "start each with: tenzro-node --home <home> (its JSON-RPC and libp2p addresses are in <home>/%s)\n", chain.NodeConfigFile)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Validators, "validators", 4, "number of validators")
	f.StringVar(&opts.Dir, "dir", "", "output directory (must not exist or be empty)")
	f.StringArrayVar(&allocs, "alloc", nil, "genesis allocation DID=AMOUNT in attoTNZO (repeatable)")
	f.StringVar(&opts.ChainID, "chain-id", "tenzro-testnet", "chain id")
	f.StringVar(&opts.Host, "host", "127.0.0.1", "address every node listens on and dials")
	f.IntVar(&opts.BasePort, "base-port", 26656, "first port (node i: BASE+2i P2P, BASE+2i+1 RPC); 0 = free ports")
	f.DurationVar(&blockMs, "block-time", time.Second, "block interval (CometBFT timeout_commit)")
	f.StringVar(&opts.CandidateStake, "candidate-stake", "1000000000000000000", "genesis syncer stake of each validator's node key (written to <home>/node/node.key); empty: no candidates at genesis")
	f.Int64Var(&haltGap, "halt-gap-ms", chain.DefaultHaltGapMs, "a block more than this many ms after the previous one follows a halt: running rounds' deadlines and syncer turns skip the halt (genesis params halt_gap_ms; 0: off, deadlines count every ms of block time)")
	f.Int64Var(&window, "challenge-window-blocks", -1, "the chain's default challenge window for runs whose spec sets none (genesis params; -1: the protocol default, 600 blocks; 0: commits final at once)")
	_ = cmd.MarkFlagRequired("dir")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return cmd
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// linkLibp2p makes every testnet node's libp2p boot nodes the others' (the
// peer id is the node key's), so payloads and weights can be fetched by
// hash between them from the first start.
func linkLibp2p(nodes []chain.TestnetNode) error {
	addrs := make([]string, len(nodes))
	ncs := make([]*chain.NodeConfig, len(nodes))
	for i, n := range nodes {
		nc, err := chain.LoadNodeConfig(n.Home)
		if err != nil {
			return err
		}
		ncs[i] = nc
		k, err := did.Load(filepath.Join(n.Home, chain.NodeKeyFile))
		if errors.Is(err, fs.ErrNotExist) {
			return nil // no node keys (--candidate-stake ""): nothing to link
		}
		if err != nil {
			return fmt.Errorf("testnet: %w", err)
		}
		pk, err := libp2pcrypto.UnmarshalEd25519PrivateKey(k.Priv)
		if err != nil {
			return fmt.Errorf("testnet: node key: %w", err)
		}
		id, err := peer.IDFromPrivateKey(pk)
		if err != nil {
			return fmt.Errorf("testnet: node key: %w", err)
		}
		addrs[i] = nc.ListenAddr + "/p2p/" + id.String()
	}
	for i, n := range nodes {
		ncs[i].BootNodes = nil
		for j, a := range addrs {
			if j != i {
				ncs[i].BootNodes = append(ncs[i].BootNodes, a)
			}
		}
		if err := chain.SaveNodeConfig(n.Home, ncs[i]); err != nil {
			return fmt.Errorf("testnet: %w", err)
		}
	}
	return nil
}
