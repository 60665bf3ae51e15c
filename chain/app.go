package chain

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// AppVersion is the application's protocol version reported in Info.
const AppVersion uint64 = 1

// Meta keys (ksMeta): the last committed height and app hash.
var (
	metaHeight  = []byte("chain/height")
	metaAppHash = []byte("chain/app-hash")
)

// App is the ABCI 2.0 application. CometBFT calls it on one connection at
// a time (the local client serializes them); mu guards it anyway.
type App struct {
	abci.BaseApplication

	kv  syncer.KV
	log *slog.Logger

	mu      sync.Mutex
	height  int64     // last committed height
	appHash wire.Hash // last committed app hash
	// pending holds InitChain's and the finalized block's writes until
	// Commit makes them durable in one batch.
	pending       *overlay
	pendingHeight int64
	pendingHash   wire.Hash
}

var _ abci.Application = (*App)(nil)

// NewApp opens the application over kv (the chain's own store), resuming
// from the last committed height.
func NewApp(ctx context.Context, kv syncer.KV, log *slog.Logger) (*App, error) {
	if log == nil {
		log = slog.Default()
	}
	a := &App{kv: kv, log: log}
	raw, err := kv.Get(ctx, ksMeta, metaHeight)
	switch {
	case errors.Is(err, syncer.ErrNotFound):
		return a, nil
	case err != nil:
		return nil, fmt.Errorf("chain: read last height: %w", err)
	case len(raw) != 8:
		return nil, fmt.Errorf("chain: last height record is %d bytes, want 8", len(raw))
	}
	a.height = int64(binary.BigEndian.Uint64(raw))
	h, err := kv.Get(ctx, ksMeta, metaAppHash)
	if err != nil || len(h) != 32 {
		return nil, fmt.Errorf("chain: read last app hash (height %d): %v (%d bytes)", a.height, err, len(h))
	}
	copy(a.appHash[:], h)
	return a, nil
}

// LastCommit returns the last committed height and app hash.
func (a *App) LastCommit() (int64, wire.Hash) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.height, a.appHash
}

// Info reports the last committed height and app hash, so CometBFT replays
// any block the application has not committed.
func (a *App) Info(context.Context, *abci.RequestInfo) (*abci.ResponseInfo, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	res := &abci.ResponseInfo{Data: "tenzro-train", Version: syncer.Version, AppVersion: AppVersion, LastBlockHeight: a.height}
	if a.height > 0 {
		res.LastBlockAppHash = append([]byte(nil), a.appHash[:]...)
	}
	return res, nil
}

// GenesisState is the application's part of the genesis file (app_state).
type GenesisState struct {
	// Accounts are the genesis allocations: the only way funds exist on a
	// chain without a faucet.
	Accounts []GenesisAccount `json:"accounts"`
}

// GenesisAccount allocates Balance attoTNZO to DID.
type GenesisAccount struct {
	DID     string `json:"did"`
	Balance string `json:"balance"`
}

// MaxGenesisAccounts bounds the allocations of one genesis.
const MaxGenesisAccounts = 100000

// ParseGenesisState decodes app_state strictly: known fields only, valid
// DIDs and amounts, no DID twice.
func ParseGenesisState(b []byte) (*GenesisState, error) {
	var g GenesisState
	if len(b) == 0 {
		return &g, nil
	}
	if err := strict(b, &g); err != nil {
		return nil, fmt.Errorf("genesis app_state: %w", err)
	}
	if len(g.Accounts) > MaxGenesisAccounts {
		return nil, fmt.Errorf("genesis app_state: %d accounts, limit %d", len(g.Accounts), MaxGenesisAccounts)
	}
	seen := map[string]bool{}
	for i, acc := range g.Accounts {
		if err := parseDID(fmt.Sprintf("accounts[%d].did", i), acc.DID); err != nil {
			return nil, fmt.Errorf("genesis app_state: %w", err)
		}
		if _, err := wire.ParseAmount(acc.Balance); err != nil {
			return nil, fmt.Errorf("genesis app_state: accounts[%d].balance: %w", i, err)
		}
		if seen[acc.DID] {
			return nil, fmt.Errorf("genesis app_state: %s is allocated twice", acc.DID)
		}
		seen[acc.DID] = true
	}
	return &g, nil
}

