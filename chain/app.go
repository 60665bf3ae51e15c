package chain

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tenzro/train/attest"
	"log/slog"
	"sync"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/cometbft/cometbft/crypto/ed25519"
	"github.com/cosmos/iavl"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/abi"
	"github.com/tenzro/train/plugins/builtin"
	"github.com/tenzro/train/wire"
)

// AppVersion is the application's protocol version reported in Info.
const AppVersion uint64 = 2

// Meta keys (ksMeta): the last committed height, block, state hash and app
// hash, and the format marker of the state.
var (
	metaHeight    = []byte("chain/height")
	metaAppHash   = []byte("chain/app-hash")
	metaStateHash = []byte("chain/state-hash") // the state tree's root
	metaBlockTime = []byte("chain/block-time")
	metaBlockHash = []byte("chain/block-hash")
	metaFormat    = []byte("chain/format")
)

// stateFormat is the version of the state layout (the machine's key spaces
// under StateKey, the app hash over the IAVL state tree). A store written
// by another layout is refused at start.
const stateFormat = 3

// Builtins maps the SHA-256 of every built-in plugin module embedded in
// this binary (and of the native engine's implementations) to its rule
// name: what a posting's built-in rule references must match.
func Builtins() (map[wire.Hash]string, error) {
	out := machine.NativeBuiltins()
	for _, stem := range builtin.Names() {
		mod, err := builtin.Module(stem)
		if err != nil {
			return nil, fmt.Errorf("built-in %s: %w", stem, err)
		}
		raw, ok, err := abi.FindCustomSection(mod, abi.ManifestSection)
		if err != nil || !ok {
			return nil, fmt.Errorf("built-in %s: no manifest (%v)", stem, err)
		}
		m, err := abi.ParseManifest(raw)
		if err != nil {
			return nil, fmt.Errorf("built-in %s: %w", stem, err)
		}
		out[sha256.Sum256(mod)] = m.ID
	}
	return out, nil
}

// App is the ABCI 2.0 application hosting machine.Machine. CometBFT calls
// it on one connection at a time (the local client serializes them); mu
// guards the committed state against the node's concurrent reads (View).
type App struct {
	abci.BaseApplication

	kv    machine.KV
	state stateKV
	tree  *stateTree
	m     *machine.Machine
	log   *slog.Logger

	mu        sync.RWMutex
	height    int64         // last committed height
	appHash   wire.Hash     // last committed app hash
	stateHash wire.Hash     // the state tree's root at height
	block     machine.Block // the last committed block
	runLog    runLog
	// committed is the state tree at height (nil before the first
	// commit): proofs are built from it.
	committed *iavl.ImmutableTree
	// recent are the last recentProvable committed heights' trees and run
	// logs, oldest first: proven queries at a height a light client
	// verified a header for, while the chain moves on.
	recent []provable

	snap *snapshotter
	keep int64 // AppOptions.KeepHeights
	// restoring is the state-sync restore in progress (CometBFT's
	// connection calls, one at a time).
	restoring  *restore
	restoredAt int64

	closeOnce sync.Once
	closeErr  error

	// pending is the finalized block (or InitChain) not committed yet.
	pending *pendingBlock

	// check is CheckTx's state: the committed state plus the ante effects
	// (nonces used, fees charged) of the transactions admitted to the
	// mempool since the last commit; Commit drops it and CometBFT's
	// recheck of the remaining mempool rebuilds it.
	cmu   sync.Mutex
	check *machine.Overlay
	// pendingBy counts, per signer, the transactions CheckTx admitted
	// since the last commit (new ones and the recheck of what remained):
	// Commit resets it with check, and the recheck counts again what is
	// still waiting, so a transaction stops counting once it is in a block
	// or dropped. senderLimit caps it (< 0: no cap).
	pendingBy   map[string]int
	senderLimit int

	// waiters and commit notification (Local).
	wmu        sync.Mutex
	waiters    map[[32]byte][]chan TxOutcome
	changed    chan struct{}
	restoreErr error
}

type pendingBlock struct {
	o *machine.Overlay
	// genesis: InitChain's writes, committed with the first block;
	// parent: a block's genesis, when it is the first.
	genesis   bool
	parent    *pendingBlock
	height    int64
	block     machine.Block
	stateHash wire.Hash
	appHash   wire.Hash
	runLog    runLog
	outcomes  []TxOutcome
}

