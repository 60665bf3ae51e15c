package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	dht "github.com/libp2p/go-libp2p-kad-dht"

	"github.com/tenzro/train/dataset"
	"github.com/tenzro/train/rpc/gossip"
	"github.com/tenzro/train/store"
)

// startDatasets runs bitswap on the gossip host over the node's store and
// returns the dataset API and gateway routes for the HTTP port. With
// --ipfs-dht the public IPFS DHT (client mode) finds providers beyond the
// connected peers.
//
// Imports and removes are signed for chainID (dataset.Options.ChainID);
// each DID pins within --dataset-did-count and --dataset-did-bytes, and
// within what its balance funds at --blob-price per byte (funds, the rule
// unreferenced blob uploads follow: DIDs are free, balance is not). Off
// --dev a fetch must be signed too (a fetch pins and is charged to its DID;
// an unsigned one would pin for the node at no one's cost); a --dev node
// still takes unsigned fetches, the node's own corpus loads in tests.
func startDatasets(ctx context.Context, cfg Config, gn *gossip.Node, db *store.DB, chainID string, funds func(context.Context, string) (int64, string, error), log *slog.Logger) (*dataset.Service, map[string]http.Handler, error) {
	o := dataset.Options{MaxBytes: cfg.DatasetMaxBytes, StallTimeout: cfg.DatasetStall, Logger: log,
		ChainID:    func(context.Context) (string, error) { return chainID, nil },
		QuotaCount: cfg.DatasetDIDCount, QuotaBytes: cfg.DatasetDIDBytes, Funds: funds,
		SignedFetch: !cfg.Dev}
	if cfg.IPFSDHT {
		d, err := dht.New(gn.Host(), dht.Mode(dht.ModeClient), dht.BootstrapPeers(dht.GetDefaultBootstrapPeerAddrInfos()...))
		if err != nil {
			return nil, nil, fmt.Errorf("ipfs dht: %w", err)
		}
		if err := d.Bootstrap(ctx); err != nil {
			return nil, nil, fmt.Errorf("ipfs dht bootstrap: %w", err)
		}
		o.Routing = d
		log.Info("public IPFS DHT on (client mode)")
	}
	svc, err := dataset.New(ctx, gn.Host(), db.Blocks(), o)
	if err != nil {
		return nil, nil, err
	}
	routes, err := svc.Routes()
	if err != nil {
		_ = svc.Close()
		return nil, nil, err
	}
	lim := svc.Limits()
	log.Info("datasets: bitswap on the gossip host, gateway at /ipfs/ on the HTTP port", "max_bytes", lim.MaxBytes, "stall_timeout", lim.StallTimeout, "dht", cfg.IPFSDHT,
		"did_count", lim.QuotaCount, "did_bytes", lim.QuotaBytes)
	return svc, routes, nil
}