// InitChain applies the genesis allocations (minted from the issuer
// account, in the order listed) and returns the genesis app hash.
func (a *App) InitChain(ctx context.Context, req *abci.RequestInitChain) (*abci.ResponseInitChain, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	g, err := ParseGenesisState(req.AppStateBytes)
	if err != nil {
		return nil, err
	}
	o := newOverlay(a.kv, nil)
	x := &exec{ctx: ctx, o: o, height: req.InitialHeight - 1, timeMs: req.Time.UnixMilli()}
	for _, acc := range g.Accounts {
		amt, _ := wire.ParseAmount(acc.Balance)
		if err := x.transfer(acctIssuer, acctDID(acc.DID), amt, "genesis allocation"); err != nil {
			return nil, fmt.Errorf("genesis allocation to %s: %w", acc.DID, err)
		}
	}
	h, err := a.hashWith(ctx, o, req.InitialHeight-1)
	if err != nil {
		return nil, err
	}
	a.pending, a.pendingHeight, a.pendingHash = o, req.InitialHeight-1, h
	a.log.Info("chain genesis", "chain_id", req.ChainId, "accounts", len(g.Accounts), "app_hash", h)
	return &abci.ResponseInitChain{AppHash: h[:]}, nil
}

// hashWith is the app hash of the committed state with o's writes applied.
func (a *App) hashWith(ctx context.Context, o *overlay, height int64) (wire.Hash, error) {
	state, err := stateRoot(ctx, a.kv, o)
	if err != nil {
		return wire.Hash{}, err
	}
	n, logRoot, err := runLogRoot(ctx, o)
	if err != nil {
		return wire.Hash{}, err
	}
	return AppHash(height, state, n, logRoot), nil
}

// CheckTx does the cheap checks against the committed state: size,
// decoding, signature and nonce (and, for a seal, the receipt's own
// validity). State rules run in FinalizeBlock.
func (a *App) CheckTx(ctx context.Context, req *abci.RequestCheckTx) (*abci.ResponseCheckTx, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.precheck(ctx, req.Tx); err != nil {
		return &abci.ResponseCheckTx{Code: codeOf(err), Log: err.Error()}, nil
	}
	return &abci.ResponseCheckTx{Code: CodeOK}, nil
}

func (a *App) precheck(ctx context.Context, b []byte) error {
	tx, err := DecodeTx(b)
	if err != nil {
		return err
	}
	x := &exec{ctx: ctx, o: newOverlay(a.kv, nil)}
	switch tx.Type {
	case TxTransfer:
		p := tx.Transfer
		return x.checkSigned(p.From, p.Nonce, p.Signature, p.Preimage())
	case TxRegisterSyncer:
		p := tx.RegisterSyncer
		return x.checkSigned(p.DID, p.Nonce, p.Signature, p.Preimage())
	case TxPostTask:
		spec, canon, err := wire.ParseSpec(tx.PostTask.Spec)
		if err != nil {
			return errf(CodeInvalid, "%v", err)
		}
		req := wire.PostTaskParams{Signed: tx.PostTask.Signed}
		return x.checkSigned(spec.SponsorDID, req.Nonce, req.Signature, req.Preimage(spec.SponsorDID, wire.SpecHash(canon), tx.PostTask.InitWeightsHash))
	case TxEnroll:
		p := tx.Enroll
		return x.checkSigned(p.TrainerDID, p.Nonce, p.Signature, p.Preimage())
	case TxLeave:
		p := tx.Leave
		return x.checkSigned(p.TrainerDID, p.Nonce, p.Signature, p.Preimage())
	case TxElectionProof:
		p := tx.ElectionProof
		return x.checkSigned(p.DID, p.Nonce, p.Signature, p.Preimage())
	case TxSubmission:
		s := tx.Submission
		return verifySig(s.TrainerDID, wire.SubmissionPreimage(s.TaskID, s.TrainerDID, s.Round, s.FragmentIndex, s.PayloadHash), s.Signature)
	case TxSeal:
		if err := syncer.CheckReceipt(tx.Seal.Receipt, nil); err != nil {
			return errf(CodeInvalid, "receipt: %v", err)
		}
	case TxCommitRound:
		p := tx.CommitRound
		h, err := syncer.RoundCommitHash(&p.Commit)
		if err != nil {
			return errf(CodeInvalid, "commit: %v", err)
		}
		return x.checkSigned(p.SyncerDID, p.Nonce, p.Signature, p.Preimage(h))
	}
	return nil
}

// FinalizeBlock applies the block's transactions in order, each all or
// nothing, with the block's height and time (never a wall clock), and
// returns the new app hash. Nothing is durable until Commit.
func (a *App) FinalizeBlock(ctx context.Context, req *abci.RequestFinalizeBlock) (*abci.ResponseFinalizeBlock, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	block := a.pending
	if block == nil || a.pendingHeight >= req.Height {
		// No InitChain writes waiting (or a stale finalized block that was
		// never committed: CometBFT replays it from scratch).
		block = newOverlay(a.kv, nil)
	}
	res := &abci.ResponseFinalizeBlock{TxResults: make([]*abci.ExecTxResult, len(req.Txs))}
	timeMs := req.Time.UnixMilli()
	for i, raw := range req.Txs {
		res.TxResults[i] = a.deliver(ctx, block, req.Height, timeMs, raw)
	}
	h, err := a.hashWith(ctx, block, req.Height)
	if err != nil {
		return nil, fmt.Errorf("finalize block %d: %w", req.Height, err)
	}
	a.pending, a.pendingHeight, a.pendingHash = block, req.Height, h
	res.AppHash = append([]byte(nil), h[:]...)
	return res, nil
}