// TxOutcome is a transaction's fate: the height of its block and its
// result, or a refusal (Code ≠ 0) at CheckTx or in its block.
type TxOutcome struct {
	Hash   [32]byte
	Height int64
	Code   uint32
	Log    string
	Data   []byte
}

var _ abci.Application = (*App)(nil)

// AppOptions configure an App.
type AppOptions struct {
	Log *slog.Logger
	// Builtins overrides Builtins() (tests with a fake engine).
	Builtins map[wire.Hash]string
	// StateDir is the state tree's directory (StateDBDir of a home); ""
	// keeps it in memory (only with a store that is in memory too).
	StateDir string
	// Snapshots configures state-sync snapshots (none when Dir is "").
	Snapshots SnapshotOptions
	// KeepHeights is how many of the newest state tree versions are kept
	// (older ones are pruned at each commit); 0 keeps every version.
	KeepHeights int64
	// Evidence overrides the machine's evidence verifier (nil:
	// attest.NewConsensusVerifier, what every validator runs).
	Evidence machine.EvidenceVerifier
	// MempoolSenderLimit is how many transactions one signer may have
	// waiting in this node's mempool at once; CheckTx refuses more with
	// CodeSenderBusy until a block takes some. 0 means
	// DefaultMempoolSenderLimit, < 0 no limit. Node policy (a flag), not
	// consensus: it only decides what this node queues and relays.
	MempoolSenderLimit int
}

// DefaultMempoolSenderLimit is the default per-signer share of a node's
// mempool: 1/20 of MempoolSize, and above what one honest signer queues
// between two blocks (a syncer's commits of one round's fragments, a
// trainer's submissions of one round; see docs/RATIONALE.md).
const DefaultMempoolSenderLimit = MempoolSize / 20

// NewApp opens the application over kv (the chain's own store), resuming
// from the last committed height.
func NewApp(ctx context.Context, kv machine.KV, opts AppOptions) (*App, error) {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	bi := opts.Builtins
	if bi == nil {
		var err error
		if bi, err = Builtins(); err != nil {
			return nil, fmt.Errorf("chain: %w", err)
		}
	}
	ev := opts.Evidence
	if ev == nil {
		ev = attest.NewConsensusVerifier()
	}
	tree, err := openStateTree(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("chain: %w", err)
	}
	a := &App{kv: kv, state: stateKV{kv}, tree: tree, log: log, keep: opts.KeepHeights, m: machine.NewMachine(machine.MachineConfig{Builtins: bi, Logger: log, Evidence: ev}),
		waiters: map[[32]byte][]chan TxOutcome{}, changed: make(chan struct{}), runLog: emptyRunLog,
		pendingBy: map[string]int{}, senderLimit: opts.MempoolSenderLimit}
	if a.senderLimit == 0 {
		a.senderLimit = DefaultMempoolSenderLimit
	}
	if err := a.open(ctx); err != nil {
		tree.close()
		return nil, err
	}
	if opts.Snapshots.Dir != "" {
		if a.snap, err = newSnapshotter(opts.Snapshots, log); err != nil {
			tree.close()
			return nil, err
		}
	}
	return a, nil
}

// Close closes the state tree (the caller closes the flat store) after any
// snapshot being written.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		if a.snap != nil {
			a.snap.wait()
		}
		a.closeErr = a.tree.close()
	})
	return a.closeErr
}

