// Command tenzro-node is the Tenzro Train daemon: it opens the store, runs
// the syncer state machine, serves JSON-RPC (and metrics), joins gossip, and
// shuts down gracefully on SIGINT/SIGTERM. The wiring lives in wire.go.
//
// Configuration: defaults, then --config FILE (JSON or YAML with the flag
// names as keys), then flags given on the command line.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/plugins"
)

type slogLevel = slog.Level

func main() {
	plugins.ServeWorkerIfChild() // `tenzro-node plugin-worker` (hidden): the node's plugin workers
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	endProfile := cpuProfile(os.Getenv("TENZRO_CPUPROFILE"), os.Stderr)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	endProfile()
	os.Exit(code)
}

// cpuProfile writes a CPU profile of the whole process to path (the
// TENZRO_CPUPROFILE environment variable; benchmarks read it with go tool
// pprof) until the returned function is called at a graceful exit. An
// empty path profiles nothing.
func cpuProfile(path string, stderr io.Writer) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "TENZRO_CPUPROFILE: %v (not profiling)\n", err)
		if f != nil {
			f.Close()
		}
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "TENZRO_CPUPROFILE: %v\n", err)
		}
	}
}

type usageError struct{ error }

func newCmd(run func(ctx context.Context, cfg Config, log *slog.Logger) error, stderr io.Writer) *cobra.Command {
	var configPath string
	d := defaults()
	cmd := &cobra.Command{
		Use:   "tenzro-node",
		Short: "Run a Tenzro Train node (syncer, trainer, full node or light client)",
		Long: `tenzro-node runs a Tenzro Train node: a chain node (CometBFT in this process with
the run state machine), a Pebble store and blob store in --data-dir, a JSON-RPC
server on --rpc-addr, a libp2p host on --listen-addr, and the syncer daemon (it
sends this node's election proofs, commits the fragments of the runs it is the
elected syncer of, and signs their receipts).

With --dev the chain is a one-validator chain in <data-dir>/chain, created at the
first start with the ledger faucet on and this node as the only syncer candidate,
so one process carries a run from posting to receipt. With --home the chain is a
home written by 'tenzro-node testnet' (a validator) or 'tenzro-node init' (a full
node that follows its peers); its store and key live in <home>/node unless
--data-dir says otherwise. There is no faucet without --dev: funds come from the
genesis.

With --role full and --boot-nodes, the node joins a network by itself as a
replica that does not vote: at the first start it asks a boot node over libp2p for
the network's genesis and CometBFT address (/tenzro/chain-info/1.0.0), writes a
non-validator home in <data-dir>/chain and replays every block; later starts
resume that home. With --role light-client (alias light) and --boot-nodes it joins
as a light client: no replica and no block replay; it follows headers with
CometBFT's light client (the boot nodes' CometBFT RPC as primary and witnesses, or
--light-primary/--light-witnesses), answers reads with values proven against a
verified header, and sends writes as transactions (<data-dir>/light keeps the
genesis and the full nodes' addresses). --genesis FILE or --genesis-hash HEX pins
the network (the boot node's genesis must be that one); without either the
genesis is trusted on first use and its hash printed.

Configuration is layered: defaults, then --config FILE (JSON or YAML whose keys
are the flag names), then the flags given on the command line.`,
		Example: `  tenzro-node --dev --data-dir /tmp/tenzro --rpc-addr 127.0.0.1:8545
  tenzro-node --home /tmp/tn/node0 --rpc-addr 127.0.0.1:8545 --listen-addr /ip4/127.0.0.1/tcp/4001
  tenzro-node --role light-client --data-dir /tmp/light --rpc-addr 127.0.0.1:8600 \
    --boot-nodes /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW... --genesis-hash 5b0c...
  tenzro-node --config node.yaml --log-format json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unknown command %q for \"tenzro-node\" (it takes flags only)", args[0])}
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd.Flags(), configPath)
			if err != nil {
				return usageError{err}
			}
			log := newLogger(cfg, stderr)
			return run(cmd.Context(), cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "config file (JSON, or YAML by .yaml/.yml extension); flags override it")
	f.String("role", d.Role, "node role: syncer, trainer, full (a replica that does not vote) or light-client (alias light: headers and proofs, no replica)")
	f.String("data-dir", d.DataDir, "data directory (store, node key, caches)")
	f.String("listen-addr", d.ListenAddr, "libp2p listen multiaddr")
	f.String("rpc-addr", d.RPCAddr, "JSON-RPC listen address (host:port)")
	f.StringSlice("boot-nodes", nil, "comma-separated boot node multiaddrs (with /p2p/<peer id>)")
	f.Bool("dev", false, "development mode: a one-validator chain in <data-dir>/chain with the faucet on and this node the only syncer candidate")
	f.String("home", "", "run the chain home that 'tenzro-node testnet' or 'tenzro-node init' wrote (store and key in <home>/node unless --data-dir)")
	f.String("genesis", "", "light client: the network's genesis.json; the boot node's genesis must be this one (else it is trusted on first use)")
	f.String("genesis-hash", "", "light client: the network's genesis hash (hex, as 'tenzro node info' or 'tenzro-node testnet' print it); the boot node's genesis must have it")
	f.String("node-key", "", "node key file (default <data-dir>/node.key, created on first start)")
	f.String("engine", d.Engine, "aggregation engine: wasm (plugins) or native")
	f.Int64("max-request-bytes", d.MaxRequestBytes, "largest JSON-RPC request body in bytes")
	f.Int64("max-blob-bytes", d.MaxBlobBytes, "largest blob accepted by PUT /blobs/<hash> (payloads, initial weights) in bytes (default 1 GiB: the seed's 200M initial weights fit); 0: --max-request-bytes")
	f.Int64("large-min-rate", d.LargeMinRate, "slowest accepted large request body (over 1 MiB), bytes/s, after --large-grace-ms")
	f.Int64("large-grace-ms", d.LargeGraceMs, "how long a large request body may lag behind --large-min-rate at its start (ms)")
	f.StringSlice("rpc-allow-origin", nil, "browser origins (scheme://host:port) allowed to POST to the RPC port besides its own; cross-origin browser requests are refused otherwise")
	f.Int64("blob-disk-cap", d.BlobDiskCap, "bytes the blob store may hold (uploads, fetched payloads, weights); a write past it is refused (0: no cap)")
	f.Int64("blob-did-quota", d.BlobDIDQuota, "most bytes of unreferenced PUT /blobs uploads one DID may hold")
	f.String("blob-price", d.BlobPrice, "attoTNZO of balance each unreferenced uploaded byte, and each byte of a dataset a DID pins, needs (a DID enrolled in, or sponsoring, the active run its blob intent names needs none)")
	f.Duration("blob-ttl", d.BlobTTL, "uploads no record references are deleted after this long; so are the payloads of final rounds (challenge window passed) unless --archive")
	f.Bool("archive", false, "keep every blob a run references, the payloads of final rounds included, so `tenzro receipt replay` of any run can read them here (initial and committed weights are always kept)")
	f.Int64("blob-peer-bytes-per-hour", d.BlobPeerBytesPerHour, "most bytes one remote IP may upload with PUT /blobs per hour")
	f.Int64("heavy-memory-bytes", d.HeavyMemoryBytes, "memory replayFragment, getPayload and getWeights calls may hold at once (bytes)")
	f.Int64("quant-cache-bytes", d.QuantCacheBytes, "memory (bytes, up to 64 GiB) for the stale rule's cache of earlier rounds' inputs (each one's first quantized values and bounds, ≈ 0.25 MiB): a hit decides whether a new input replays its trainer's earlier one without reading and decoding that payload again; the default holds ≈ 1,000 inputs, a larger value serves more trainers × fragments × the 2 lookback rounds; 0: off (same verdicts, every comparison reads the earlier payload)")
	f.Int64("input-cache-bytes", d.InputCacheBytes, "memory (bytes, up to 64 GiB) for what a commit needs of each input this node accepted, computed once at ingest (binding, per-submission verifiers' verdicts, the copy rule's read pass; ≈ 0.3 MiB per input of 8.65M values): a hit spares the commit a full read of that payload; the default holds ≈ 400 inputs accepted and not yet committed, a larger value covers more fragments or rounds in flight; 0: off (same verdicts, the commit re-checks every input)")
	f.String("metrics-addr", "", "serve Prometheus metrics on this address at /metrics (default off)")
	f.String("log-level", d.LogLevel, "log level: debug, info, warn or error")
	f.String("log-format", d.LogFormat, "log format: text or json")
	f.String("enclave", d.Enclave, "where the syncer key lives: auto (a TEE if found, else the node key file), none, or simulated-snp|simulated-tdx|simulated-nitro (development only)")
	f.String("dashboard", d.Dashboard, "serve the run dashboard at http://<rpc-addr>/ (GET; JSON-RPC stays on POST): auto (on with --dev), on or off")
	f.String("tdx-collateral", "", "directory of cached Intel PCS collateral (<fmspc>.json) for verifying TDX evidence")
	f.Int64("dataset-max-bytes", 4<<30, "largest dataset (bytes of blocks) this node imports or fetches over IPFS")
	f.Duration("dataset-stall-timeout", time.Minute, "fail a dataset fetch when no block arrives from any peer for this long")
	f.Int("dataset-did-count", d.DatasetDIDCount, "most datasets one DID may pin through signed imports and fetches")
	f.Int64("dataset-did-bytes", d.DatasetDIDBytes, "most bytes of dataset blocks one DID may pin (each dataset counted in full for every DID that pinned it)")
	f.Bool("ipfs-dht", false, "find dataset providers on the public IPFS DHT too (default: connected peers and --boot-nodes only)")
	f.Bool("watch", false, "watcher: re-execute every fragment commit that can still be challenged and challenge (with the node key and the run's bond) those whose result differs")
	f.Int("watch-concurrency", 2, "re-executions the watcher and the validator's voter run at once")
	f.Int64("snapshot-interval", 0, "take a state-sync snapshot every this many heights (0: the home's tenzro-chain.json snapshot_interval, else none)")
	f.Int("snapshot-keep", 0, "state-sync snapshots kept, newest first (0: the home's snapshot_keep, else 2)")
	f.Int("mempool-sender-limit", 0, fmt.Sprintf("transactions one signer may have waiting in this node's mempool; more are refused (code 11) until a block takes some (0: %d, -1: no limit)", chain.DefaultMempoolSenderLimit))
	f.Int64("state-keep-heights", 0, "pruning window: state tree versions kept (0: the home's state_keep_heights, else 1000; -1: all)")
	f.String("light-primary", "", "light client: a full node's CometBFT RPC (http://host:port) to follow headers and read proofs from (default: the first boot node's, remembered in <data-dir>/light)")
	f.StringSlice("light-witnesses", nil, "light client: more full nodes' CometBFT RPCs that cross-check every header the primary gives (default: the other boot nodes'; none: the primary is its own witness)")
	f.Int64("trust-height", 0, "light client: the height of a block the operator trusts (with --trust-hash); default: the primary's latest header, accepted if more than 2/3 of the genesis validators signed it")
	f.String("trust-hash", "", "light client: the hash (hex) of the block at --trust-height")
	f.Duration("trusting-period", chain.DefaultTrustingPeriod, "light client: how long a verified header may verify later ones")
	addFaultFlags(f)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return cmd
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := newCmd(runNode, stderr)
	registerChain(cmd, stdout, stderr)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "unknown flag") {
		fmt.Fprintf(stderr, "usage error: %v\nRun 'tenzro-node --help' for usage.\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "tenzro-node: %v\n", err)
	return 1
}
