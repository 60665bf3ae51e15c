// Command kvnode runs CometBFT v0.38's stock example application,
// abci/example/kvstore (persistent, on disk), on a tenzro-node home: the
// same CometBFT configuration (chain.CometConfig: block interval, mempool,
// gossip), genesis, validator and node keys as tenzro-node would use there.
// It is the baseline of the chain throughput benchmark
// (e2e/tps_bench_test.go): the same consensus engine and block settings
// with an application that does almost nothing per transaction.
//
//	kvnode --home <tenzro-node testnet home>
//
// It runs until SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/cometbft/cometbft/abci/example/kvstore"
	cmtcfg "github.com/cometbft/cometbft/config"
	cmtlog "github.com/cometbft/cometbft/libs/log"
	"github.com/cometbft/cometbft/node"
	"github.com/cometbft/cometbft/p2p"
	"github.com/cometbft/cometbft/privval"
	"github.com/cometbft/cometbft/proxy"

	"github.com/tenzro/train/chain"
)

func main() {
	home := flag.String("home", "", "a tenzro-node home (tenzro-node testnet)")
	flag.Parse()
	if err := run(*home); err != nil {
		fmt.Fprintln(os.Stderr, "kvnode:", err)
		os.Exit(1)
	}
}

func run(home string) error {
	if home == "" {
		return fmt.Errorf("--home is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := chain.LoadNodeConfig(home)
	if err != nil {
		return err
	}
	c := chain.CometConfig(home, nc)
	if err := c.ValidateBasic(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	app := kvstore.NewPersistentApplication(filepath.Join(home, "data", "kvstore"))
	defer app.Close()
	nk, err := p2p.LoadNodeKey(c.NodeKeyFile())
	if err != nil {
		return fmt.Errorf("node key: %w", err)
	}
	pv := privval.LoadFilePV(c.PrivValidatorKeyFile(), c.PrivValidatorStateFile())
	log := cmtlog.NewFilter(cmtlog.NewTMLogger(cmtlog.NewSyncWriter(os.Stderr)), cmtlog.AllowError())
	n, err := node.NewNodeWithContext(ctx, c, pv, nk, proxy.NewLocalClientCreator(app),
		node.DefaultGenesisDocProviderFunc(c), cmtcfg.DefaultDBProvider, node.DefaultMetricsProvider(c.Instrumentation), log)
	if err != nil {
		return err
	}
	if err := n.Start(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	slog.Info("kvstore node running", "home", home, "rpc", "http://"+nc.RPCAddr)
	<-ctx.Done()
	if err := n.Stop(); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	n.Wait()
	return nil
}