// open resumes from the last committed height: the flat store's commit
// record, and the state tree at that height (a tree one height ahead, from
// a crash between the two commits, is rewound).
func (a *App) open(ctx context.Context) error {
	kv := a.kv
	raw, err := kv.Get(ctx, ksMeta, metaHeight)
	switch {
	case errNotFound(err):
		if err := a.checkEmpty(ctx); err != nil {
			return err
		}
		return a.tree.rewind(0)
	case err != nil:
		return fmt.Errorf("chain: read last height: %w", err)
	case len(raw) != 8:
		return fmt.Errorf("chain: last height record is %d bytes, want 8", len(raw))
	}
	f, err := kv.Get(ctx, ksMeta, metaFormat)
	if err != nil || len(f) != 8 || binary.BigEndian.Uint64(f) != stateFormat {
		return fmt.Errorf("chain: this chain store was written by an older version of tenzro-node (state format %x, want %d): start from a new home", f, stateFormat)
	}
	a.height = int64(binary.BigEndian.Uint64(raw))
	for _, m := range []struct {
		key []byte
		dst []byte
	}{{metaAppHash, a.appHash[:]}, {metaStateHash, a.stateHash[:]}} {
		h, err := kv.Get(ctx, ksMeta, m.key)
		if err != nil || len(h) != 32 {
			return fmt.Errorf("chain: read %s (height %d): %v (%d bytes)", m.key, a.height, err, len(h))
		}
		copy(m.dst, h)
	}
	bt, err := kv.Get(ctx, ksMeta, metaBlockTime)
	if err != nil || len(bt) != 8 {
		return fmt.Errorf("chain: read last block time: %v", err)
	}
	bh, err := kv.Get(ctx, ksMeta, metaBlockHash)
	if err != nil {
		return fmt.Errorf("chain: read last block hash: %w", err)
	}
	a.block = machine.Block{Height: a.height, TimeMs: int64(binary.BigEndian.Uint64(bt)), Hash: bh}
	if a.runLog, err = readRunLog(ctx, a.state); err != nil {
		return err
	}
	switch v := a.tree.version(); {
	case v > a.height:
		a.log.Warn("state tree ahead of the chain store (a crash between the two commits): rewinding it", "tree", v, "height", a.height)
		if err := a.tree.rewind(a.height); err != nil {
			return err
		}
	case v < a.height:
		return fmt.Errorf("%w: tree at version %d, chain at height %d (start from a new home, or state-sync)", errTreeMissing, v, a.height)
	}
	if a.committed, err = a.tree.at(a.height); err != nil {
		return err
	}
	if root := immutableRoot(a.committed); root != a.stateHash {
		return fmt.Errorf("chain: state tree root %s at height %d, the chain store says %s", root, a.height, a.stateHash)
	}
	a.remember()
	return nil
}

// checkEmpty refuses a store that holds state but no commit record (a
// store of the chain's first version, or not a chain store).
func (a *App) checkEmpty(ctx context.Context) error {
	found := false
	err := a.kv.Scan(ctx, ksState, nil, func(_, _ []byte) error { found = true; return errStop })
	if err != nil && !errors.Is(err, errStop) {
		return fmt.Errorf("chain: %w", err)
	}
	if found {
		return errors.New("chain: this store holds state without a commit record: it was written by an older version of tenzro-node (start from a new home)")
	}
	return nil
}

var errStop = errors.New("stop")

// Machine is the state machine the app hosts.
func (a *App) Machine() *machine.Machine { return a.m }

// LastCommit returns the last committed height and app hash.
func (a *App) LastCommit() (int64, wire.Hash) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.height, a.appHash
}

// View runs fn over the last committed state (read-only) and block. Commit
// waits for it, so fn must be quick.
func (a *App) View(ctx context.Context, fn func(machine.View) error) error {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return fn(machine.View{KV: machine.ReadOnly(a.state), Block: a.block})
}

// Info reports the last committed height and app hash, so CometBFT replays
// any block the application has not committed.
func (a *App) Info(context.Context, *abci.RequestInfo) (*abci.ResponseInfo, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	res := &abci.ResponseInfo{Data: "tenzro-train", Version: machine.Version, AppVersion: AppVersion, LastBlockHeight: a.height}
	if a.height > 0 {
		res.LastBlockAppHash = append([]byte(nil), a.appHash[:]...)
	}
	return res, nil
}

// GenesisState is the application's part of the genesis file (app_state).
type GenesisState = machine.Genesis

// GenesisAccount allocates Balance attoTNZO to DID.
type GenesisAccount = machine.GenesisAccount

// ParseGenesisState decodes app_state strictly (machine.ParseGenesis).
func ParseGenesisState(b []byte) (*GenesisState, error) { return machine.ParseGenesis(b) }

