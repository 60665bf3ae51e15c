package main

// wire.go is the one place where the node's parts are put together:
// store → engine → trust → chain → gossip → syncer.Node → rpc server. The lead adjusts it as
// parts land (enclave key custody, attestation, plugin registry over RPC).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/rpc/gossip"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// defaultEngine is wasm: the plugins package is wired below.
const defaultEngine = "wasm"

// runNode runs the node until ctx ends (SIGINT/SIGTERM), then shuts down:
// RPC first (in-flight requests finish), then gossip, the syncer worker,
// the chain, the engine and the store. Every node runs the same path: a
// chain node (CometBFT in process with the state machine), its own store
// and blobs, libp2p, the JSON-RPC service and the candidate/syncer daemon.
// With --dev the chain is a one-validator chain in <data-dir>/chain
// (created at the first start, with the faucet); with --home it is the home
// that `tenzro-node testnet` or `init` wrote.
func runNode(ctx context.Context, cfg Config, log *slog.Logger) (err error) {
	headerLight := isHeaderLight(cfg)
	home := ""
	if headerLight {
		// A light client's boot nodes are remembered in its home.
		if lc, _, ok, err := loadLightHome(cfg); err != nil {
			return err
		} else if ok && !cfg.bootSet && len(lc.BootNodes) > 0 {
			cfg.BootNodes = lc.BootNodes
		}
	} else if home, err = chainHome(cfg); err != nil {
		return err
	}
	bootstrap := isLight(cfg) && !chain.HomeExists(home)
	if !cfg.Dev && !bootstrap && !headerLight {
		// A home names its node's JSON-RPC and libp2p addresses and its
		// libp2p boot nodes (a testnet's other nodes; a light client's own).
		if nc, err := chain.LoadNodeConfig(home); err == nil {
			if isLight(cfg) && len(nc.PersistentPeers) == 0 {
				return fmt.Errorf("%s is the home of a --dev chain, not of a light client: start the light client with another --data-dir", home)
			}
			if !cfg.rpcSet && nc.JSONRPCAddr != "" {
				cfg.RPCAddr = nc.JSONRPCAddr
			}
			if !cfg.listenSet && nc.ListenAddr != "" {
				cfg.ListenAddr = nc.ListenAddr
			}
			if !cfg.bootSet && len(nc.BootNodes) > 0 {
				cfg.BootNodes = nc.BootNodes
			}
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	key, created, err := loadOrCreateNodeKey(cfg.NodeKey)
	if err != nil {
		return err
	}
	log.Info("node identity", "did", key.DID.String(), "key_file", cfg.NodeKey, "created", created)

	db, err := store.Open(ctx, filepath.Join(cfg.DataDir, "db"), store.Options{Logger: log.With("component", "store")})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer closeLogged(log, "store", db.Close)
	if err := checkNodeStore(ctx, db, cfg.DataDir); err != nil {
		return err
	}
	blobs, err := store.OpenBlobs(filepath.Join(cfg.DataDir, "blobs"), store.BlobOptions{MaxSize: machine.MaxInitWeights, Logger: log.With("component", "blobs"), HoldWrite: cfg.holdWrites})
	if err != nil {
		return fmt.Errorf("open blob store: %w", err)
	}
	defer closeLogged(log, "blob store", blobs.Close)
	if err := migrateKVBlobs(ctx, db, blobs, log); err != nil {
		return err
	}
	served := nodeBlobs(blobs, cfg.fault)
	if cfg.fault != nil {
		log.Warn("FAULT INJECTION BUILD: this node misbehaves on purpose (tests only)", "wrong_aggregate", cfg.fault.WrongAggregate, "withhold", cfg.fault.Withhold)
	}

	var engine syncer.Engine
	var registry rpc.PluginRegistry
	switch cfg.Engine {
	case "wasm":
		pe, err := plugins.NewEngine(ctx, plugins.Config{KV: db, CacheDir: filepath.Join(cfg.DataDir, "wasm-cache"), Logger: log.With("component", "plugins"),
			Workers: plugins.DefaultWorkers, WorkerCommand: workerCommand()})
		if err != nil {
			return fmt.Errorf("wasm engine: %w", err)
		}
		defer closeLogged(log, "wasm engine", func() error { return pe.Close(context.WithoutCancel(ctx)) })
		engine = pe
		registry = &pluginRegistry{e: pe}
	default:
		engine = syncer.NewNativeEngine()
	}
	log.Info("engine", "engine", engine.Profile().Engine, "hash", engine.Profile().Hash)
	reg, nm, err := newMetricsRegistry()
	if err != nil {
		return err
	}
	engine = rpc.InstrumentEngine(engine, nm)

	tr, err := setupTrust(ctx, cfg, key, db, log)
	if err != nil {
		return err
	}
	// libp2p comes up before the chain: a light client learns its chain
	// from its boot nodes over it. Gossip serves the node's blobs (payloads,
	// weights, momentum, evidence) from the blob store, and its chain once
	// it exists.
	var nodeP atomic.Pointer[syncer.Node]
	var chainP atomic.Pointer[chain.Node]
	hd := gossip.Handlers{Nonce: func(ctx context.Context, p wire.NonceParams) (*wire.NonceResult, error) {
		node := nodeP.Load()
		if node == nil {
			return nil, &gossip.Refusal{Kind: int(machine.KindInternal), Message: "node starting"}
		}
		res, err := node.AttestNonce(ctx, p)
		if k := machine.KindOf(err); err != nil && k != machine.KindInternal {
			return nil, &gossip.Refusal{Kind: int(k), Message: err.Error()}
		} else if err != nil {
			log.Error("attestation nonce for a peer", "task", p.TaskID, "did", p.DID, "err", err)
			return nil, &gossip.Refusal{Kind: int(machine.KindInternal), Message: "internal error on this node (see its log)"}
		}
		return res, nil
	}, ChainInfo: func() (*gossip.ChainInfo, error) {
		cn := chainP.Load()
		if cn == nil {
			return nil, errors.New("the chain is starting")
		}
		return &gossip.ChainInfo{ChainID: cn.ChainID, NodeID: cn.NodeID, P2PAddr: cn.Config.P2PAddr, Genesis: cn.Genesis, RPCAddr: cn.Config.RPCAddr}, nil
	}}
	gn, err := gossip.New(ctx, gossip.Config{
		ListenAddrs: []string{cfg.ListenAddr},
		BootNodes:   cfg.BootNodes,
		Identity:    key.Priv,
		Logger:      log,
		Blobs:       served,
		MaxBlob:     max(cfg.MaxRequestBytes, cfg.MaxBlobBytes),
		OnBlobIn:    nm.PayloadIn,
	}, hd)
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	defer closeLogged(log, "gossip", gn.Close)
	log.Info("gossip listening", "peer_id", gn.PeerID(), "addrs", gn.Addrs())
	if err := reg.Register(newP2PBytes(gn)); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}

	// The chain: a light client follows headers and reads by proofs
	// (chain.Light); every other node runs CometBFT with a replica.
	var (
		src       syncer.Chain
		chainID   string
		chainInfo func() wire.ChainInfo
	)
	if headerLight {
		lc, gen, gh, err := startHeaderLight(ctx, gn, cfg, log)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		defer closeLogged(log, "light client", lc.Close)
		src, chainID = lc, gen.ChainID
		chainInfo = func() wire.ChainInfo {
			return wire.ChainInfo{ChainID: gen.ChainID, Height: lc.Height(), GenesisHash: &gh}
		}
	} else {
		if bootstrap {
			if err := bootstrapLight(ctx, gn, cfg, home, log); err != nil {
				if errors.Is(err, context.Canceled) {
					return nil
				}
				return err
			}
		} else if !cfg.Dev {
			if err := checkPin(cfg, home); err != nil {
				return err
			}
		}
		if cfg.Dev {
			if err := initDevChain(home, tr.signer.DID(), log); err != nil {
				return err
			}
		}
		if cfg.SnapshotInterval < 0 || cfg.SnapshotKeep < 0 {
			return usageError{fmt.Errorf("--snapshot-interval %d, --snapshot-keep %d: want 0 or more", cfg.SnapshotInterval, cfg.SnapshotKeep)}
		}
		if cfg.MempoolSenderLimit < -1 {
			return usageError{fmt.Errorf("--mempool-sender-limit %d: want -1 (no limit), 0 (default %d) or more", cfg.MempoolSenderLimit, chain.DefaultMempoolSenderLimit)}
		}
		cn, err := chain.Start(ctx, home, chain.NodeOptions{Log: log, SnapshotInterval: cfg.SnapshotInterval, SnapshotKeep: cfg.SnapshotKeep,
			KeepHeights: cfg.StateKeepHeights, MempoolSenderLimit: cfg.MempoolSenderLimit})
		if err != nil {
			return err
		}
		defer closeLogged(log, "chain", cn.Close)
		chainP.Store(cn)
		if err := cn.WaitCommitted(ctx, 10*time.Second); err != nil {
			if errors.Is(err, context.Canceled) {
				return nil // stopped while starting
			}
			return fmt.Errorf("chain: %w", err)
		}
		src, chainID, chainInfo = cn.Local, cn.ChainID, cn.Info
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	goRun := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errc <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}

	// The CometBFT validator key in the home signs challenge votes (a node
	// that is not in the genesis validator set is never on a committee).
	var voter syncer.VoteSigner
	if headerLight {
		// A light client votes on nothing and commits nothing.
	} else if vs, err := chain.LoadVoteSigner(home); err != nil {
		log.Warn("no validator key in the chain home: this node votes on no challenge", "err", err)
	} else {
		voter = vs
	}
	node, err := syncer.NewNode(ctx, syncer.Config{
		Chain:            src,
		Blobs:            served,
		Local:            db,
		Engine:           engine,
		Signer:           tr.signer,
		Attestor:         tr.checker,
		DatasetKeys:      tr.datasetKeys(),
		Fetcher:          gn, // the blob stream into the blob store (gossip.Node.Fetch)
		Provider:         gn.ProviderHint(),
		Dev:              cfg.Dev,
		Role:             cfg.Role,
		Logger:           log.With("component", "syncer"),
		Observer:         nm,
		Validator:        voter,
		Watch:            cfg.Watch,
		WatchConcurrency: cfg.WatchConcurrency,
		Fault:            cfg.fault,
		QuantCacheBytes:  cacheBytes(cfg.QuantCacheBytes),
		InputCacheBytes:  cacheBytes(cfg.InputCacheBytes),
		Announce: func(ctx context.Context, ev syncer.Event) {
			announce(ctx, gn, tr.signer, ev, log)
		},
	})
	if err != nil {
		return fmt.Errorf("start syncer: %w", err)
	}
	defer closeLogged(log, "syncer", node.Close)
	nodeP.Store(node)
	if pr, ok := registry.(*pluginRegistry); ok {
		pr.node = node // publications pay the burned fee, rate-limited per DID
	}
	if cands, err := node.ListSyncers(ctx); err == nil && cfg.Role == "syncer" {
		found := false
		for _, c := range cands {
			found = found || c.DID == tr.signer.DID()
		}
		if !found {
			log.Warn("this node's syncer key is not a registered candidate: it enters no election (tenzro syncer register)", "did", tr.signer.DID())
		}
	}
	if !headerLight {
		// A light client is no syncer, watcher or replica holder: its
		// worker would only scan state by proofs at every block.
		goRun("syncer", node.Run)
	}
	defer func() { cancel(); wg.Wait() }()

	if err := rpc.RegisterGauges(reg, nodeGauges(ctx, node, gn)); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	svc := nodeService{Node: node, gn: gn, chain: chainInfo}
	price, _ := new(big.Int).SetString(cfg.BlobPrice, 10) // validated
	ds, dsRoutes, err := startDatasets(ctx, cfg, gn, db, chainID, func(ctx context.Context, did string) (int64, string, error) {
		return fundedBytes(ctx, svc, price, did)
	}, log)
	if err != nil {
		return fmt.Errorf("datasets: %w", err)
	}
	defer closeLogged(log, "datasets", ds.Close)

	blobs.SetCap(cfg.BlobDiskCap)
	policy, err := newBlobPolicy(ctx, svc, blobs, func(context.Context) string { return chainID }, price, cfg.BlobDIDQuota, cfg.BlobTTL, log.With("component", "blobs"))
	if err != nil {
		return err
	}
	policy.archive = cfg.Archive
	goRun("blob collector", func(ctx context.Context) error {
		return policy.runCollector(ctx, min(max(cfg.BlobTTL/4, time.Second), 10*time.Minute))
	})
	if err := rpc.RegisterGauges(reg, rpc.NodeGauges{
		BlobBytes:       func() float64 { return float64(blobs.Usage().Bytes) },
		BlobCount:       func() float64 { return float64(blobs.Usage().Blobs) },
		BlobCap:         func() float64 { return float64(blobs.Usage().Cap) },
		BlobUploadBytes: func() float64 { return float64(policy.pendingBytes()) },
	}); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	opts := rpc.Options{
		BlobAuth:             policy,
		BlobPeerBytesPerHour: cfg.BlobPeerBytesPerHour,
		HeavyMemoryBytes:     cfg.HeavyMemoryBytes,
		Routes:               dsRoutes,
		AllowedOrigins:       cfg.RPCAllowOrigins,
		MaxRequestBytes:      cfg.MaxRequestBytes,
		Blobs:                served,
		MaxBlobBytes:         cfg.MaxBlobBytes,
		OnBlobIn:             nm.PayloadIn,
		// A blob this node lacks is asked of its peers (the blob stream,
		// hash-checked, at most --max-blob-bytes), so an auditor can replay
		// any run through any node.
		FetchBlob: func(ctx context.Context, h wire.Hash) error {
			limit := cfg.MaxBlobBytes
			if limit <= 0 {
				limit = machine.MaxInitWeights
			}
			_, err := gn.FetchFromAny(ctx, h, limit, "")
			return err
		},
		LargeMinRate: cfg.LargeMinRate,
		LargeGrace:   time.Duration(cfg.LargeGraceMs) * time.Millisecond,
		Logger:       log.With("component", "rpc"),
		// Without a claimed root, receipts are checked against this node's
		// committed state (syncer.RunAnchor).
		VerifyReceipt: func(ctx context.Context, receipt, root []byte) *wire.VerifyReceiptResult {
			return audit.VerifyReceiptAgainst(ctx, node, receipt, root)
		},
	}
	if registry != nil {
		opts.Plugins = registry
	}
	opts.Attest = tr.service
	opts.Challenges = node
	if opts.Observer, err = rpc.NewMetrics(reg); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	opts.Pages = pages(cfg, reg, svc, opts.VerifyReceipt, log)
	if cfg.MetricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("metrics listen %s: %w", cfg.MetricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ms := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		goRun("metrics", func(ctx context.Context) error {
			go func() { <-ctx.Done(); _ = ms.Close() }()
			if err := ms.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		log.Info("metrics listening", "addr", mln.Addr().String())
	}
	srv, err := rpc.New(rpc.InstrumentService(svc, nm), opts)
	if err != nil {
		return err
	}
	defer closeLogged(log, "rpc dispatcher", srv.Close)
	if err := rpc.RegisterGauges(reg, rpc.NodeGauges{
		ReplayRuns:       func() float64 { r, _ := srv.HeavyStats(); return float64(r) },
		ReplayHits:       func() float64 { _, h := srv.HeavyStats(); return float64(h) },
		InputCacheHits:   func() float64 { h, _ := node.InputCacheStats(); return float64(h) },
		InputCacheMisses: func() float64 { _, m := node.InputCacheStats(); return float64(m) },
	}); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.RPCAddr)
	if err != nil {
		return fmt.Errorf("rpc listen %s: %w", cfg.RPCAddr, err)
	}
	ci := chainInfo()
	log.Info("json-rpc listening", "addr", ln.Addr().String(), "dev", cfg.Dev, "role", cfg.Role, "max_request_bytes", cfg.MaxRequestBytes,
		"chain_id", ci.ChainID, "chain_peer", ci.Peer)
	goRun("rpc", func(ctx context.Context) error { return srv.Serve(ctx, ln) })

	<-ctx.Done()
	log.Info("shutting down")
	cancel()
	wg.Wait()
	select {
	case err = <-errc:
	default:
	}
	return err
}

// chainHome is the chain home the node runs: <data-dir>/chain with --dev,
// --home otherwise (and without either there is no chain to run).
func chainHome(cfg Config) (string, error) {
	switch {
	case cfg.Dev && cfg.Home != "":
		return "", usageError{errors.New("--dev and --home exclude each other: --dev runs its own one-validator chain in <data-dir>/chain")}
	case cfg.Dev:
		return filepath.Join(cfg.DataDir, "chain"), nil
	case cfg.Home != "":
		return cfg.Home, nil
	case cfg.Role == "full":
		home := lightHome(cfg)
		if !chain.HomeExists(home) && len(cfg.BootNodes) == 0 {
			return "", usageError{fmt.Errorf("a full node joins a network through --boot-nodes (a node's libp2p address, /ip4/…/tcp/…/p2p/<peer id>; 'tenzro node info' prints it): %s holds no chain home yet", cfg.DataDir)}
		}
		return home, nil
	}
	return "", usageError{errors.New("no chain to run: start with --dev (a one-validator chain in this process, with a faucet), --home DIR (a home written by 'tenzro-node testnet' or 'tenzro-node init'), --role full --boot-nodes ADDR (join a network as a replica) or --role light-client --boot-nodes ADDR (follow a network's headers, read by proofs)")}
}

// initDevChain writes the --dev chain's home at the first start; later
// starts resume it.
func initDevChain(home, syncerDID string, log *slog.Logger) error {
	if nc, err := chain.LoadNodeConfig(home); err == nil {
		if len(nc.PersistentPeers) > 0 {
			return fmt.Errorf("%s is the home of a node that follows a network, not of a --dev chain: start --dev with another --data-dir", home)
		}
		return nil
	} else if _, err := os.Stat(filepath.Join(home, chain.NodeConfigFile)); err == nil {
		return fmt.Errorf("dev chain: %w", err)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("dev chain: %w", err)
	}
	n, err := chain.InitDev(home, chain.DevOptions{Candidate: syncerDID, Params: &machine.GenesisParams{HaltGapMs: chain.DefaultHaltGapMs}})
	if err != nil {
		return fmt.Errorf("dev chain: %w", err)
	}
	log.Info("dev chain created: one validator, the faucet on, this node the only syncer candidate", "home", home, "node_id", n.NodeID,
		"p2p", n.P2PAddr, "block_interval", chain.DevBlockInterval)
	return nil
}

// nodeStoreFormat marks a node store written by this version (its runs and
// ledger live on the chain, not in the store).
var nodeStoreFormat = []byte("node/format-chain")

// checkNodeStore refuses a data dir whose store holds the state of a node
// from before the chain (runs and balances in the store itself) and marks a
// new one.
func checkNodeStore(ctx context.Context, db *store.DB, dataDir string) error {
	if _, err := db.Get(ctx, machine.KSMeta, nodeStoreFormat); err == nil {
		return nil
	}
	old := false
	for _, ks := range []machine.Keyspace{machine.KSRuns, machine.KSLedger, machine.KSTranscript} {
		err := db.Scan(ctx, ks, nil, func(_, _ []byte) error { old = true; return errStopScan })
		if err != nil && !errors.Is(err, errStopScan) {
			return fmt.Errorf("store: %w", err)
		}
	}
	if old {
		return fmt.Errorf("data dir %s is from an older version of tenzro-node (runs and balances in the node's own store, before the chain): start with a new --data-dir", dataDir)
	}
	var b machine.Batch
	b.Set(machine.KSMeta, nodeStoreFormat, []byte{1})
	return db.Commit(ctx, &b)
}

var errStopScan = errors.New("stop")

// loadOrCreateNodeKey reads the node key, creating it (mode 0600) on first
// start.
func loadOrCreateNodeKey(path string) (*did.Key, bool, error) {
	k, err := did.Load(path)
	if err == nil {
		return k, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("node key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("node key: %w", err)
	}
	k, err = did.Generate(did.KindMachine, nil)
	if err != nil {
		return nil, false, err
	}
	if err := k.Save(path); err != nil {
		return nil, false, fmt.Errorf("node key: %w", err)
	}
	return k, true, nil
}

func closeLogged(log *slog.Logger, what string, f func() error) {
	if err := f(); err != nil {
		log.Warn("close", "part", what, "err", err)
	}
}

// pluginRegistry serves the wasm engine's registry over RPC
// (tenzro_plugin_*). Publishing is content-addressed and idempotent, so a
// replayed request changes nothing; the signature proves who published.
type pluginRegistry struct {
	e    *plugins.Engine
	node *syncer.Node
}

func (r *pluginRegistry) Publish(ctx context.Context, p *wire.PublishPluginParams) (*wire.PluginInfo, error) {
	if len(p.Module) > plugins.MaxModuleBytes {
		return nil, machine.Errf(machine.KindInvalid, "module: %d bytes, limit %d", len(p.Module), plugins.MaxModuleBytes)
	}
	if err := did.Verify(p.DID, p.Preimage(), p.Signature); err != nil {
		return nil, machine.Errf(machine.KindUnauthorized, "publish signature by %q: %v", p.DID, err)
	}
	if r.node != nil {
		return r.node.GatePublish(ctx, p, func(ctx context.Context) (*wire.PluginInfo, error) { return r.publish(ctx, p) })
	}
	return r.publish(ctx, p)
}

func (r *pluginRegistry) publish(ctx context.Context, p *wire.PublishPluginParams) (*wire.PluginInfo, error) {
	info, err := r.e.Publish(ctx, p.Module)
	if err != nil {
		if strings.HasPrefix(err.Error(), "plugins: store ") {
			return nil, err // a store fault: internal
		}
		return nil, machine.Errf(machine.KindInvalid, "module refused: %v", err)
	}
	return info, nil
}

func (r pluginRegistry) List(ctx context.Context) ([]wire.PluginInfo, error) { return r.e.List(ctx) }

func (r pluginRegistry) Get(ctx context.Context, h wire.Hash) (*wire.PluginInfo, []byte, error) {
	info, err := r.e.Get(ctx, h)
	if err == nil {
		var mod []byte
		if mod, err = r.e.Module(ctx, h); err == nil {
			return info, mod, nil
		}
	}
	if errors.Is(err, plugins.ErrUnknownPlugin) {
		return nil, nil, machine.Errf(machine.KindNotFound, "plugin sha256:%s is not registered", h)
	}
	return nil, nil, err
}

// announce tells peers about round transitions and finality on the syncer
// topic, signed by the syncer's key (which may live in an enclave). Gossip
// is best effort: a failure is logged, never fatal to the state machine.
func announce(ctx context.Context, gn *gossip.Node, signer syncer.Signer, ev syncer.Event, log *slog.Logger) {
	if ev.Kind != "round_committed" && ev.Kind != "sealed" {
		return
	}
	st := gossip.SyncerStatus{Type: gossip.TypeSyncerStatus, TaskID: ev.TaskID, Round: ev.Round, Status: ev.Kind, ModelHash: ev.ModelHash, SyncerDID: signer.DID()}
	sig, err := signer.Sign(ctx, st.Preimage())
	if err != nil {
		log.Warn("sign syncer status", "err", err)
		return
	}
	st.Signature = sig
	if err := gn.PublishSyncerStatus(ctx, st); err != nil {
		log.Debug("publish syncer status", "err", err)
	}
}

// migrateKVBlobs moves blobs an older node kept in Pebble's KSBlobs
// keyspace into the file blob store (each checked against its hash), then
// deletes them from Pebble. It is idempotent: a crash half-way leaves
// blobs in both places, and the next start moves the rest.
func migrateKVBlobs(ctx context.Context, db *store.DB, blobs *store.Blobs, log *slog.Logger) error {
	var keys [][]byte
	err := db.Scan(ctx, machine.KSBlobs, nil, func(k, v []byte) error {
		var h wire.Hash
		if len(k) != len(h) {
			log.Warn("blob migration: skipping a key that is not a hash", "key", fmt.Sprintf("%x", k))
			return nil
		}
		copy(h[:], k)
		if err := blobs.Put(ctx, h, v); errors.Is(err, store.ErrBlobMismatch) {
			// Keyed by another hash function (a store written before
			// content hashes were BLAKE3): left where it is.
			log.Warn("blob migration: a stored blob does not hash to its key; left in the database", "key", h)
			return nil
		} else if err != nil {
			return fmt.Errorf("blob %s: %w", h, err)
		}
		keys = append(keys, append([]byte(nil), k...))
		return nil
	})
	if err != nil {
		return fmt.Errorf("move blobs from the database to %s: %w", blobs.Dir(), err)
	}
	if len(keys) == 0 {
		return nil
	}
	var b machine.Batch
	for _, k := range keys {
		b.Delete(machine.KSBlobs, k)
	}
	if err := db.Commit(ctx, &b); err != nil {
		return fmt.Errorf("move blobs: delete from the database: %w", err)
	}
	log.Info("moved blobs from the database to the blob store", "blobs", len(keys), "dir", blobs.Dir())
	return nil
}

// cacheBytes maps a cache flag (0: off) to syncer.Config's (negative: off).
func cacheBytes(flag int64) int64 {
	if flag == 0 {
		return -1
	}
	return flag
}