func (a *App) deliver(ctx context.Context, block *overlay, height, timeMs int64, raw []byte) *abci.ExecTxResult {
	tx, err := DecodeTx(raw)
	if err != nil {
		return &abci.ExecTxResult{Code: codeOf(err), Log: err.Error()}
	}
	child := newOverlay(a.kv, block)
	x := &exec{ctx: ctx, o: child, height: height, timeMs: timeMs}
	data, err := x.apply(tx)
	if err != nil {
		code := codeOf(err)
		if code == CodeInternal {
			a.log.Error("transaction failed inside the application", "height", height, "type", tx.Type, "err", err)
		}
		return &abci.ExecTxResult{Code: code, Log: err.Error()}
	}
	child.mergeInto()
	return &abci.ExecTxResult{Code: CodeOK, Data: data, Events: []abci.Event{{Type: "tenzro", Attributes: []abci.EventAttribute{{Key: "type", Value: tx.Type, Index: true}}}}}
}

// Commit makes the finalized block's writes and the new height and app
// hash durable in one atomic store batch.
func (a *App) Commit(ctx context.Context, _ *abci.RequestCommit) (*abci.ResponseCommit, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		return nil, errors.New("chain: commit without a finalized block")
	}
	var b syncer.Batch
	a.pending.batch(&b)
	b.Set(ksMeta, metaHeight, binary.BigEndian.AppendUint64(nil, uint64(a.pendingHeight)))
	b.Set(ksMeta, metaAppHash, append([]byte(nil), a.pendingHash[:]...))
	if err := a.kv.Commit(ctx, &b); err != nil {
		return nil, fmt.Errorf("chain: commit height %d: %w", a.pendingHeight, err)
	}
	a.height, a.appHash = a.pendingHeight, a.pendingHash
	a.pending = nil
	return &abci.ResponseCommit{}, nil
}

// Query paths (data is the argument; only the last committed height is
// served: Height 0 or equal to it).
const (
	QueryBalance   = "/balance"   // data: DID → decimal attoTNZO
	QueryRun       = "/run"       // data: task_id → run record JSON
	QueryCandidate = "/candidate" // data: DID → wire.SyncerCandidate JSON
	QueryRunLog    = "/runlog"    // → RunLogInfo JSON
	QueryNonce     = "/nonce"     // data: DID → last nonce (decimal), "" when none
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
	a.mu.Lock()
	defer a.mu.Unlock()
	if req.Height != 0 && req.Height != a.height {
		return &abci.ResponseQuery{Code: CodeInvalid, Log: fmt.Sprintf("height %d: only the last committed height %d is served", req.Height, a.height), Height: a.height}, nil
	}
	v, err := a.query(ctx, req.Path, string(req.Data))
	if err != nil {
		return &abci.ResponseQuery{Code: codeOf(err), Log: err.Error(), Height: a.height}, nil
	}
	return &abci.ResponseQuery{Code: CodeOK, Key: req.Data, Value: v, Height: a.height}, nil
}

func (a *App) query(ctx context.Context, path, arg string) ([]byte, error) {
	x := &exec{ctx: ctx, o: newOverlay(a.kv, nil)}
	switch path {
	case QueryBalance:
		if err := parseDID("did", arg); err != nil {
			return nil, err
		}
		b, err := x.balance(acctDID(arg))
		if err != nil {
			return nil, err
		}
		return []byte(b.String()), nil
	case QueryRun, QueryCandidate:
		key, what := keyRun(arg), "run"
		if path == QueryCandidate {
			key, what = keyCand(arg), "syncer candidate"
		}
		v, ok, err := x.o.get(ctx, key)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errf(CodeNotFound, "no %s %q", what, arg)
		}
		return v, nil
	case QueryBalanceAcct:
		b, err := x.balance(arg)
		if err != nil {
			return nil, err
		}
		return []byte(b.String()), nil
	case QueryNonce:
		raw, ok, err := x.o.get(ctx, keyNonce(arg))
		if err != nil || !ok {
			return []byte{}, err
		}
		return []byte(fmt.Sprint(binary.BigEndian.Uint64(raw))), nil
	case QueryRunProof:
		return a.runProof(ctx, arg)
	case QueryRunLog:
		n, root, err := runLogRoot(ctx, x.o)
		if err != nil {
			return nil, err
		}
		return json.Marshal(RunLogInfo{Size: n, Root: root})
	}
	return nil, errf(CodeNotFound, "unknown query path %q (want %s, %s, %s, %s, %s or %s)", path, QueryBalance, QueryRun, QueryCandidate, QueryRunLog, QueryRunProof, QueryNonce)
}