// InitChain writes the genesis state and returns the genesis app hash. The
// genesis writes become durable with the first block's Commit.
func (a *App) InitChain(ctx context.Context, req *abci.RequestInitChain) (*abci.ResponseInitChain, error) {
	g, err := ParseGenesisState(req.AppStateBytes)
	if err != nil {
		return nil, err
	}
	if g.Validators, err = validatorSet(req.Validators); err != nil {
		return nil, fmt.Errorf("genesis: %w", err)
	}
	g.ChainID = req.ChainId
	h := req.InitialHeight - 1
	o := machine.NewOverlay(a.state)
	blk := machine.Block{Height: h, TimeMs: req.Time.UnixMilli(), Hash: []byte{}}
	if err := a.m.InitGenesis(ctx, o, blk, g); err != nil {
		return nil, fmt.Errorf("genesis: %w", err)
	}
	a.tree.begin(h + 1)
	if err := a.tree.apply(blockWrites(o)); err != nil {
		return nil, fmt.Errorf("genesis: %w", err)
	}
	p := &pendingBlock{o: o, genesis: true, height: h, block: blk, stateHash: a.tree.workingRoot()}
	if err := a.fillRunLog(ctx, p, emptyRunLog); err != nil {
		return nil, err
	}
	a.pending = p
	a.log.Info("chain genesis", "chain_id", req.ChainId, "accounts", len(g.Accounts), "candidates", len(g.Candidates), "validators", len(g.Validators), "faucet", g.Faucet, "app_hash", p.appHash)
	return &abci.ResponseInitChain{AppHash: p.appHash[:]}, nil
}

// fillRunLog recomputes the run log when the block appended to it and sets
// the app hash.
func (a *App) fillRunLog(ctx context.Context, p *pendingBlock, prev runLog) error {
	n, err := machine.RunLogSize(ctx, p.o)
	if err != nil {
		return err
	}
	p.runLog = prev
	if n != prev.size {
		if p.runLog, err = readRunLog(ctx, p.o); err != nil {
			return err
		}
	}
	p.appHash = AppHash(p.height, p.stateHash, p.runLog.size, p.runLog.root)
	return nil
}

// CheckTx does the cheap checks: size and field caps, decoding, then the
// machine's ante (chain id, signature, nonce, fee) against the check state,
// so that a sender whose queued transactions already spend its balance is
// refused here, before any block, and last the sender's mempool share: a
// signer with MempoolSenderLimit transactions waiting is refused
// (CodeSenderBusy) until a block takes some. State rules run in
// FinalizeBlock. A recheck that fails tells the transaction's waiter
// (Local): the mempool drops it.
func (a *App) CheckTx(ctx context.Context, req *abci.RequestCheckTx) (*abci.ResponseCheckTx, error) {
	err := a.precheck(ctx, req.Tx)
	if err == nil {
		return &abci.ResponseCheckTx{Code: CodeOK}, nil
	}
	code := codeOf(err)
	if code == CodeInternal {
		a.log.Error("check of a transaction failed inside the application", "err", err)
	}
	if req.Type == abci.CheckTxType_Recheck {
		a.notify([]TxOutcome{{Hash: sha256.Sum256(req.Tx), Code: code, Log: err.Error()}})
	}
	return &abci.ResponseCheckTx{Code: code, Log: err.Error()}, nil
}

