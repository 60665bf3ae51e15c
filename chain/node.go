package chain

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	cmtcfg "github.com/cometbft/cometbft/config"
	"github.com/cometbft/cometbft/crypto"
	cmtjson "github.com/cometbft/cometbft/libs/json"
	cmtlog "github.com/cometbft/cometbft/libs/log"
	"github.com/cometbft/cometbft/mempool"
	"github.com/cometbft/cometbft/node"
	"github.com/cometbft/cometbft/p2p"
	"github.com/cometbft/cometbft/privval"
	"github.com/cometbft/cometbft/proxy"
	"github.com/cometbft/cometbft/rpc/client/local"
	cmttypes "github.com/cometbft/cometbft/types"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire"
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
	// Gossip of proposals, block parts and votes to peers idles this long
	// when it has nothing to send (CometBFT's 100 ms): at blocks every
	// 200 ms a node that only follows (a full or light node) fell behind
	// its validators at the default.
	c.Consensus.PeerGossipSleepDuration = 10 * time.Millisecond
	// Peer connections flush their buffered messages at most this often
	// (CometBFT's 100 ms): each consensus step waited for it.
	c.P2P.FlushThrottleTimeout = 10 * time.Millisecond
	// Mempool limits (issue 22): one transaction at most wire.MaxTxBytes,
	// at most MempoolSize transactions and MempoolBytes in all (each
	// admitted by CheckTx only if its sender can pay its fee on top of
	// what it already queued), a cache of recently seen transactions so
	// the same bytes are not checked twice, and a recheck of what remains
	// after each block (the check state is rebuilt from it).
	c.Mempool.MaxTxBytes = wire.MaxTxBytes
	c.Mempool.Size = MempoolSize
	c.Mempool.MaxTxsBytes = MempoolBytes
	c.Mempool.CacheSize = MempoolCache
	c.Mempool.Recheck = true

	if ss := nc.StateSync; ss != nil {
		c.StateSync.Enable = true
		c.StateSync.RPCServers = ss.RPCServers
		c.StateSync.TrustHeight = ss.TrustHeight
		c.StateSync.TrustHash = ss.TrustHash
		if ss.TrustPeriodMs > 0 {
			c.StateSync.TrustPeriod = time.Duration(ss.TrustPeriodMs) * time.Millisecond
		}
		// Snapshots are listed by peers as they connect; a loopback network
		// needs no 15 s of discovery.
		c.StateSync.DiscoveryTime = 5 * time.Second
	}
	return c
}

// Mempool limits of every chain node (config.toml's [mempool]).
const (
	MempoolSize  = 5000
	MempoolBytes = 64 << 20
	MempoolCache = 20000
)

// NodeOptions configure Start.
type NodeOptions struct {
	Log *slog.Logger
	// Builtins overrides Builtins() (AppOptions.Builtins).
	Builtins map[wire.Hash]string
	// CommitTimeout bounds how long Local.Broadcast waits for a block
	// (default 2 minutes).
	CommitTimeout time.Duration
	// SnapshotInterval and SnapshotKeep override the home's NodeConfig
	// when > 0.
	SnapshotInterval int64
	SnapshotKeep     int
	// KeepHeights overrides the home's state_keep_heights when not 0
	// (-1: keep every version).
	KeepHeights int64
	// MempoolSenderLimit is AppOptions.MempoolSenderLimit (0: the
	// default, < 0: none).
	MempoolSenderLimit int
}

// DefaultKeepHeights is how many state tree versions a node keeps when its
// home and flags do not say: proofs are served at the last height only,
// and a snapshot being written holds its own version.
const DefaultKeepHeights = 1000

// SnapshotDir is where a home keeps its state-sync snapshots.
const SnapshotDir = "data/tenzro-snapshots"

// Node is a running chain node: the application over its own store and
// CometBFT in the same process with a local ABCI client.
type Node struct {
	App    *App
	Local  *Local
	Config *NodeConfig
	NodeID string
	// ChainID is the genesis chain id.
	ChainID string
	// GenesisHash is GenesisHash of the home's genesis file, and Genesis
	// its bytes (served to joining nodes).
	GenesisHash wire.Hash
	Genesis     []byte

	home string
	db   *store.DB
	cmt  *node.Node
	log  *slog.Logger
}

