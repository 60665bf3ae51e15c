package chain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	cmtcfg "github.com/cometbft/cometbft/config"
	cmtlog "github.com/cometbft/cometbft/libs/log"
	"github.com/cometbft/cometbft/node"
	"github.com/cometbft/cometbft/p2p"
	"github.com/cometbft/cometbft/privval"
	"github.com/cometbft/cometbft/proxy"
	"github.com/cometbft/cometbft/rpc/client/local"

	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
)

// AppDBDir is where a home keeps the application's state (a store.DB).
const AppDBDir = "data/tenzro-app"

// CometConfig builds the CometBFT configuration of a home from its
// NodeConfigFile (loopback-friendly: non-strict address book, duplicate IPs
// allowed).
func CometConfig(home string, nc *NodeConfig) *cmtcfg.Config {
	c := cmtcfg.DefaultConfig()
	c.SetRoot(home)
	c.Moniker = nc.Moniker
	c.P2P.ListenAddress = "tcp://" + nc.P2PAddr
	c.P2P.PersistentPeers = strings.Join(nc.PersistentPeers, ",")
	c.P2P.AddrBookStrict = false
	c.P2P.AllowDuplicateIP = true
	c.P2P.PexReactor = true
	c.RPC.ListenAddress = "tcp://" + nc.RPCAddr
	c.RPC.PprofListenAddress = ""
	// broadcast_tx_commit waits this long for the block (CometBFT's 10 s
	// default is short on a loaded machine).
	c.RPC.TimeoutBroadcastTxCommit = 60 * time.Second
	c.Instrumentation.Prometheus = false
	c.Consensus.TimeoutCommit = time.Duration(nc.TimeoutCommitMs) * time.Millisecond
	c.Mempool.MaxTxBytes = MaxTxBytes
	return c
}

// NodeOptions are RunNode's hooks.
type NodeOptions struct {
	Log *slog.Logger
	// Ready is called with the CometBFT RPC address once the node runs.
	Ready func(rpcAddr string)
	// Serve, when set, runs beside the node with the chain-backed
	// syncer.Service (the JSON-RPC server's wiring lives in cmd/); an error
	// from it stops the node.
	Serve func(ctx context.Context, svc syncer.Service) error
}

// RunNode starts the validator (or full node) whose home is home: the
// application over its own store and CometBFT in the same process with a
// local ABCI client. It returns when ctx ends (after stopping CometBFT and
// closing the store) or when startup or Serve fails.
func RunNode(ctx context.Context, home string, opts NodeOptions) error {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	nc, err := LoadNodeConfig(home)
	if err != nil {
		return err
	}
	c := CometConfig(home, nc)
	if err := c.ValidateBasic(); err != nil {
		return fmt.Errorf("chain node %s: config: %w", home, err)
	}
	db, err := store.Open(ctx, filepath.Join(home, AppDBDir), store.Options{Logger: log.With("component", "chain-store")})
	if err != nil {
		return fmt.Errorf("chain node %s: %w", home, err)
	}
	defer db.Close()
	app, err := NewApp(ctx, db, log.With("component", "chain-app"))
	if err != nil {
		return err
	}
	nk, err := p2p.LoadNodeKey(c.NodeKeyFile())
	if err != nil {
		return fmt.Errorf("chain node %s: node key: %w", home, err)
	}
	pv := privval.LoadFilePV(c.PrivValidatorKeyFile(), c.PrivValidatorStateFile())
	n, err := node.NewNodeWithContext(ctx, c, pv, nk, proxy.NewLocalClientCreator(app),
		node.DefaultGenesisDocProviderFunc(c), cmtcfg.DefaultDBProvider,
		node.DefaultMetricsProvider(c.Instrumentation), slogAdapter{log.With("component", "cometbft")})
	if err != nil {
		return fmt.Errorf("chain node %s: %w", home, err)
	}
	if err := n.Start(); err != nil {
		return fmt.Errorf("chain node %s: start: %w", home, err)
	}
	h, hash := app.LastCommit()
	log.Info("chain node running", "home", home, "moniker", nc.Moniker, "node_id", nk.ID(), "rpc", "http://"+nc.RPCAddr,
		"p2p", nc.P2PAddr, "app_height", h, "app_hash", hash)
	if opts.Ready != nil {
		opts.Ready(nc.RPCAddr)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	serveErr := make(chan error, 1)
	if opts.Serve != nil {
		go func() {
			err := opts.Serve(ctx, NewService(app, local.New(n)))
			serveErr <- err
			cancel()
		}()
	}
	<-ctx.Done()
	log.Info("chain node stopping", "home", home)
	if err := n.Stop(); err != nil {
		log.Error("stop cometbft", "err", err)
	}
	n.Wait()
	if opts.Serve != nil {
		if err := <-serveErr; err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("chain node %s: %w", home, err)
		}
	}
	return nil
}

// slogAdapter routes CometBFT's logs to slog (its Info chatter at debug).
type slogAdapter struct{ l *slog.Logger }

func (s slogAdapter) Debug(msg string, kv ...any) { s.l.Debug(msg, kv...) }
func (s slogAdapter) Info(msg string, kv ...any)  { s.l.Debug(msg, kv...) }
func (s slogAdapter) Error(msg string, kv ...any) { s.l.Warn(msg, kv...) }
func (s slogAdapter) With(kv ...any) cmtlog.Logger {
	return slogAdapter{s.l.With(kv...)}
}