func (a *App) precheck(ctx context.Context, b []byte) error {
	tx, err := wire.DecodeTx(b)
	if err != nil {
		return err
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	a.cmu.Lock()
	defer a.cmu.Unlock()
	if a.check == nil {
		var base machine.KV = a.state
		if p := a.pending; a.height == 0 && p != nil && p.genesis {
			base = p.o // before the first block: the genesis not committed yet
		}
		a.check = machine.NewOverlay(machine.ReadOnly(base))
	}
	signer, err := a.m.AnteAdmit(ctx, a.check, a.block, tx, a.admitSender)
	if err == nil && signer != "" {
		a.pendingBy[signer]++
	}
	return err
}

// admitSender refuses a signer that already has its share of the mempool
// waiting (an exempt kind, signer "", is not counted). Caller holds cmu.
func (a *App) admitSender(signer string) error {
	if signer == "" || a.senderLimit < 0 {
		return nil
	}
	if n := a.pendingBy[signer]; n >= a.senderLimit {
		return errf(CodeSenderBusy, "mempool share used: %s already has %d transactions waiting in this node's mempool, "+
			"at most %d per sender (tenzro-node --mempool-sender-limit); send again after the next block", signer, n, a.senderLimit)
	}
	return nil
}

// FinalizeBlock runs the block's timers (Machine.BeginBlock), then each
// transaction in order, each all or nothing, at the block's height, time
// and hash (never a wall clock), and returns the new app hash. Nothing is
// durable until Commit.
func (a *App) FinalizeBlock(ctx context.Context, req *abci.RequestFinalizeBlock) (*abci.ResponseFinalizeBlock, error) {
	var base machine.KV = a.state
	a.mu.RLock()
	prevLog := a.runLog
	prevMs := a.block.TimeMs
	a.mu.RUnlock()
	var gen *pendingBlock
	if p := a.pending; p != nil && p.genesis && p.height == req.Height-1 {
		gen, base, prevLog, prevMs = p, p.o, p.runLog, p.block.TimeMs
	}
	// A pending block of this height that was never committed is dropped:
	// CometBFT finalizes the block again from scratch.
	o := machine.NewOverlay(base)
	blk := machine.Block{Height: req.Height, TimeMs: req.Time.UnixMilli(), PrevTimeMs: prevMs, Hash: append([]byte(nil), req.Hash...)}
	if err := a.m.BeginBlock(ctx, o, blk); err != nil {
		return nil, fmt.Errorf("finalize block %d: %w", req.Height, err)
	}
	res := &abci.ResponseFinalizeBlock{TxResults: make([]*abci.ExecTxResult, len(req.Txs))}
	outcomes := make([]TxOutcome, len(req.Txs))
	for i, raw := range req.Txs {
		r := a.deliver(ctx, o, blk, raw)
		res.TxResults[i] = r
		outcomes[i] = TxOutcome{Hash: sha256.Sum256(raw), Height: req.Height, Code: r.Code, Log: r.Log, Data: r.Data}
	}
	a.tree.begin(req.Height)
	if gen != nil {
		if err := a.tree.apply(blockWrites(gen.o)); err != nil {
			return nil, fmt.Errorf("finalize block %d: %w", req.Height, err)
		}
	}
	if err := a.tree.apply(blockWrites(o)); err != nil {
		return nil, fmt.Errorf("finalize block %d: %w", req.Height, err)
	}
	p := &pendingBlock{o: o, parent: gen, height: req.Height, block: blk, outcomes: outcomes, stateHash: a.tree.workingRoot()}
	if err := a.fillRunLog(ctx, p, prevLog); err != nil {
		return nil, fmt.Errorf("finalize block %d: %w", req.Height, err)
	}
	a.pending = p
	res.AppHash = append([]byte(nil), p.appHash[:]...)
	return res, nil
}

func (a *App) deliver(ctx context.Context, o *machine.Overlay, blk machine.Block, raw []byte) *abci.ExecTxResult {
	tx, err := wire.DecodeTx(raw)
	if err != nil {
		return &abci.ExecTxResult{Code: codeOf(err), Log: err.Error()}
	}
	data, err := a.m.Apply(ctx, o, blk, tx)
	if err != nil {
		code := codeOf(err)
		if code == CodeInternal {
			a.log.Error("transaction failed inside the application", "height", blk.Height, "type", tx.Type, "err", err)
		}
		return &abci.ExecTxResult{Code: code, Log: err.Error()}
	}
	return &abci.ExecTxResult{Code: CodeOK, Data: data, Events: []abci.Event{{Type: "tenzro", Attributes: []abci.EventAttribute{{Key: "type", Value: tx.Type, Index: true}}}}}
}

// Commit saves the state tree's version of the finalized block, then makes
// the block's writes (with the genesis writes before the first block) and
// the new height, block and hashes durable in one atomic batch of the flat
// store (a crash between the two leaves the tree one version ahead: open
// rewinds it), then tells the waiters.
func (a *App) Commit(ctx context.Context, _ *abci.RequestCommit) (*abci.ResponseCommit, error) {
	p := a.pending
	if p == nil || p.genesis {
		return nil, errors.New("chain: commit without a finalized block")
	}
	writes := p.o
	if p.parent != nil {
		if err := p.o.Flush(ctx); err != nil {
			return nil, err
		}
		writes = p.parent.o
	}
	root, err := a.tree.save(p.height)
	if err != nil {
		return nil, fmt.Errorf("chain: commit height %d: %w", p.height, err)
	}
	if root != p.stateHash {
		return nil, fmt.Errorf("chain: commit height %d: state tree saved root %s, finalized %s", p.height, root, p.stateHash)
	}
	committed, err := a.tree.at(p.height)
	if err != nil {
		return nil, fmt.Errorf("chain: commit height %d: %w", p.height, err)
	}
	var b machine.Batch
	for _, w := range blockWrites(writes) {
		if w.value == nil {
			b.Delete(ksState, w.key)
		} else {
			b.Set(ksState, w.key, w.value)
		}
	}
	b.Set(ksMeta, metaHeight, binary.BigEndian.AppendUint64(nil, uint64(p.height)))
	b.Set(ksMeta, metaAppHash, append([]byte(nil), p.appHash[:]...))
	b.Set(ksMeta, metaStateHash, append([]byte(nil), p.stateHash[:]...))
	b.Set(ksMeta, metaBlockTime, binary.BigEndian.AppendUint64(nil, uint64(p.block.TimeMs)))
	b.Set(ksMeta, metaBlockHash, append([]byte{}, p.block.Hash...))
	b.Set(ksMeta, metaFormat, binary.BigEndian.AppendUint64(nil, stateFormat))
	a.mu.Lock()
	if err := a.kv.Commit(ctx, &b); err != nil {
		a.mu.Unlock()
		return nil, fmt.Errorf("chain: commit height %d: %w", p.height, err)
	}
	a.height, a.appHash, a.stateHash, a.block, a.runLog, a.committed = p.height, p.appHash, p.stateHash, p.block, p.runLog, committed
	a.remember()
	a.pending = nil
	a.cmu.Lock()
	a.check = nil
	clear(a.pendingBy)
	a.cmu.Unlock()
	a.mu.Unlock()
	if err := a.tree.prune(p.height, a.keep); err != nil {
		a.log.Warn("state tree versions not pruned yet", "height", p.height, "err", err)
	}
	if a.snap != nil {
		a.snap.maybeTake(a, p.height)
	}
	a.notify(p.outcomes)
	a.wmu.Lock()
	close(a.changed)
	a.changed = make(chan struct{})
	a.wmu.Unlock()
	return &abci.ResponseCommit{}, nil
}

// Changed returns a channel closed at the next commit.
func (a *App) Changed() <-chan struct{} {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return a.changed
}

// watch registers interest in a transaction's outcome (by SHA-256 of its
// bytes, CometBFT's transaction hash).
func (a *App) watch(h [32]byte) chan TxOutcome {
	ch := make(chan TxOutcome, 1)
	a.wmu.Lock()
	a.waiters[h] = append(a.waiters[h], ch)
	a.wmu.Unlock()
	return ch
}

func (a *App) unwatch(h [32]byte, ch chan TxOutcome) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	ws := a.waiters[h]
	for i, c := range ws {
		if c == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(a.waiters, h)
	} else {
		a.waiters[h] = ws
	}
}