// Start opens the home's application store and starts CometBFT (a
// validator when the home's key is in the genesis validator set, else a
// full node that follows its peers). Stop it with Close.
func Start(ctx context.Context, home string, opts NodeOptions) (*Node, error) {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	nc, err := LoadNodeConfig(home)
	if err != nil {
		return nil, err
	}
	c := CometConfig(home, nc)
	if err := c.ValidateBasic(); err != nil {
		return nil, fmt.Errorf("chain node %s: config: %w", home, err)
	}
	db, err := store.Open(ctx, filepath.Join(home, AppDBDir), store.Options{Logger: log.With("component", "chain-store")})
	if err != nil {
		return nil, fmt.Errorf("chain node %s: %w", home, err)
	}
	snaps := SnapshotOptions{Dir: filepath.Join(home, SnapshotDir), Interval: nc.SnapshotInterval, Keep: nc.SnapshotKeep}
	if opts.SnapshotInterval > 0 {
		snaps.Interval = opts.SnapshotInterval
	}
	if opts.SnapshotKeep > 0 {
		snaps.Keep = opts.SnapshotKeep
	}
	keep := nc.StateKeepHeights
	if opts.KeepHeights != 0 {
		keep = opts.KeepHeights
	}
	switch {
	case keep == 0:
		keep = DefaultKeepHeights
	case keep < 0:
		keep = 0
	}
	app, err := NewApp(ctx, db, AppOptions{Log: log.With("component", "chain-app"), Builtins: opts.Builtins,
		StateDir: filepath.Join(home, StateDBDir), Snapshots: snaps, KeepHeights: keep, MempoolSenderLimit: opts.MempoolSenderLimit})
	if err != nil {
		db.Close()
		return nil, err
	}
	nk, err := p2p.LoadNodeKey(c.NodeKeyFile())
	if err != nil {
		app.Close()
		db.Close()
		return nil, fmt.Errorf("chain node %s: node key: %w", home, err)
	}
	genRaw, err := readCapped(c.GenesisFile(), maxGenesisFile)
	if err != nil {
		app.Close()
		db.Close()
		return nil, fmt.Errorf("chain node %s: genesis: %w", home, err)
	}
	gen, err := cmttypes.GenesisDocFromJSON(genRaw)
	if err != nil {
		app.Close()
		db.Close()
		return nil, fmt.Errorf("chain node %s: genesis: %w", home, err)
	}
	genHash, err := GenesisHash(genRaw)
	if err != nil {
		app.Close()
		db.Close()
		return nil, fmt.Errorf("chain node %s: %w", home, err)
	}
	pv := privval.LoadFilePV(c.PrivValidatorKeyFile(), c.PrivValidatorStateFile())
	n, err := node.NewNodeWithContext(ctx, c, pv, nk, proxy.NewLocalClientCreator(app),
		node.DefaultGenesisDocProviderFunc(c), cmtcfg.DefaultDBProvider,
		node.DefaultMetricsProvider(c.Instrumentation), slogAdapter{log.With("component", "cometbft")})
	if err != nil {
		app.Close()
		db.Close()
		return nil, fmt.Errorf("chain node %s: %w", home, err)
	}
	if err := n.Start(); err != nil {
		app.Close()
		db.Close()
		return nil, fmt.Errorf("chain node %s: start: %w", home, err)
	}
	timeout := opts.CommitTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	h, hash := app.LastCommit()
	log.Info("chain node running", "home", home, "chain_id", gen.ChainID, "genesis_hash", genHash, "moniker", nc.Moniker, "node_id", nk.ID(), "rpc", "http://"+nc.RPCAddr,
		"p2p", nc.P2PAddr, "app_height", h, "app_hash", hash)
	return &Node{App: app, Local: &Local{app: app, mp: local.New(n), timeout: timeout}, Config: nc, NodeID: string(nk.ID()), ChainID: gen.ChainID,
		GenesisHash: genHash, Genesis: genRaw, home: home, db: db, cmt: n, log: log}, nil
}

// WaitCommitted waits until the application has committed a block (the
// genesis state is durable with the first one), logging every interval
// while it waits (a full node waits for its peers).
func (n *Node) WaitCommitted(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ch := n.App.Changed()
		if h, _ := n.App.LastCommit(); h > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		case <-t.C:
			n.log.Info("waiting for the chain's first block (a full node needs its peers)", "home", n.home, "peers", n.Config.PersistentPeers)
		}
	}
}

// Close stops CometBFT and closes the application's store.
func (n *Node) Close() error {
	n.log.Info("chain node stopping", "home", n.home)
	var errs []error
	if err := n.cmt.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stop cometbft: %w", err))
	}
	n.cmt.Wait()
	if !waitAddrBook(n.cmt) {
		n.log.Warn("cannot wait for CometBFT's address book to finish saving (its reactor changed shape); config/addrbook.json may still be written after Close")
	}
	if err := n.App.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := n.db.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Info is what other nodes need to follow this one: the chain id, its
// CometBFT node id and P2P address (a persistent peer: id@host:port).
func (n *Node) Info() wire.ChainInfo {
	h, _ := n.App.LastCommit()
	gh := n.GenesisHash
	return wire.ChainInfo{ChainID: n.ChainID, NodeID: n.NodeID, P2PAddr: n.Config.P2PAddr, RPCAddr: n.Config.RPCAddr, Height: h,
		Peer: n.NodeID + "@" + n.Config.P2PAddr, GenesisHash: &gh}
}

