package main

// wire.go is the one place where the node's parts are put together:
// store → engine → syncer.Node → rpc server → gossip. The lead adjusts it as
// parts land (enclave key custody, attestation, plugin registry over RPC).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

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
// RPC first (in-flight requests finish), then gossip, the state machine,
// the engine and the store.
func runNode(ctx context.Context, cfg Config, log *slog.Logger) (err error) {
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
	blobs, err := store.OpenBlobs(filepath.Join(cfg.DataDir, "blobs"), store.BlobOptions{MaxSize: syncer.MaxInitWeights, Logger: log.With("component", "blobs")})
	if err != nil {
		return fmt.Errorf("open blob store: %w", err)
	}
	defer closeLogged(log, "blob store", blobs.Close)
	if err := migrateKVBlobs(ctx, db, blobs, log); err != nil {
		return err
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
	var gn *gossip.Node // set below; round transitions are announced once it exists
	node, err := syncer.NewNode(ctx, syncer.Config{
		KV:          db,
		Blobs:       blobs,
		Engine:      engine,
		Signer:      tr.signer,
		Attestor:    tr.checker,
		Nonces:      tr.nonces,
		DatasetKeys: tr.datasetKeys(),
		Dev:         cfg.Dev,
		Role:        cfg.Role,
		Logger:      log.With("component", "syncer"),
		Observer:    nm,
		Announce: func(ctx context.Context, ev syncer.Event) {
			if gn != nil {
				announce(ctx, gn, tr.signer, ev, log)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("start syncer: %w", err)
	}
	defer closeLogged(log, "syncer", node.Close)
	if pr, ok := registry.(*pluginRegistry); ok {
		pr.node = node // publications pay the burned fee, rate-limited per DID
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
	goRun("syncer", node.Run)

	// Gossip: the syncer role receives submissions announced by light nodes
	// and serves their trainers' attestation nonces.
	// Blobs (payloads, initial weights) are served from the blob store.
	hd := gossip.Handlers{}
	if cfg.Role == "syncer" {
		hd.Nonce = func(ctx context.Context, p wire.NonceParams) (*wire.NonceResult, error) {
			res, err := node.AttestNonce(ctx, p)
			if k := syncer.KindOf(err); err != nil && k != syncer.KindInternal {
				return nil, &gossip.Refusal{Kind: int(k), Message: err.Error()}
			} else if err != nil {
				log.Error("attestation nonce for a light node", "task", p.TaskID, "did", p.DID, "err", err)
				return nil, &gossip.Refusal{Kind: int(syncer.KindInternal), Message: "internal error on the syncer's node (see its log)"}
			}
			return res, nil
		}
	}
	gn, err = gossip.New(ctx, gossip.Config{
		ListenAddrs: []string{cfg.ListenAddr},
		BootNodes:   cfg.BootNodes,
		Identity:    key.Priv,
		Logger:      log,
		Blobs:       blobs,
		MaxBlob:     max(cfg.MaxRequestBytes, cfg.MaxBlobBytes),
	}, hd)
	if err != nil {
		cancel()
		wg.Wait()
		return fmt.Errorf("gossip: %w", err)
	}
	defer closeLogged(log, "gossip", gn.Close)
	log.Info("gossip listening", "peer_id", gn.PeerID(), "addrs", gn.Addrs())
	if err := rpc.RegisterGauges(reg, nodeGauges(ctx, node, gn)); err != nil {
		cancel()
		wg.Wait()
		return fmt.Errorf("metrics: %w", err)
	}
	if cfg.Role == "syncer" {
		counted := rpc.InstrumentService(node, nm)
		if _, err := gn.NewReceiver(func(ctx context.Context, g *wire.OuterGradient) error {
			_, err := counted.Submit(ctx, g)
			return err
		}, gossip.ReceiverOptions{}); err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("gossip receiver: %w", err)
		}
	}

	ds, dsRoutes, err := startDatasets(ctx, cfg, gn, db, log)
	if err != nil {
		cancel()
		wg.Wait()
		return fmt.Errorf("datasets: %w", err)
	}
	defer closeLogged(log, "datasets", ds.Close)

	opts := rpc.Options{
		Routes:          dsRoutes,
		MaxRequestBytes: cfg.MaxRequestBytes,
		Blobs:           blobs,
		MaxBlobBytes:    cfg.MaxBlobBytes,
		LargeMinRate:    cfg.LargeMinRate,
		LargeGrace:      time.Duration(cfg.LargeGraceMs) * time.Millisecond,
		Logger:          log.With("component", "rpc"),
		// Without a claimed root, receipts are checked against this node's
		// committed state (syncer.RunAnchor).
		VerifyReceipt: func(ctx context.Context, receipt, root []byte) *wire.VerifyReceiptResult {
			return syncer.VerifyReceiptAgainst(ctx, node, receipt, root)
		},
	}
	if registry != nil {
		opts.Plugins = registry
	}
	opts.Attest = tr.service
	if opts.Observer, err = rpc.NewMetrics(reg); err != nil {
		cancel()
		wg.Wait()
		return fmt.Errorf("metrics: %w", err)
	}
	opts.Pages = pages(cfg, reg, nodeService{Node: node, gn: gn}, opts.VerifyReceipt, log)
	if cfg.MetricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			cancel()
			wg.Wait()
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

	svc := nodeService{Node: node, gn: gn}
	if cfg.Role == "light" {
		svc.fwd = gossip.NewForwarder(gn)
		log.Info("light role: submissions and attestation nonce requests are relayed to the syncer over libp2p")
	}
	srv, err := rpc.New(rpc.InstrumentService(svc, nm), opts)
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	defer closeLogged(log, "rpc dispatcher", srv.Close)
	ln, err := net.Listen("tcp", cfg.RPCAddr)
	if err != nil {
		cancel()
		wg.Wait()
		return fmt.Errorf("rpc listen %s: %w", cfg.RPCAddr, err)
	}
	log.Info("json-rpc listening", "addr", ln.Addr().String(), "dev", cfg.Dev, "role", cfg.Role, "max_request_bytes", cfg.MaxRequestBytes)
	goRun("rpc", func(ctx context.Context) error { return srv.Serve(ctx, ln) })

	<-ctx.Done()
	log.Info("shutting down")
	wg.Wait()
	select {
	case err = <-errc:
	default:
	}
	return err
}

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
		return nil, syncer.Errf(syncer.KindInvalid, "module: %d bytes, limit %d", len(p.Module), plugins.MaxModuleBytes)
	}
	if err := did.Verify(p.DID, p.Preimage(), p.Signature); err != nil {
		return nil, syncer.Errf(syncer.KindUnauthorized, "publish signature by %q: %v", p.DID, err)
	}
	if r.node != nil {
		return r.node.GatePublish(ctx, p.DID, func(ctx context.Context) (*wire.PluginInfo, error) { return r.publish(ctx, p) })
	}
	return r.publish(ctx, p)
}

func (r *pluginRegistry) publish(ctx context.Context, p *wire.PublishPluginParams) (*wire.PluginInfo, error) {
	info, err := r.e.Publish(ctx, p.Module)
	if err != nil {
		if strings.HasPrefix(err.Error(), "plugins: store ") {
			return nil, err // a store fault: internal
		}
		return nil, syncer.Errf(syncer.KindInvalid, "module refused: %v", err)
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
		return nil, nil, syncer.Errf(syncer.KindNotFound, "plugin sha256:%s is not registered", h)
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
	err := db.Scan(ctx, syncer.KSBlobs, nil, func(k, v []byte) error {
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
	var b syncer.Batch
	for _, k := range keys {
		b.Delete(syncer.KSBlobs, k)
	}
	if err := db.Commit(ctx, &b); err != nil {
		return fmt.Errorf("move blobs: delete from the database: %w", err)
	}
	log.Info("moved blobs from the database to the blob store", "blobs", len(keys), "dir", blobs.Dir())
	return nil
}