func (a *App) notify(outs []TxOutcome) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	for _, o := range outs {
		for _, ch := range a.waiters[o.Hash] {
			select {
			case ch <- o:
			default:
			}
		}
		delete(a.waiters, o.Hash)
	}
}

// Query paths (data is the argument; only the last committed height is
// served: Height 0 or equal to it).
const (
	QueryBalance   = "/balance"   // data: DID → decimal attoTNZO
	QueryRun       = "/run"       // data: task_id → the run's state (JSON)
	QueryCandidate = "/candidate" // data: DID → wire.SyncerCandidate JSON
	QueryRunLog    = "/runlog"    // → RunLogInfo JSON
	QueryNonce     = "/nonce"     // data: DID → last nonce (decimal), "" when none
	QueryReceipt   = "/receipt"   // data: task_id → the signed receipt (wire.Receipt JSON)
	QuerySealed    = "/sealed"    // data: task_id → machine.SealedRun JSON (run root, election)
	// QueryBalanceAcct: data account name (did:…, escrow:…, stake:…,
	// syncer-stake:…, issuer) → decimal attoTNZO.
	QueryBalanceAcct = "/account"
)

// RunLogInfo answers /runlog.
type RunLogInfo struct {
	Size uint64    `json:"size"`
	Root wire.Hash `json:"root"`
}