// Local is syncer.Chain over an App and a CometBFT node in this process:
// reads come from the App's committed state, a transaction enters the
// node's mempool (CheckTx) and its result comes from the App when the block
// holding it commits (no event subscription, so no limit on how many wait).
type Local struct {
	app     *App
	mp      *local.Local
	timeout time.Duration
}

// View implements syncer.Chain.
func (l *Local) View(ctx context.Context, fn func(machine.View) error) error {
	return l.app.View(ctx, fn)
}

// Changed implements syncer.Chain.
func (l *Local) Changed() <-chan struct{} { return l.app.Changed() }

// Submit implements syncer.Chain: the transaction enters the node's
// mempool (CheckTx) and its result comes from the App when its block
// commits (or when a recheck drops it).
func (l *Local) Submit(ctx context.Context, tx []byte) (machine.Pending, error) {
	h := sha256.Sum256(tx)
	ch := l.app.watch(h)
	res, err := l.mp.BroadcastTxSync(ctx, tx)
	if err != nil {
		l.app.unwatch(h, ch)
		if isTxInCache(err) {
			// The same bytes again (issue 22, finding 11: a replayed
			// enrolment answered "internal error"): a precise refusal.
			return nil, Refusal(CodeNonce, fmt.Sprintf("replayed transaction %X: these exact bytes were already submitted to this node (they are in a block or waiting in the mempool); sign a new request with a new nonce", h[:8]))
		}
		return nil, fmt.Errorf("broadcast to the chain: %w", err)
	}
	if res.Code != CodeOK {
		l.app.unwatch(h, ch)
		return nil, Refusal(res.Code, res.Log)
	}
	return &pending{app: l.app, h: h, ch: ch, timeout: l.timeout}, nil
}

type pending struct {
	app     *App
	h       [32]byte
	ch      chan TxOutcome
	timeout time.Duration
}

func (p *pending) Wait(ctx context.Context) (*machine.TxResult, error) {
	defer p.app.unwatch(p.h, p.ch)
	return waitOutcome(ctx, p.ch, p.timeout)
}

func waitOutcome(ctx context.Context, ch chan TxOutcome, timeout time.Duration) (*machine.TxResult, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case o := <-ch:
		if o.Code != CodeOK {
			return nil, Refusal(o.Code, o.Log)
		}
		return &machine.TxResult{Height: o.Height, Data: o.Data}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the transaction's block: %w", ctx.Err())
	case <-t.C:
		return nil, fmt.Errorf("the transaction was not committed within %s (is the chain making blocks?)", timeout)
	}
}

// slogAdapter routes CometBFT's logs to slog (its Info chatter at debug).
type slogAdapter struct{ l *slog.Logger }

func (s slogAdapter) Debug(msg string, kv ...any) { s.l.Debug(msg, kv...) }
func (s slogAdapter) Info(msg string, kv ...any)  { s.l.Debug(msg, kv...) }
func (s slogAdapter) Error(msg string, kv ...any) { s.l.Warn(msg, kv...) }
func (s slogAdapter) With(kv ...any) cmtlog.Logger {
	return slogAdapter{s.l.With(kv...)}
}

// FileVoteSigner is a home's CometBFT validator key as the signer of challenge
// votes (syncer.VoteSigner): votes are domain-separated
// (wire.DomainChallengeVote), so they can never be taken for a consensus
// message.
type FileVoteSigner struct {
	addr []byte
	priv crypto.PrivKey
}

// Address implements syncer.VoteSigner.
func (v *FileVoteSigner) Address() []byte { return v.addr }

// Sign implements syncer.VoteSigner.
func (v *FileVoteSigner) Sign(msg []byte) ([]byte, error) { return v.priv.Sign(msg) }

// LoadVoteSigner reads the validator key of the chain home.
func LoadVoteSigner(home string) (*FileVoteSigner, error) {
	nc, err := LoadNodeConfig(home)
	if err != nil {
		return nil, err
	}
	path := CometConfig(home, nc).PrivValidatorKeyFile()
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var k privval.FilePVKey
	if err := cmtjson.Unmarshal(raw, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if k.PrivKey == nil {
		return nil, fmt.Errorf("%s: no private key", path)
	}
	return &FileVoteSigner{addr: k.PrivKey.PubKey().Address(), priv: k.PrivKey}, nil
}

// isTxInCache says whether err is CometBFT's refusal of a transaction its
// mempool cache has seen (the local client passes the error through;
// compare its text too, in case a layer wrapped it as a string).
func isTxInCache(err error) bool {
	return errors.Is(err, mempool.ErrTxInCache) || strings.Contains(err.Error(), mempool.ErrTxInCache.Error())
}