// Query answers reads from the last committed state.
func (a *App) Query(ctx context.Context, req *abci.RequestQuery) (*abci.ResponseQuery, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if req.Prove && req.Height != 0 && req.Height != a.height {
		return a.proveQueryAt(req), nil
	}
	if req.Height != 0 && req.Height != a.height {
		return &abci.ResponseQuery{Code: CodeInvalid, Log: fmt.Sprintf("height %d: only the last committed height %d is served", req.Height, a.height), Height: a.height}, nil
	}
	if req.Prove {
		return a.proveQuery(req), nil
	}
	v, err := a.query(ctx, req.Path, string(req.Data))
	if err != nil {
		return &abci.ResponseQuery{Code: codeOf(err), Log: err.Error(), Height: a.height}, nil
	}
	return &abci.ResponseQuery{Code: CodeOK, Key: req.Data, Value: v, Height: a.height}, nil
}

func (a *App) query(ctx context.Context, path, arg string) ([]byte, error) {
	kv := machine.ReadOnly(a.state)
	switch path {
	case QueryBalance:
		b, err := machine.Balance(ctx, kv, arg)
		if err != nil {
			return nil, err
		}
		return []byte(b.Balance), nil
	case QueryBalanceAcct:
		b, err := machine.AccountBalance(ctx, kv, arg)
		if err != nil {
			return nil, err
		}
		return []byte(b.String()), nil
	case QueryRun:
		return machine.RunJSON(ctx, kv, arg)
	case QueryCandidate:
		return get(ctx, kv, machine.KSMeta, []byte("cand/"+arg), "syncer candidate")
	case QueryReceipt:
		return get(ctx, kv, machine.KSReceipts, []byte(arg), "signed receipt for run")
	case QueryNonce:
		n, ok, err := machine.LastNonce(ctx, kv, arg)
		if err != nil || !ok {
			return []byte{}, err
		}
		return []byte(fmt.Sprint(n)), nil
	case QueryRunProof:
		return a.runProof(ctx, arg)
	case QuerySealed:
		r, err := machine.SealedRunOf(ctx, kv, arg)
		if err != nil {
			return nil, err
		}
		r.Height = a.height
		return json.Marshal(r)
	case QueryRunLog:
		return json.Marshal(RunLogInfo{Size: a.runLog.size, Root: a.runLog.root})
	case QueryCommit, QueryRunLogLeaf, QueryState:
		key, err := ProvableKey(path, arg)
		if err != nil {
			return nil, err
		}
		v, err := a.kv.Get(ctx, ksState, key)
		if errNotFound(err) {
			return nil, errf(CodeNotFound, "no state at %q", key)
		}
		return v, err
	}
	return nil, errf(CodeNotFound, "unknown query path %q (want %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s or %s)", path, QueryBalance, QueryBalanceAcct, QueryRun,
		QueryCandidate, QueryReceipt, QuerySealed, QueryRunLog, QueryRunProof, QueryNonce, QueryCommit, QueryRunLogLeaf, QueryState)
}

func get(ctx context.Context, kv machine.KV, ks machine.Keyspace, key []byte, what string) ([]byte, error) {
	v, err := kv.Get(ctx, ks, key)
	if errNotFound(err) {
		return nil, errf(CodeNotFound, "no %s %q", what, key)
	}
	return v, err
}

// validatorSet is the machine's record of the genesis validators: each
// Ed25519 key's CometBFT address (the first 20 bytes of its SHA-256) and
// power. The application never changes the set, so these are the keys that
// vote on challenges for the chain's life.
func validatorSet(us []abci.ValidatorUpdate) ([]machine.Validator, error) {
	out := make([]machine.Validator, 0, len(us))
	for i, u := range us {
		pk := u.PubKey.GetEd25519()
		if len(pk) != ed25519.PubKeySize {
			return nil, fmt.Errorf("validator %d: only Ed25519 consensus keys are supported", i)
		}
		out = append(out, machine.Validator{Address: wire.HexBytes(ed25519.PubKey(pk).Address()), PubKey: append(wire.HexBytes{}, pk...), Power: u.Power})
	}
	return out, nil
}

// ValidatorUpdate is the ABCI form of an Ed25519 validator key with power
// (for chain.Manual's genesis validators).
func ValidatorUpdate(pub []byte, power int64) abci.ValidatorUpdate {
	return abci.Ed25519ValidatorUpdate(pub, power)
}
